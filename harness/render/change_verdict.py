"""verify's default verdict in words (issue 74): it leads with what the patch changes against upstream run beside it
(what it fixes, what it breaks), then what it leaves as upstream has it, named once by cause (in code it does not
touch: not counted; in its own code: counted), then what could not be judged here, and last the absolute count that
`verify --absolute` would give. Reads the verdict's fields (judge_change/patch_verdict.py PatchVerdict: arm,
against_base, untouched, counted, as_upstream, failing, ran, judged, not_judged, not_applied) and the records, never
judge's code.
"""

from __future__ import annotations

from harness.records.record_cause import cause_of
from harness.render.cause_words import grouped
from harness.render.differential import groups, names, not_judged_note

CAUSES_SHOWN = 2  # the causes named in the verdict line; all of them: the block above it


def top_causes(found: list[tuple[str, list]], shown: int = CAUSES_SHOWN) -> str:
    """ "cause (n), cause (m), +k other cause(s)": the largest groups first."""
    ordered = sorted(found, key=lambda kv: -len(kv[1]))
    parts = [f"{words} ({len(group)})" for words, group in ordered[:shown]]
    more = f", +{len(ordered) - shown} other cause(s)" if len(ordered) > shown else ""
    return ", ".join(parts) + more


def _by_base_cause(changes: list) -> list[tuple[str, list]]:
    return grouped(changes, lambda c: cause_of(c.base))


def left_unfixed(verdict) -> list:
    """The scenarios failing as upstream does in code the patch touches, counted (not a known defect)."""
    counted = {id(r) for r, _ in verdict.counted}
    return [c for c in verdict.against_base if c.kind == "same" and id(c.patch) in counted]


def _files(verdict) -> str:
    return ", ".join(sorted(set(verdict.untouched.values())))


def change_block(verdict, records: list) -> list[str]:
    """The block above the verdict line: per class, its scenarios grouped by cause, one line a group."""
    from harness.render.differential import base_words

    changes = verdict.against_base
    if not changes:
        return []
    elsewhere = {c.scenario for c in verdict.left_as_upstream}
    known = {id(r) for r, _, _ in verdict.as_upstream if r.scenario not in elsewhere}
    rows = [
        ("fixed: upstream fails, it passes", "fixed", [c for c in changes if c.kind == "fixed"]),
        ("BREAKS: fails where upstream passes, or otherwise (counted)", "new", [c for c in changes if c.kind == "new"]),
        ("leaves failing in code it touches, as upstream does (counted)", "same", left_unfixed(verdict)),
        (
            f"left as upstream has it, in code it does not touch ({_files(verdict)}; not counted)",
            "same",
            verdict.left_as_upstream,
        ),
        (
            "the same as upstream, for a known verl defect or a recipe's own (not counted)",
            "same",
            [c for c in changes if c.kind == "same" and id(c.patch) in known],
        ),
        ("not judged here: the cell cannot run in this environment", "not judged", verdict.not_judged),
        ("unchanged: passes, as upstream does", "unchanged", [c for c in changes if c.kind == "unchanged"]),
    ]
    lines = [f"what {verdict.arm} changes against upstream ({base_words(records)}, run beside it), per scenario:"]
    for heading, kind, chosen in rows:
        if not chosen:
            continue
        lines.append(f"  {heading}:")
        for words, group in groups(chosen, kind):
            lines.append(f"    {words + ': ' if words else ''}{names(group)}")
    return lines


def change_line(verdict, notes: str = "") -> str:
    """The verdict line: what the patch fixes and breaks against upstream beside it, what it leaves failing in its
    own code (counted) and as upstream has it elsewhere (not counted), by cause; what could not be judged here;
    notes: verify's flags (head memory, trainers, recipes), each starting "; "."""
    name, changes = verdict.arm, verdict.against_base
    of = {k: [c for c in changes if c.kind == k] for k in ("new", "fixed", "same", "unchanged", "no base")}
    compared = len(of["new"]) + len(of["fixed"]) + len(of["same"]) + len(of["unchanged"])
    not_judged = not_judged_note(verdict)
    if not compared or verdict.nothing_judged:
        return _not_judged_line(verdict, compared, not_judged + notes)
    fixes = f"fixes {names(of['fixed'])}" if of["fixed"] else ""
    if of["new"]:
        lead = f"verdict: {name} BREAKS {names(of['new'])} of {compared} compared with upstream run beside it"
        lead += f": {top_causes(groups(changes, 'new'))}" + (f"; {fixes}" if fixes else "")
    elif fixes:
        lead = f"verdict: {name} {fixes} of {compared} compared with upstream run beside it, and breaks none"
    else:
        lead = f"verdict: {name} changes no outcome in the {compared} scenario(s) compared with upstream run beside it"
    unfixed = left_unfixed(verdict)
    if unfixed:
        lead += f"; LEAVES {len(unfixed)} failing as upstream does, in code it touches: "
        lead += top_causes(_by_base_cause(unfixed))
    elsewhere = verdict.left_as_upstream
    if elsewhere:
        lead += (
            f"; leaves {len(elsewhere)} as upstream has them, in code it does not touch ({_files(verdict)}): "
            f"{top_causes(_by_base_cause(elsewhere))} (not counted)"
        )
    known = len([r for r, _, _ in verdict.as_upstream if r.scenario not in verdict.untouched])  # each said once
    if known:
        lead += f"; {known} fail(s) exactly as upstream does for a known verl defect (not counted)"
    no_base = [r for r, _ in verdict.counted if r.scenario in {c.scenario for c in of["no base"]}]
    if no_base:
        lead += f"; FAILS in {len(no_base)} without upstream beside it"
    return lead + not_judged + notes


def _not_judged_line(verdict, compared: int, notes: str) -> str:
    name = verdict.arm
    if verdict.not_applied is not None and not verdict.ran:
        na = verdict.not_applied
        return (
            f"verdict: {name} NOT JUDGED: it does not apply to this verl ({na.where}: {na.why}); judge it on the verl "
            "it was written for (VERL=PATH[@REF], or `harness pr`)"
        )
    if not verdict.ran:
        return f"verdict: {name} NOT JUDGED: it could not be run in any scenario here"
    if not verdict.judged:
        return f"verdict: {name} NOT JUDGED: no scenario can run in this environment{notes}"
    return (
        f"verdict: {name} NOT JUDGED: each of the {compared} scenario(s) compared fails exactly as upstream does, "
        f"where the patch changes nothing it runs or for a known verl defect{notes}"
    )


def absolute_line(verdict) -> str:
    """One line under the by-change verdict: what `verify --absolute` counts (every failure but a known defect's)."""
    failing, judged = len(verdict.failing), len(verdict.judged)
    word = f"FAILS in {failing} of {judged}" if failing else f"passes all {judged - len(verdict.as_upstream)}"
    return f"absolute (--absolute: upstream's own failures counted too): {word} scenario(s)"
