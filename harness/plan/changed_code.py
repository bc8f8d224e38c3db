"""An arm's changed code as lines and branches, per file: the changed lines that can run (plan/patch_lines.py's, of
every hunk of the file), the branches of the changed code (each way out of a changed `if`, loop or other statement
coverage.py counts as a branch: its arcs), and the words that name them. Read from the patched file's text on the
driver side, never imported: coverage.py's own parser says which statements branch and where to (the same rules by
which the rank's measurement, coverage.py with branch=True, records the arcs taken), the AST says what each is.

The rank keeps the arcs that leave these statements (rank/measures/line_watch.py, from PATCH_ARCS_FILE beside the
arm's copy): the raw lines of each branching statement, as the tracer reports them (a multi-line `if (a and\\n b):`
may leave from its last line); `first_line` maps them back.

The branching statements are written as patch_arcs.json (PATCH_ARCS_FILE) beside the arm's copy.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.plan.patch_lines import PatchHunk
from harness.python_ast import PARSE_LOCK

# Beside the arm's copy of verl: {"verl/...": [raw line, ...]}, the lines whose outgoing arcs the ranks keep.
PATCH_ARCS_FILE = "patch_arcs.json"
WORDS = 60  # the longest condition quoted in a branch's words


@dataclass(frozen=True)
class Branch:
    """One way out of a branching statement of the changed code: the arc (line, to); to < 0 leaves the function
    (coverage.py's exit of the code object starting at -to)."""

    line: int
    to: int
    words: str  # "`if equal_layout:` true"


@dataclass(frozen=True)
class Guard:
    """A block of code run only on one way out of a branch: an `if`'s body or its `else`, a loop's body."""

    first: int
    last: int
    words: str  # "the `if equal_layout:` branch", "the `else` of `if group is None:`"


@dataclass
class ChangedFile:
    """One file's changed code: its lines that can run, its branches, and what names a range of it."""

    file: str
    lines: tuple[int, ...]  # 1-based lines of the patched file, inside a function, that hold code (every hunk's)
    branches: tuple[Branch, ...] = ()
    guards: tuple[Guard, ...] = ()
    functions: tuple[tuple[int, int, str, int], ...] = ()  # (first, last, name, its body's first line) of each
    first_line: dict[int, int] = field(default_factory=dict)  # raw line of a multi-line statement -> its first

    @property
    def name(self) -> str:
        return Path(self.file).name

    def arc(self, raw: tuple[int, int]) -> tuple[int, int]:
        """A measured arc in statement lines (its ends' first lines; an exit stays negative)."""
        a, b = raw
        return self.first_line.get(a, a), (b if b < 0 else self.first_line.get(b, b))

    def guard_of(self, line: int) -> Guard | None:
        """The innermost block holding the line."""
        holding = [g for g in self.guards if g.first <= line <= g.last]
        return max(holding, key=lambda g: (g.first, -g.last)) if holding else None

    def function_of(self, line: int) -> tuple[int, int, str, int] | None:
        holding = [f for f in self.functions if f[0] <= line <= f[1]]
        return max(holding, key=lambda f: f[0]) if holding else None


def changed_files(texts: dict[str, str], hunks: list[PatchHunk]) -> list[ChangedFile]:
    """Per Python file with changed lines that can run (texts: "verl/..." -> its patched text), its changed code."""
    by_file: dict[str, set[int]] = {}
    for h in hunks:
        if h.lines:
            by_file.setdefault(h.origin.file, set()).update(h.lines)
    return [_changed_file(file, texts[file], sorted(lines)) for file, lines in sorted(by_file.items()) if file in texts]


def _changed_file(file: str, text: str, lines: list[int]) -> ChangedFile:
    out = ChangedFile(file, tuple(lines))
    try:
        from coverage.parser import PythonParser

        with PARSE_LOCK:  # coverage.py's parser runs ast.parse too
            tree = ast.parse(text)
            parser = PythonParser(text=text, filename=file)
            parser.parse_source()
    except Exception:  # noqa: BLE001 - coverage.py's parser or the AST refuses it: the lines alone are said
        return out
    statements = {parser.first_line(n) for n in lines}
    exits = parser.exit_counts()
    branching = sorted(n for n in statements if exits.get(n, 0) > 1)
    nodes = {n.lineno: n for n in ast.walk(tree) if isinstance(n, ast.stmt)}
    arcs = sorted(a for a in parser.arcs() if a[0] in branching)
    out.branches = tuple(Branch(a, b, _branch_words(nodes.get(a), b)) for a, b in arcs)
    out.guards = tuple(_guards(tree))
    out.functions = tuple(
        (n.lineno, n.end_lineno, n.name, _first_statement(n))
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    )
    last = len(text.splitlines())
    out.first_line = {n: parser.first_line(n) for n in range(1, last + 1) if parser.first_line(n) != n}
    return out


def _first_statement(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The line of a function's first statement that runs: its docstring runs nothing."""
    body = fn.body
    docstring = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
    return body[1].lineno if docstring and len(body) > 1 else body[0].lineno


def arc_lines(changed: ChangedFile) -> list[int]:
    """The raw lines whose outgoing arcs the rank keeps: every line of each branching statement."""
    starts = {b.line for b in changed.branches}
    spans = {raw for raw, first in changed.first_line.items() if first in starts}
    return sorted(starts | spans)


def write_arc_lines(target: Path, files: list[ChangedFile]) -> None:
    watched = {c.file: arc_lines(c) for c in files if c.branches}
    (target / PATCH_ARCS_FILE).write_text(json.dumps(watched, indent=1) + "\n")


def _quoted(node: ast.stmt) -> str:
    """A statement's head as the source has it, cut short: "if equal_layout:", "for x in xs:"."""
    if isinstance(node, ast.If):
        head = f"if {ast.unparse(node.test)}:"
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        head = f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}:"
    elif isinstance(node, ast.While):
        head = f"while {ast.unparse(node.test)}:"
    else:
        head = ast.unparse(node).splitlines()[0]
    return head if len(head) <= WORDS else head[: WORDS - 2] + "…:"


def _branch_words(node: ast.stmt | None, to: int) -> str:
    """One way out of a branching statement, in the words of its kind: an `if` true or false, a loop's body
    entered or the loop left; else the line it goes to."""
    where = "the function's exit" if to < 0 else f"line {to}"
    if node is None:
        return f"to {where}"
    head = _quoted(node)
    into_body = node.body[0].lineno if getattr(node, "body", None) else None
    if isinstance(node, ast.If):
        return f"`{head}` {'true' if to == into_body else 'false'}"
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return f"`{head}` {'its body entered' if to == into_body else 'left'}"
    return f"`{head}` to {where}"


def _guards(tree: ast.AST) -> list[Guard]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            head = _quoted(node)
            out.append(Guard(node.body[0].lineno, node.body[-1].end_lineno, f"the `{head}` branch"))
            if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
                out.append(Guard(node.orelse[0].lineno, node.orelse[-1].end_lineno, f"the `else` of `{head}`"))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            out.append(Guard(node.body[0].lineno, node.body[-1].end_lineno, f"the body of `{_quoted(node)}`"))
    return out


def changed_code(verl_dir: Path, diffs: list[tuple[Path, bytes]], hunks: list[PatchHunk]) -> list[ChangedFile]:
    """The changed code of an arm's diffs (hunks: patch_hunks of the same) on this verl, per Python file."""
    from harness.plan.diffs import changed_lines

    found = changed_lines(verl_dir, diffs)
    texts = {path: text for path, (text, _) in found.items() if text is not None and path.endswith(".py")}
    return changed_files(texts, hunks)
