"""The lines of an arm's diffs that can run, hunk by hunk: what a rank watches for (rank/measures/line_watch.py)
and what verify's closing block says of each hunk (ran in which scenarios, or in none).

A hunk's lines are those it writes into the patched file (plan/diffs.py changed_lines) that run inside a function:
Python's own compiler says which lines hold code (a code object's co_lines), without importing the module. Lines
that run when the module is imported (imports, definitions, class bodies) are left out, also where a function's code
names them too (its `def` line and decorators, which the module's code runs to define it): every rank imports the
file, so they would say "ran" of a hunk whose function body never did (a new function counted in every scenario
that imports its file, where only those that call it ran it).

They are written as patch_lines.json beside the arm's copy, which the ranks read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.plan.diffs import ENCODING, HunkOrigin, changed_lines
from harness.render.untrusted import terminal_text

# Beside the arm's copy of verl (plan/arms.py materialise): {"verl/...": [line, ...]}, what the ranks watch.
PATCH_LINES_FILE = "patch_lines.json"
_CO_NEWLOCALS = 0x2  # inspect.CO_NEWLOCALS: a function's frame (a module's or class body's has none)


@dataclass(frozen=True)
class PatchHunk:
    """One hunk of an arm's diffs: where it sits and the lines of it that can run."""

    origin: HunkOrigin
    lines: tuple[int, ...]  # 1-based lines of the patched file, inside a function, that hold code
    where: str  # the function those lines are in (its qualified name), or what the hunk touches otherwise
    conditions: tuple[str, ...] = ()  # the if-branches inside that function holding its first line, outermost first

    @property
    def name(self) -> str:
        """'hunk 2 of transformer_impl.py': its number in its file of its diff, as patch(1) counts."""
        return f"hunk {self.origin.number} of {terminal_text(Path(self.origin.file).name, keep='')}"


def patch_hunks(verl_dir: Path, diffs: list[tuple[Path, bytes]]) -> list[PatchHunk]:
    """Every hunk of the diffs, in diff order, with its lines that can run (none: it changes no function's code)."""
    hunks = []
    for path, (text, by_hunk) in changed_lines(verl_dir, diffs).items():
        functions, at_import = _function_lines(text, path) if path.endswith(".py") else ([], set())
        branches = _branches(text) if functions else []
        for origin, lines in by_hunk.items():
            runnable = tuple(n for n in lines if n not in at_import and any(n in f_lines for _, f_lines in functions))
            where, conditions = (
                _where(runnable, functions, branches) if path.endswith(".py") else (_not_python(path), ())
            )
            hunks.append(PatchHunk(origin, runnable, where, conditions))
    return hunks


def watched_lines(hunks: list[PatchHunk]) -> dict[str, list[int]]:
    """What the ranks watch: per file, every hunk's lines that can run."""
    out: dict[str, set[int]] = {}
    for h in hunks:
        if h.lines:
            out.setdefault(h.origin.file, set()).update(h.lines)
    return {file: sorted(lines) for file, lines in sorted(out.items())}


def write_watched(target: Path, hunks: list[PatchHunk]) -> None:
    (target / PATCH_LINES_FILE).write_text(json.dumps(watched_lines(hunks), indent=1) + "\n")


def _function_lines(text: str, path: str) -> tuple[list[tuple[str, set[int]]], set[int]]:
    """((qualified name, the lines holding its code) of every function, lambda and comprehension of the source,
    innermost last; the lines the module's and class bodies' code runs on import: `def` lines, decorators, default
    values); ([], set()) where it does not compile (the rank's import says so, as an error)."""
    try:
        module = compile(text.encode(*ENCODING), path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return [], set()
    found, at_import, stack = [], set(), [module]
    while stack:
        code = stack.pop()
        lines = {line for _, _, line in code.co_lines() if line is not None}
        if code.co_flags & _CO_NEWLOCALS:
            found.append((code.co_qualname, lines | {code.co_firstlineno}))
        else:
            at_import |= lines
        stack.extend(c for c in code.co_consts if hasattr(c, "co_lines"))
    return found, at_import


def _branches(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, condition) of every branch of an `if` in the source: its body under the test, its
    `else` under the test negated; [] where it does not parse."""
    import ast

    from harness.python_ast import parse

    try:
        tree = parse(text)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = ast.unparse(node.test)
        found.append((node.body[0].lineno, node.body[-1].end_lineno, test))
        if node.orelse:  # an elif is an `if` inside the else: both conditions hold there
            negated = f"not {test}" if isinstance(node.test, (ast.Name, ast.Attribute, ast.Call)) else f"not ({test})"
            found.append((node.orelse[0].lineno, node.orelse[-1].end_lineno, negated))
    return found


def _not_python(path: str) -> str:
    """What a hunk of a file that is no Python module changes: a config's defaults (plan/config_change.py names
    them, key by key), or data."""
    if path.endswith((".yaml", ".yml")):
        return "a config file: the defaults it changes, by key, below"
    return "not a Python module: no line of it runs as code"


def _where(runnable: tuple[int, ...], functions: list, branches: list) -> tuple[str, tuple[str, ...]]:
    """(the innermost function holding the hunk's first line that can run, with the branches of `if`s inside it
    that hold that line, outermost first: "FSDPEngineWithLMHead.prepare_model_outputs, where use_remove_padding and
    not use_fused_kernels"; those branches' conditions). Else what the hunk changes."""
    if not runnable:
        return "no line of it runs inside a function: imports, definitions or comments only", ()
    line = runnable[0]
    holding = [(min(f_lines), name) for name, f_lines in functions if line in f_lines]
    start, name = max(holding)  # the innermost: it starts last
    name = name.replace(".<locals>", "")
    tests = tuple(test for first, last, test in sorted(branches) if start <= first <= line <= last)
    if not tests:
        return name, ()
    where = " and ".join(tests)
    return f"{name}, where {where if len(where) <= 90 else where[:89] + '…'}", tests
