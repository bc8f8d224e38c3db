"""A verdict as a markdown comment body (`harness pr ... --comment FILE`, `verify --comment FILE`): the verdict line
(render/verdict_line.py: the very line the terminal shows, pr's differential one or verify's by change), the table
against the base (per scenario the base's outcome, the patch's and what changed, with the cause), the base's own
failures once with their cause, what of the PR's changed code ran (its lines and branches, as verify's closing block
says), what did not run or was not judged here, and the command that reproduces one cell. Built from the verdict's
fields and the records (render/differential.py's words); commands/pr_comment.py writes it. Every text of the PR, the
records or the run goes through render/untrusted.py's markdown neutralisers."""

from __future__ import annotations

from dataclasses import dataclass

from harness.records.record_cause import cause_of
from harness.records.results import ChangeKind
from harness.render.cause_words import cause_words
from harness.render.change_verdict import left_unfixed
from harness.render.differential import base_words, groups, with_error
from harness.render.tables import markdown_table, versions_line
from harness.render.untrusted import markdown_code, markdown_code_block, markdown_text
from harness.render.verdict_line import verdict_line

# Marks the body so that a workflow can find and update its own earlier comment rather than add another. No text
# from the pull request can repeat it: render/untrusted.py never writes `<!--` (its '<' is `&lt;`, or broken).
MARKER = "<!-- fsdp2-harness pr verdict -->"
ORDER = tuple(ChangeKind)  # the table's rows in the kinds' one order
CHANGE_WORDS = {
    ChangeKind.NEW: "**new**",
    ChangeKind.FIXED: "fixed",
    ChangeKind.SAME: "same as the base",
    ChangeKind.NOT_JUDGED: "not judged here",
    ChangeKind.UNCHANGED: "-",
    ChangeKind.NO_BASE: "no base beside it",
}
# Which cell the comment reproduces: the first new one, else the base's own failure, else any compared (a choice
# of cell, not an order of the kinds).
REPRODUCE_FIRST = (
    ChangeKind.NEW,
    ChangeKind.SAME,
    ChangeKind.FIXED,
    ChangeKind.UNCHANGED,
    ChangeKind.NOT_JUDGED,
    ChangeKind.NO_BASE,
)
CELL_CHARS = 110
LINE_CHARS = 600  # a sentence of the body (a title, a listed cause) at most
VERDICT_CHARS = 2000  # the verdict line at most: with its flags it is longer than a sentence, and never cut short
RAN_LINES_SHOWN = 40  # the lines on what of the changed code ran; all of them: the terminal's closing block
RAN_LINE_CHARS = 300  # one of them at most (a file's name from the PR is in it)
LEFT_OUT_SHOWN = 6  # the nightly scenarios named; all of them: `harness list`


@dataclass(frozen=True)
class CommentContext:
    """What the body says beyond the verdict and the records; commands/pr_comment.py gathers it from the run."""

    pr: tuple[str, str] | None = None  # (checkout, range): a cell is reproduced with `harness pr`, else with
    patch: str | None = None  # `verify --patch PATCH` (the verdict's arm where None)
    verl: str | None = None  # on this tree, as --verl names it (PATH@COMMIT)
    title: str = ""  # the patch's description
    left_out: tuple[str, ...] = ()  # scenario names verify left out
    skipped_beside: tuple[str, ...] = ()  # lines on the arms beside it that do not apply here
    records: str | None = None  # the results file
    outside: tuple[str, ...] = ()  # files outside verl/, not judged


def _cell(text: str) -> str:
    """A table cell of text from the records, inert (render/untrusted.py: no mention, link, HTML, pipe...)."""
    return markdown_text(text or "", CELL_CHARS)


def _line(text: str) -> str:
    return markdown_text(text or "", LINE_CHARS)


def _cause_cell(change) -> str:
    if change.kind == ChangeKind.NOT_JUDGED:
        return f"cannot run here: {change.blocked}" + (f" ({change.how})" if change.how else "")
    if change.kind == ChangeKind.NEW:
        words = with_error(cause_words([cause_of(change.patch)]), change.patch)
        return words + (f" ({change.how})" if change.how else "")
    if change.kind in (ChangeKind.SAME, ChangeKind.FIXED) and change.base is not None and change.base.outcome != "pass":
        words = cause_words([cause_of(change.base)])
        return words if change.kind == ChangeKind.SAME else f"the base's: {words}"
    return change.how


def change_table(verdict) -> str:
    """One row per scenario the patch ran: W, the base's outcome, the patch's, the change and its cause."""
    rank = {k: i for i, k in enumerate(ORDER)}
    rows = []
    for c in sorted(verdict.against_base, key=lambda c: rank.get(c.kind, len(ORDER))):
        rows.append(
            [
                c.scenario,
                str(c.patch.world_size or "?"),
                c.base.outcome if c.base is not None else "-",
                c.patch.outcome,
                CHANGE_WORDS.get(c.kind, c.kind),
                _cell(_cause_cell(c)),
            ]
        )
    return markdown_table(["scenario", "W", "base", "this PR", "change", "cause"], rows)


def reproduce_command(verdict, context: CommentContext) -> tuple[str, str] | None:
    """(the scenario, the command that runs its cells again, for the verdict the comment gives: verify's default or
    its differential one): the first new cell, else the base's own failure, else any cell compared."""
    rank = {k: i for i, k in enumerate(REPRODUCE_FIRST)}
    chosen = sorted(verdict.against_base, key=lambda c: rank.get(c.kind, 9))
    if not chosen:
        return None
    scenario = chosen[0].scenario
    if context.pr:
        checkout, span = context.pr
        return scenario, f"python -m harness pr {checkout} {span} --scenario {scenario}"
    patch = context.patch or verdict.arm
    on = f" --verl {context.verl}" if context.verl else ""
    differential = " --differential" if verdict.differential else ""
    return scenario, f"python -m harness verify --patch {patch}{on} --scenario {scenario}{differential}"


def comment_body(verdict, records: list, context: CommentContext) -> str:
    """The markdown body: the verdict and its records, with what the context says of the run."""
    lines = [MARKER, f"### fsdp2-harness: {_line(verdict.arm)} against its base ({_line(base_words(records))})", ""]
    if context.title:
        lines += [f"> {_line(context.title)}", ""]
    lines += [f"**{verdict_sentence(verdict)}**", ""]
    if verdict.against_base:
        lines += [change_table(verdict), ""]
    # By change (verify's default), the base's failures in code the PR touches are counted: said apart.
    left = {id(c) for c in left_unfixed(verdict)} if verdict.by_change and not verdict.differential else set()
    counted = groups([c for c in verdict.against_base if id(c) in left], ChangeKind.SAME)
    if counted:
        lines += ["**What this PR leaves failing in code it touches** (as the base fails there; counted):", ""]
        lines += [f"- {_line(words)}: {_scenarios(group)}" for words, group in counted] + [""]
    same = groups([c for c in verdict.against_base if id(c) not in left], ChangeKind.SAME)
    if same:
        lines += ["**What the base still gets wrong** (the same with this PR; not counted against it):", ""]
        lines += [f"- {_line(words)}: {_scenarios(group)}" for words, group in same] + [""]
    new = groups(verdict.against_base, ChangeKind.NEW)
    if new:
        lines += ["**What this PR breaks** (counted; the exit code is 1):", ""]
        lines += [f"- {_line(words)}: {_scenarios(group)}" for words, group in new] + [""]
    lines += ran_block(verdict.ran_lines)
    not_run = _not_run(verdict, context)
    if not_run:
        lines += ["**Not judged here, or not run:**", ""] + [f"- {line}" for line in not_run] + [""]
    again = reproduce_command(verdict, context)
    if again:
        lines += [f"Reproduce one cell ({again[0]}, both arms), from a clone of fsdp2-harness after `make venv`:", ""]
        lines += [markdown_code_block(again[1]), ""]
    footer = versions_line(records)
    if context.records:
        footer += f"; records: {context.records}"
    lines += [f"<sub>{_line(footer)}</sub>", ""]
    return "\n".join(lines)


def verdict_sentence(verdict) -> str:
    """The verdict line as the body's bold sentence: render/verdict_line.py's line, the terminal's, less its
    "verdict: ", inert."""
    return markdown_text(verdict_line(verdict).removeprefix("verdict: "), VERDICT_CHARS)


def ran_block(ran_lines: list[str]) -> list[str]:
    """What of the PR's changed code ran (verdict.ran_lines: commands/ran_lines.py, per file its lines and branches
    that ran and those that did not), as the terminal's closing block has it, in a code block: its file names and
    code are the PR's, so nothing in them is live there (render/untrusted.py markdown_code_block)."""
    if not ran_lines:
        return []
    shown = [line if len(line) <= RAN_LINE_CHARS else line[: RAN_LINE_CHARS - 1] + "…" for line in ran_lines]
    lines = ["**What of this PR's changed code ran** (its lines and branches, per file, in the cells judged):", ""]
    lines += [markdown_code_block("\n".join(shown[:RAN_LINES_SHOWN])), ""]
    if len(shown) > RAN_LINES_SHOWN:
        lines += [f"+{len(shown) - RAN_LINES_SHOWN} more line(s): verify's closing block on the terminal", ""]
    return lines


def _scenarios(group: list) -> str:
    return ", ".join(markdown_code(c.scenario) for c in group)


def _not_run(verdict, context: CommentContext) -> list[str]:
    lines = []
    for words, group in groups(verdict.not_judged, ChangeKind.NOT_JUDGED):
        lines.append(
            f"{_line(words)} in {len(group)} scenario(s) ({_scenarios(group)}): a package this CPU host lacks, or an "
            "import outside the PR's diff; neither arm's outcome there says anything about the PR"
        )
    left_out = context.left_out
    if left_out:
        names = ", ".join(markdown_code(n) for n in left_out[:LEFT_OUT_SHOWN]) + (
            ", …" if len(left_out) > LEFT_OUT_SHOWN else ""
        )
        lines.append(
            f"left out: {len(left_out)} scenario(s) tagged nightly (minutes a cell: {names}); `--nightly` runs them"
        )
    lines += [_line(line) for line in context.skipped_beside]
    if context.outside:
        lines.append(f"files outside verl/, not judged: {', '.join(markdown_code(name) for name in context.outside)}")
    return lines
