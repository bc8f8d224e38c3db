"""The one verdict line of verify and pr, written here for each of the three verdicts.

The verdicts (judge_change/patch_verdict.py PatchVerdict):
- by change, verify's default (issue 74): what the patch fixes and breaks against upstream beside it, what it leaves
  failing in its own code (counted) and as upstream has it elsewhere (not counted), by cause;
- differential, `harness pr` and `verify --differential`: what the patch changes against its base (only the new
  counted), then what the base still gets wrong;
- absolute, `verify --absolute`, `--alone` and verify of upstream itself: fails in how many scenarios, or passes all
  it is judged on, with what is not counted.
Each ends with what could not be judged here and verify's flags (head memory, trainers, the recipes' word or the
changed lines'). The terminal's closing block (render/verify_closing.py) and the pull request's comment body
(render/comment_body.py) both write this one line, so they say the same. It reads the verdict's fields, never judge's
code: render comes before judge_change."""

from __future__ import annotations

from harness.records.results import ChangeKind
from harness.render.change_verdict import by_base_cause, left_unfixed, untouched_files
from harness.render.differential import groups, names, top_causes


def verdict_line(verdict) -> str:
    """The verdict line of whichever verdict `verdict` is: differential, by change (where something ran beside the
    patch to compare with), else absolute."""
    flags = memory_note(verdict) + trainer_note(verdict.trainers)
    said = recipe_note(verdict.recipes, len(verdict.ran))  # the recipes' word, where it is said, is the more exact
    if verdict.differential:
        return _differential(verdict, flags + (said or verdict.ran_note))
    if verdict.by_change and verdict.against_base:
        return _by_change(verdict, flags + (said or verdict.ran_note))
    return _absolute(verdict, flags, said)


def memory_note(verdict) -> str:
    """The head-memory flag: the scenarios whose logits are larger than upstream's fused head builds, with sizes."""
    if not verdict.memory:
        return ""
    sizes = ", ".join(f"{flag.record.scenario}: {flag.sizes}" for flag in verdict.memory)
    count = len(verdict.memory)
    return f"; FLAG: larger tokens x vocab logits than upstream's fused head in {count} scenario(s) ({sizes})"


def trainer_note(pairs: list) -> str:
    """The line's word on verl's trainers where an outcome differs between them: which trainer's batch fails."""
    if not pairs:
        return ""
    failing = sorted({t for ray, v1 in pairs for t, r in (("ray", ray), ("v1", v1)) if r.outcome != "pass"})
    shown = ", ".join(f"{ray.scenario} / {v1.scenario}" for ray, v1 in pairs)
    return (
        f"; outcome differs between verl's trainers in {len(pairs)} configuration(s) ({shown}): fails under "
        f"{' and '.join(failing)}'s batch"
    )


def recipe_note(answers: list, records_ran: int) -> str:
    """What the line adds where every scenario judged is a recipe that does not run the changed code
    (judge_change/recipe_verdict.py RecipeAnswer): its pass or fail is no verdict on the change."""
    if answers and len(answers) == records_ran and not any(a.runs for a in answers):
        return "; but no recipe judged runs the code it changes (recipe lines above): nothing said about the change"
    return ""


def not_judged_note(verdict) -> str:
    """ "; not judged here: 15 (cannot run here: flash_attn: 15)": the line's words on the cells this environment
    cannot run (verdict.not_judged: verify of upstream itself has them without a base to compare)."""
    found = groups(verdict.not_judged, ChangeKind.NOT_JUDGED)
    if not found:
        return ""
    count = sum(len(g) for _, g in found)
    return f"; not judged here: {count} ({', '.join(f'{w}: {len(g)}' for w, g in found)})"


def _not_applied(verdict, hint: bool) -> str:
    """The patch does not apply to this verl: where to judge it (hint: verify's words on how, and a port's)."""
    na = verdict.not_applied
    line = (
        f"verdict: {verdict.arm} NOT JUDGED: it does not apply to this verl ({na.where}: {na.why}); judge it on the "
        "verl it was written for"
    )
    if hint:
        line += " (VERL=PATH[@REF], or `harness pr`)" + (f", or make one for this verl: {na.port}" if na.port else "")
    return line


# The kinds that count as compared with the base: each of these scenarios ran beside it and was judged.
COMPARED = (ChangeKind.NEW, ChangeKind.FIXED, ChangeKind.SAME, ChangeKind.UNCHANGED)


def _by_kind(changes) -> tuple[dict, int]:
    """The changes by kind (every kind a key), and how many were compared with the base."""
    of = {k: [c for c in changes if c.kind == k] for k in ChangeKind}
    return of, sum(len(of[k]) for k in COMPARED)


def _not_run(verdict, not_judged: str) -> str | None:
    """verify's line where nothing it judges ran: the patch does not apply, no scenario ran, or none can run in this
    environment; None where something was judged."""
    if verdict.not_applied is not None and not verdict.ran:
        return _not_applied(verdict, hint=True)
    if not verdict.ran:
        return f"verdict: {verdict.arm} NOT JUDGED: it could not be run in any scenario here"
    if not verdict.judged:
        return f"verdict: {verdict.arm} NOT JUDGED: no scenario can run in this environment{not_judged}"
    return None


def _absolute(verdict, flags: str, said: str) -> str:
    """verify --absolute's line: every failure counted but a known defect's (and a recipe's failing as upstream's)."""
    name = verdict.arm
    not_counted = (
        f"; {len(verdict.as_upstream)} more fail(s) exactly as upstream does (not counted, above)"
        if verdict.as_upstream
        else ""
    )
    not_judged = not_judged_note(verdict)
    if verdict.failing:
        return (
            f"verdict: {name} FAILS in {len(verdict.failing)} of {len(verdict.judged)} scenario(s){not_counted}"
            f"{not_judged}{flags}{said} (by cause above)"
        )
    not_run = _not_run(verdict, not_judged)
    if not_run:
        return not_run
    judged = len(verdict.judged) - len(verdict.as_upstream)
    remarked = f"; {len(verdict.remarks)} with a remark (above)" if verdict.remarks else ""
    if not judged:  # every scenario fails exactly as upstream does: nothing passes, nothing is the patch's
        lead = "NOT JUDGED: judged on no scenario here" if verdict.nothing_judged else "fails only as upstream does"
        return (
            f"verdict: {name} {lead}: each of the {len(verdict.ran)} fails exactly as upstream does (not counted, "
            f"above){flags}{said or verdict.ran_note}"
        )
    return (
        f"verdict: {name} passes all {judged} scenario(s) it is judged on here{not_counted}{not_judged}{flags}"
        f"{remarked}{said or verdict.ran_note}"
    )


def _by_change(verdict, notes: str) -> str:
    """verify's default line: what the patch fixes and breaks against upstream beside it, what it leaves failing in
    its own code (counted) and as upstream has it elsewhere (not counted), by cause; what could not be judged."""
    name, changes = verdict.arm, verdict.against_base
    of, compared = _by_kind(changes)
    not_judged = not_judged_note(verdict)
    if not compared or verdict.nothing_judged:
        return _by_change_not_judged(verdict, compared, not_judged + notes)
    fixes = f"fixes {names(of[ChangeKind.FIXED])}" if of[ChangeKind.FIXED] else ""
    beside = "compared with upstream run beside it"
    if of[ChangeKind.NEW]:
        lead = f"verdict: {name} BREAKS {names(of[ChangeKind.NEW])} of {compared} {beside}"
        lead += f": {top_causes(groups(changes, ChangeKind.NEW))}" + (f"; {fixes}" if fixes else "")
    elif fixes:
        lead = f"verdict: {name} {fixes} of {compared} {beside}, and breaks none"
    else:
        lead = f"verdict: {name} changes no outcome in the {compared} scenario(s) {beside}"
    unfixed = left_unfixed(verdict)
    if unfixed:
        lead += f"; LEAVES {len(unfixed)} failing as upstream does, in code it touches: "
        lead += top_causes(by_base_cause(unfixed))
    elsewhere = verdict.left_as_upstream
    if elsewhere:
        lead += (
            f"; leaves {len(elsewhere)} as upstream has them, in code it does not touch ({untouched_files(verdict)}): "
            f"{top_causes(by_base_cause(elsewhere))} (not counted)"
        )
    known = len([r for r, _, _ in verdict.as_upstream if r.scenario not in verdict.untouched])  # each said once
    if known:
        lead += f"; {known} fail(s) exactly as upstream does for a known verl defect (not counted)"
    no_base = [r for r, _ in verdict.counted if r.scenario in {c.scenario for c in of[ChangeKind.NO_BASE]}]
    if no_base:
        lead += f"; FAILS in {len(no_base)} without upstream beside it"
    return lead + not_judged + notes


def _by_change_not_judged(verdict, compared: int, notes: str) -> str:
    return _not_run(verdict, notes) or (
        f"verdict: {verdict.arm} NOT JUDGED: each of the {compared} scenario(s) compared fails exactly as upstream "
        f"does, where the patch changes nothing it runs or for a known verl defect{notes}"
    )


def _differential(verdict, notes: str) -> str:
    """A pull request's line: it leads with what the patch changes (breaks, fixes, or no outcome), then what its base
    still gets wrong (the same with it, by cause), what could not run here."""
    name, changes = verdict.arm, verdict.against_base
    kinds, compared = _by_kind(changes)
    not_judged = not_judged_note(verdict)
    if verdict.not_applied is not None and not verdict.ran:
        return _not_applied(verdict, hint=False)
    if verdict.ran and not compared and not kinds[ChangeKind.NO_BASE]:
        return f"verdict: {name} NOT JUDGED: no scenario can run in this environment{not_judged}"
    if not verdict.ran:
        return f"verdict: {name} could not be run in any scenario here"
    if kinds[ChangeKind.NEW]:
        lead = f"verdict: {name} BREAKS {names(kinds[ChangeKind.NEW])} of {compared} compared with its base"
        lead += f": {top_causes(groups(changes, ChangeKind.NEW))}"
        if kinds[ChangeKind.FIXED]:
            lead += f"; fixes {names(kinds[ChangeKind.FIXED])}"
    elif kinds[ChangeKind.FIXED]:
        fixed = names(kinds[ChangeKind.FIXED])
        lead = f"verdict: {name} fixes {fixed} of {compared} compared with its base, and breaks none"
    else:
        lead = f"verdict: {name} changes no outcome in the {compared} scenario(s) compared with its base"
    same = groups(changes, ChangeKind.SAME)
    if same:
        lead += f"; its base still fails {len(kinds[ChangeKind.SAME])} of them, the same with it: {top_causes(same)}"
    elif compared and not kinds[ChangeKind.NEW] and not kinds[ChangeKind.FIXED]:
        lead += "; its base passes them all"
    if kinds[ChangeKind.NO_BASE]:
        lead += f"; {len(kinds[ChangeKind.NO_BASE])} without its base beside it (outcomes in the table)"
    return lead + not_judged + notes
