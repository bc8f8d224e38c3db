"""verify's closing block about the patch, as lines: the recipes' answers first (is my recipe hit?), what the patch is
(its description and the files it touches), what it changes against what ran beside it (by change, differential) or
its failures by cause (absolute), where its outcome differs between verl's trainers, the remarks on its passes, what of
its changed code ran, the warnings its runs raised that upstream's did not, the arms beside it that do not apply here,
the cost flags, the families it leaves with #6659's defect, the verdict line (render/verdict_line.py), and where the
counted cells' details are.

commands/run.py print_verdict gathers the data and prints these lines. They are written from the verdict's fields
(judge_change/patch_verdict.py PatchVerdict, with what judge_patch computed for them: by_cause, new_warnings, the head
memory flags' sizes), the records and a ClosingContext, never from judge_change's code: render comes before it."""

from __future__ import annotations

import os.path
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.records.known_failures import RECIPE_AS_UPSTREAM
from harness.render.verdict_line import verdict_line

DESCRIPTION_LINES = 3  # the patch's description, wrapped; all of it: the diff file
SCENARIOS_SHOWN = 4  # the scenarios named after a cause; all of them: the table above
WARNINGS_SHOWN = 3  # the kinds of new warnings listed; all of them: each record's `warnings`


@dataclass(frozen=True)
class AboutPatch:
    """What the patch is, read from its diff files (judge_change/patch_verdict.py patch_changes)."""

    where: tuple[str, ...]  # the diff files, as shown
    description: str  # the text above each diff's first '---', one paragraph
    files: tuple[str, ...]  # the verl files it touches, in the diff's order (from the patch: untrusted text)


@dataclass(frozen=True)
class ClosingContext:
    """What the block says beyond the verdict and the records; commands/run.py gathers it from the run."""

    about: AboutPatch | None = None  # None: no patch (verify of upstream itself)
    families: tuple[str, ...] = ()  # the lines on the family files it leaves with #6659's defect (FamilyView.lines)
    results: str = ""  # the results file, as shown
    # (run_dir, finished_at) -> the record's line in the results file: where each counted cell's details are
    record_lines: Mapping[tuple, int] = field(default_factory=dict)


def closing_lines(verdict, records: list, context: ClosingContext) -> list[str]:
    """The block, a line each, in the order a reviewer reads it."""
    lines = recipe_lines(verdict.recipes)  # the user's question first: is my recipe hit?
    if context.about is not None:
        lines += about_patch_lines(verdict.arm, context.about)
    lines += change_lines(verdict, records)
    lines += trainer_lines(verdict)
    if verdict.remarks:
        lines.append(
            f"remarks on passes of {verdict.arm}: rows verl's trainer never reads differ, the rows it reads do not:"
        )
    lines += [f"  {r.scenario}: {text}" for r, text in verdict.remarks[:SCENARIOS_SHOWN]]
    lines += [*verdict.ran_lines, *warning_lines(verdict)]
    beside = [r for r in records if r.arm != verdict.arm and r.verdict.not_applied is not None]
    if beside:
        from harness.inputs.expectations import not_applied_lines

        lines += ["beside it, skipped on this verl:", *not_applied_lines(beside)]
    lines += cost_lines(verdict)
    lines += context.families
    lines.append(verdict_line(verdict))
    if verdict.counted:
        lines += detail_lines(verdict.counted, context)
    return lines


def recipe_lines(answers: list) -> list[str]:
    """A line per recipe (judge_change/recipe_verdict.py RecipeAnswer): its answer, then what the patch changes for
    it."""
    lines = []
    for a in answers:
        lines += [f"recipe {a.scenario}: {a.answer}", f"  {a.change}"]
    return lines


def about_patch_lines(name: str, about: AboutPatch) -> list[str]:
    """What the patch changes: its description, wrapped and cut, and the files it touches."""
    from harness.render.untrusted import terminal_text

    lines = textwrap.wrap(about.description, 116, break_on_hyphens=False)
    if len(lines) > DESCRIPTION_LINES:
        lines = lines[: DESCRIPTION_LINES - 1] + [lines[DESCRIPTION_LINES - 1][:112] + " …"]
    names = ", ".join(terminal_text(f, keep="") for f in about.files)  # a newline in a name never makes a line
    return [
        f"about {name} ({', '.join(about.where)}):",
        *[f"  {line}" for line in lines],
        f"  touches: {names or '(no file)'}",
    ]


def change_lines(verdict, records: list) -> list[str]:
    """What the patch changes against what ran beside it: a pull request's block (differential), verify's default
    (by change, then the absolute count), or the absolute verdict's own lists."""
    if verdict.differential:  # a pull request: what it changes against its base, in place of the absolute lists
        from harness.render.differential import change_block

        return change_block(verdict, records)
    if verdict.by_change:  # verify's default: what it changes against upstream beside it, then the absolute count
        from harness.render.change_verdict import absolute_line
        from harness.render.change_verdict import change_block as by_change_block

        return [*by_change_block(verdict, records), absolute_line(verdict)]
    return absolute_lines(verdict)


def absolute_lines(verdict) -> list[str]:
    """verify --absolute's lists: what is not counted (a known defect failed as upstream does), a known defect's
    outcome changed, the failures by cause; then one line counting the same scenarios against upstream beside it."""
    from harness.render.differential import summary_line

    name, lines = verdict.arm, []
    if verdict.as_upstream:
        recipe = any(known == RECIPE_AS_UPSTREAM for _, known, _ in verdict.as_upstream)
        why = "for a known verl defect" + (", or upstream's own failure in a recipe" if recipe else "")
        lines.append(f"not counted against {name}: it fails there exactly as upstream does, {why}:")
    for r, known, against in verdict.as_upstream:
        lines.append(f"  {r.scenario}: {r.outcome}: same as upstream: {known} (compared with {against})")
    if verdict.changes:
        lines.append(f"{name} changes upstream's outcome where upstream fails for a known verl defect:")
    lines += [f"  {r.scenario}: {text}" for r, text in verdict.changes]
    if verdict.failing:
        lines.append(f"failures of {name}, by cause:")
        lines += [f"  {cause}: {scenarios_named(pairs)}" for cause, pairs in verdict.by_cause]
    line = summary_line(verdict)
    return lines + ([line] if line else [])


def scenarios_named(pairs: list) -> str:
    """ "engine-bf16-no-sync" or "24 scenarios (a, b, c, d, …)"; a note (a change for the worse) marks its scenario."""
    names = [
        f"{r.scenario}{' (upstream fails here for a known defect; otherwise)' if note else ''}" for r, note in pairs
    ]
    if len(names) == 1:
        return names[0]
    shown = ", ".join(names[:SCENARIOS_SHOWN]) + (", …" if len(names) > SCENARIOS_SHOWN else "")
    return f"{len(names)} scenarios ({shown})"


def trainer_lines(verdict) -> list[str]:
    """Where the patch's outcome differs between verl's two trainers (the batch each hands the engine): a line per
    configuration run under both (judge_change/patch_verdict.py trainer_differences)."""
    if not verdict.trainers:
        return []
    lines = [f"{verdict.arm}'s outcome differs between verl's trainers (the batch each hands the engine):"]
    for ray, v1 in verdict.trainers:
        lines.append(f"  {ray.scenario} (trainer: ray): {ray.outcome}; {v1.scenario} (trainer: v1): {v1.outcome}")
    return lines


def warning_lines(verdict) -> list[str]:
    """The warnings the patch's runs raised that upstream's did not (verdict.new_warnings: judge_change/patch_verdict.py
    new_warnings), known hazards first (records/known_failures.py KNOWN_WARNINGS)."""
    arm, found = verdict.arm, verdict.new_warnings
    new = [w for w in found if w.cells]
    lines = []
    if new:
        against = verdict.warnings_against
        compared = f"that {against} did not" if against else "(nothing ran beside it to compare with)"
        lines.append(f"warnings {arm}'s runs raised {compared}:")
    for w in new[:WARNINGS_SHOWN]:
        beyond = f" (+{w.beyond_base} where upstream's cell stopped earlier)" if w.beyond_base else ""
        lines.append(f"  {w.cells} cell(s){beyond}: {w.category}: {w.text}")
        if w.hazard:
            note = f"; {w.harmless}" if w.harmless else ""
            lines.append(f"    HAZARD: {w.hazard}{note}")
    if len(new) > WARNINGS_SHOWN:
        lines.append(f"  +{len(new) - WARNINGS_SHOWN} more kind(s): each record's `warnings`")
    unknown = [w for w in found if not w.cells]
    if unknown:  # raised only where upstream's cell crashed before that far: not known to be the patch's
        shown = "; ".join(f"{w.category}: {w.text} ({w.beyond_base} cell(s))" for w in unknown[:2])
        more = f"; +{len(unknown) - 2} more" if len(unknown) > 2 else ""
        lines.append(f"warnings raised only where upstream's cell stopped earlier (not compared): {shown}{more}")
    return lines


def cost_lines(verdict) -> list[str]:
    """The head-memory flags (judge_change/head_memory.py HeadMemoryFlag): a line each, the rest counted."""
    lines = [
        f"cost: head memory: {f.record.scenario}: {verdict.arm} {f.text}" for f in verdict.memory[:SCENARIOS_SHOWN]
    ]
    if len(verdict.memory) > SCENARIOS_SHOWN:
        lines.append(
            f"cost: head memory: +{len(verdict.memory) - SCENARIOS_SHOWN} more scenario(s) (in the verdict line)"
        )
    return lines


def detail_lines(counted: list, context: ClosingContext) -> list[str]:
    """After the verdict, where each counted failing cell's whole error, traceback and diagnosis are, and its rank
    logs (counted: (record, note) pairs): two lines, whatever the number of cells."""
    keys = [(r.run_dir, r.stamp.finished_at) for r, _ in counted]
    at = [str(context.record_lines[k]) for k in keys if k in context.record_lines]
    first = f"{context.results}:{at[0]}" if at else context.results
    records = f"whole error, traceback, diagnosis: python -m harness report --full {first}"
    if len(at) > 1:
        records += f" (the failing cells: lines {', '.join(at)})"
    dirs = [r.run_dir for r, _ in counted if r.run_dir]
    if len(dirs) > 1:
        return [records, f"rank logs: {os.path.commonpath(dirs)}/*/torchrun.log ({len(dirs)} failing run(s))"]
    return [records, f"rank logs: {dirs[0]}/torchrun.log"] if dirs else [records]
