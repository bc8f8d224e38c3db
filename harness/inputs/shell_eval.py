"""What bash evaluates on values already known, for inputs/shell_script.py: an `if` condition's status (its `[ ... ]`
tests, true/false, `!`, joined by `&&` and `||`) and `$((...))`'s integer arithmetic. Nothing is run: a command or an
unknown value makes the answer None (not known)."""

from __future__ import annotations

import ast
import fnmatch
import re

_MARKER = "\x00U"  # inputs/shell_script.py's mark of an unknown inside a word


def combine(value: bool | None, op: str, result: bool | None) -> bool | None:
    """A list's status so far, joined with the next command's by `&&`, `||` or `;` (None: not known)."""
    if op == ";":
        return result
    if op == "&&":
        if value is False or result is False:
            return False
        return None if None in (value, result) else True
    if value is True or result is True:
        return True
    return None if None in (value, result) else False


def command_status(words: list[str]) -> bool | None:
    """A command of an if's condition: `[ ... ]`, `[[ ... ]]`, `test ...`, true, false, `!`; None for any other
    command (it is not run) or a test on an unknown value."""
    if words and words[0] == "!":
        inner = command_status(words[1:])
        return None if inner is None else not inner
    if words in (["true"], [":"]):
        return True
    if words == ["false"]:
        return False
    if words and words[0] in ("[", "[[") and words[-1] == {"[": "]", "[[": "]]"}[words[0]]:
        args, glob = words[1:-1], words[0] == "[["
    elif words and words[0] == "test":
        args, glob = words[1:], False
    else:
        return None
    if any(_MARKER in a for a in args):
        return None
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2 and args[0] in ("-z", "-n"):
        return (args[1] == "") == (args[0] == "-z")
    if len(args) == 3 and args[1] in ("=", "==", "!="):
        same = fnmatch.fnmatchcase(args[0], args[2]) if glob else args[0] == args[2]
        return same if args[1] != "!=" else not same
    numeric = {"-eq": "==", "-ne": "!=", "-lt": "<", "-le": "<=", "-gt": ">", "-ge": ">="}
    if len(args) == 3 and args[1] in numeric and all(re.fullmatch(r"-?\d+", a) for a in (args[0], args[2])):
        a, b = int(args[0]), int(args[2])
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[numeric[args[1]]]
    return None  # a file test, a regex, ...: not looked at


def integer(node) -> int:
    """bash's integer arithmetic on an expression tree of integers (Python's ast): + - * / % ** << >> & | ^, unary
    - + ~ !, comparisons, and/or, the conditional; division and remainder truncate toward zero as bash's do."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp):
        v = integer(node.operand)
        ops = {ast.USub: lambda: -v, ast.UAdd: lambda: v, ast.Invert: lambda: ~v, ast.Not: lambda: int(not v)}
        return ops[type(node.op)]()
    if isinstance(node, ast.BinOp):
        a, b = integer(node.left), integer(node.right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if b == 0:
                raise ZeroDivisionError
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return q if not isinstance(node.op, ast.Mod) else a - b * q
        if isinstance(node.op, ast.Pow) and (b < 0 or b > 64):
            raise ValueError("exponent")
        ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
        if type(node.op) in ops:
            return ops[type(node.op)]
        other = {ast.Pow: lambda: a**b, ast.LShift: lambda: a << b, ast.RShift: lambda: a >> b}
        other.update({ast.BitAnd: lambda: a & b, ast.BitOr: lambda: a | b, ast.BitXor: lambda: a ^ b})
        return other[type(node.op)]()
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        a, b = integer(node.left), integer(node.comparators[0])
        compare = {ast.Eq: a == b, ast.NotEq: a != b, ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b}
        return int(compare[type(node.ops[0])])
    if isinstance(node, ast.BoolOp):
        values = [integer(v) for v in node.values]
        return int(all(values) if isinstance(node.op, ast.And) else any(values))
    raise ValueError("not bash arithmetic")
