"""verify's verdict on one patch: does it break, or leave broken, what it is judged on?

Every scenario the patch ran is classified against its base run beside it (judge_change/base_change.py: new, fixed, same
as the base, not judged here, unchanged). Three exit codes follow from it:
- verify's default (by change, issue 74): what the absolute one counts, less upstream's own failures in code the
  patch does not touch (judge_change/patch_reach.py: a Qwen2.5-VL fix does not answer for Qwen3-VL's scenarios failing
  as upstream does); those are said, by cause, not counted. What it breaks and what it leaves failing in its own code
  still count.
- verify's absolute (`--absolute`, and `--alone`, which has no upstream beside it): a failure counts against the
  patch unless it is the same as the base's where the base fails for a defect the patch does not touch (an
  upstream entry of scenarios/expectations.yaml with `known_defect`; taken from upstream's arm when it ran beside
  the patch and is itself as expected, else from its expectation with --alone). A patch that leaves #6659's defects
  fails: the absolute truth on the installed verl.
- a pull request's (differential, `harness pr`, `verify --differential`): only what the patch makes worse (new)
  counts; the base's own failures are listed once, with their cause, and not counted.
A cell that cannot run in this environment (judge_change/base_change.py cannot_run_here) is not judged in either.
Head memory is compared with the bound of verl's fused head, one chunk of tokens (judge_change/head_memory.py): known
without running upstream, so the flag is the same with and without --alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import EXIT_COUNTED, EXIT_NOT_JUDGED, EXIT_OK, UsageError
from harness.inputs.expectations import Expectation, drift
from harness.judge_change.base_change import (
    FAILING,
    NEW,
    NOT_JUDGED,
    SAME,
    Change,
    against_base,
    cannot_run_here,
    fails_as,
)
from harness.judge_change.head_memory import HeadMemoryFlag, flag_sizes, fused_head_chunk, head_memory_flag
from harness.plan.diffs import header_name
from harness.records.known_failures import RECIPE_AS_UPSTREAM
from harness.records.measures import RaisedWarning
from harness.records.record_cause import cause_of
from harness.records.results import Record
from harness.render.cause_words import grouped


@dataclass
class PatchVerdict:
    arm: str
    ran: list = field(default_factory=list)  # the arm's records that ran (not skipped)
    failing: list = field(default_factory=list)  # (record, note): counted against the patch
    as_upstream: list = field(default_factory=list)  # (record, known defect, against what): not counted
    changes: list = field(default_factory=list)  # (record, text): a known upstream defect's outcome changed
    memory: list[HeadMemoryFlag] = field(default_factory=list)  # more logits rows than the fused head's chunk
    memory_basis: str = ""  # what head memory was compared with, or why it was not
    # The patch's diff does not apply to the verl verify ran on (records.results.NotApplied): nothing is judged.
    not_applied: object = None
    # (ray trainer's record, v1 trainer's record): one configuration under verl's two trainers, outcomes different
    trainers: list = field(default_factory=list)
    remarks: list = field(default_factory=list)  # (record, text): a pass where rows the trainer never reads differ
    ran_lines: list = field(default_factory=list)  # per hunk, what of the patch ran (judge_change/patch_coverage.py)
    ran_note: str = ""  # the verdict line's words where some of the patch's code ran in no scenario
    # per scenario the patch ran, its record against the base's beside it (judge_change/base_change.py)
    against_base: list[Change] = field(default_factory=list)
    not_judged: list = field(default_factory=list)  # the Change of each cell that cannot run in this environment
    # the exit code follows what the patch changes against its base (harness pr), not the absolute failures
    differential: bool = False
    # verify's default (issue 74): the verdict leads with what the patch changes against upstream beside it, and
    # upstream's own failures in code the patch does not touch are not counted (by_change_counted)
    by_change: bool = False
    # per scenario failing as upstream does in code the patch does not touch: the family file it runs through
    untouched: dict = field(default_factory=dict)
    recipes: list = field(default_factory=list)  # per recipe judged, whether it runs the changed code (recipe_verdict)
    # What the closing block says, computed here so that render/ reads data, never judge_change's code:
    by_cause: list[tuple[str, list]] = field(default_factory=list)  # failures_by_cause(failing): (words, pairs)
    new_warnings: list[NewWarning] = field(default_factory=list)  # raised by its runs, not by those beside it
    warnings_against: str = ""  # what new_warnings compared with ("" where nothing ran beside it)

    def of_kind(self, kind: str) -> list[Change]:
        return [c for c in self.against_base if c.kind == kind]

    @property
    def judged(self) -> list:
        """The records that ran and could be judged here (not stopped by what this environment lacks)."""
        blocked = {id(c.patch) for c in self.not_judged}
        return [r for r in self.ran if id(r) not in blocked]

    @property
    def counted(self) -> list:
        """(record, note) pairs counted against the patch: differential, the new failures; by change, the absolute
        failures less those the same as upstream's in code the patch does not touch; else every counted failure."""
        if self.differential:
            return [(c.patch, c.how) for c in self.of_kind(NEW)]
        if self.by_change:
            return [(r, note) for r, note in self.failing if r.scenario not in self.untouched]
        return self.failing

    @property
    def left_as_upstream(self) -> list[Change]:
        """The changes the same as upstream's in code the patch does not touch (by change: said, not counted)."""
        return [c for c in self.of_kind(SAME) if c.scenario in self.untouched]

    @property
    def nothing_judged(self) -> bool:
        """Nothing here says anything about the patch: it ran nowhere, every cell it ran cannot run in this
        environment, or every one it could run fails exactly as upstream does where nothing names that failure (a
        recipe's own, or, by change, in code the patch does not touch). A known defect's failure is judged: the
        expectation says how upstream fails, and the patch fails exactly so."""
        if not self.ran or not self.judged:
            return True
        if self.differential:
            return False
        spoken_for = {id(r) for r, known, _ in self.as_upstream if known == RECIPE_AS_UPSTREAM}
        if self.by_change:
            spoken_for |= {id(c.patch) for c in self.left_as_upstream}
        return all(id(r) in spoken_for for r in self.judged)

    @property
    def exit_code(self) -> int:
        """harness/errors.py's table. EXIT_OK: nothing counted against the patch; EXIT_COUNTED: something is
        (differential: a new failure; by change: a failure that is not upstream's own outside the patch's code;
        absolute: any counted failure); EXIT_NOT_JUDGED: the patch does not apply to this verl (written for another
        one), or nothing here judges it (nothing_judged): a setup problem or no evidence, never a finding about the
        patch."""
        if self.not_applied is not None and not self.ran:
            return EXIT_NOT_JUDGED
        if self.counted:
            return EXIT_COUNTED
        return EXIT_NOT_JUDGED if self.nothing_judged else EXIT_OK


def judge_patch(
    arm: str,
    records: list[Record],
    expected: dict[str, dict[str, Expectation]],
    differential: bool = False,
    patch_files: list[str] | None = None,
) -> PatchVerdict:
    """The patch's verdict. patch_files (the verl files it changes, patch_changes): by change, verify's default
    (upstream's own failures in code it does not touch said, not counted); None: absolute (or differential)."""
    verdict = PatchVerdict(arm, differential=differential, by_change=patch_files is not None and not differential)
    upstream_runs = {r.scenario: r for r in records if r.arm == "upstream"}
    if arm != "upstream":
        verdict.against_base = against_base(arm, records)
    by_scenario = {c.scenario: c for c in verdict.against_base}
    verdict.memory_basis = memory_basis()
    for record in records:
        if record.arm == arm and record.verdict.not_applied is not None:
            verdict.not_applied = record.verdict.not_applied
        if record.arm != arm or record.outcome == "skipped":
            continue
        verdict.ran.append(record)
        scenario = record.scenario
        upstream = upstream_runs.get(scenario)
        change = by_scenario.get(scenario) or Change(scenario, "", record, None)
        if arm == "upstream" and cannot_run_here(record, base=True):  # upstream is its own base
            change = Change(scenario, NOT_JUDGED, record, None, blocked=cannot_run_here(record, base=True))
        if change.kind == NOT_JUDGED:
            verdict.not_judged.append(change)
            continue
        flag = head_memory_flag(record)
        if flag:
            verdict.memory.append(HeadMemoryFlag(record, flag, flag_sizes(record)))
        remark = record.measures.parity.unread_rows_remark if record.measures.parity else None
        if remark and record.outcome == "pass":
            verdict.remarks.append((record, remark))
        entry = (expected.get(scenario) or {}).get("upstream")
        known = entry.known_defect if entry is not None and arm != "upstream" else None
        if known and upstream is not None and drift(upstream, entry):
            known = None  # upstream did not fail here as its expectation says: nothing known to compare with
        failed = record.outcome in FAILING
        if not known and failed and recipe_fails_as_upstream(record, upstream):
            verdict.as_upstream.append((record, RECIPE_AS_UPSTREAM, "upstream's arm, run beside it"))
            continue
        if not known:
            if failed:
                verdict.failing.append((record, ""))
            continue
        if upstream is not None:
            same = change.kind == SAME
            against = (
                f"upstream's arm, its record reused from {upstream.stamp.reused_from} (the same inputs)"
                if upstream.stamp.reused_from
                else "upstream's arm, run beside it"
            )
        else:
            same = failed and not drift(record, entry)
            against = "upstream's expected outcome in scenarios/expectations.yaml (upstream not run: --alone)"
        if same:
            verdict.as_upstream.append((record, known, against))
        elif failed:
            worse = (
                f"upstream fails here for a known defect ({known}); this patch fails otherwise: a change for the worse"
            )
            verdict.failing.append((record, worse))
        else:
            verdict.changes.append((record, f"upstream: {entry.outcome} ({known}); {arm}: {record.outcome}"))
    verdict.trainers = trainer_differences(verdict.judged)
    verdict.untouched = untouched_same(verdict, patch_files or []) if verdict.by_change else {}
    return closing_facts(verdict, records)


def closing_facts(verdict: PatchVerdict, records: list[Record]) -> PatchVerdict:
    """The verdict with what verify's closing block says beyond the judgement, computed here so that render/ reads
    data, never judge_change's code: the failures by cause, the warnings its runs raised that those beside it did
    not."""
    verdict.by_cause = failures_by_cause(verdict.failing)
    verdict.new_warnings, verdict.warnings_against = new_warnings(verdict.arm, records)
    return verdict


def untouched_same(verdict: PatchVerdict, patch_files: list[str]) -> dict[str, str]:
    """scenario -> its family file, for each scenario failing the same as upstream beside it (base_change.py SAME)
    whose fused forward runs in a family file the patch does not change (judge_change/patch_reach.py): upstream's
    own."""
    from harness.judge_change.patch_reach import touched_families, untouched

    families = touched_families(patch_files)
    found = {}
    for change in verdict.of_kind(SAME):
        file = untouched(change.patch, families)
        if file:
            found[change.scenario] = file
    return found


def memory_basis() -> str:
    """What head memory is compared with: verl's fused head chunk, read from the installed verl."""
    chunk = fused_head_chunk()
    if chunk:
        return f"verl's fused head builds at most {chunk[0]} tokens x vocab at once: {chunk[1]}"
    return "not compared: verl's fused head chunk size was not found in the installed verl"


def recipe_fails_as_upstream(record: Record, upstream: Record | None) -> bool:
    """A recipe's cell (judge_change/recipe_verdict.py is_recipe) failing exactly as upstream's beside it. "Exactly" is
    the differential verdict's one test (judge_change/base_change.py fails_as: the same root error, or the same failing
    parameters and cause), so a recipe's failure counted as upstream's own here is the one `harness pr` calls "same
    as the base", never one it would call new."""
    from harness.judge_change.recipe_verdict import is_recipe

    if upstream is None or record.arm == "upstream" or not is_recipe(record):
        return False
    return fails_as(record, upstream)


@dataclass
class _UnderTrainers:
    """One configuration's records under each of verl's two trainers."""

    ray: list[Record] = field(default_factory=list)
    v1: list[Record] = field(default_factory=list)


def trainer_differences(records: list[Record]) -> list[tuple[Record, Record]]:
    """(ray's record, v1's record) for each configuration run under both of verl's trainers (scenarios that differ
    only in `trainer`, inputs/scenario.py configuration_but_trainer) whose outcomes differ: where a verdict holds
    for one trainer's batch only."""
    from harness.inputs.scenario import configuration_but_trainer

    by_key: dict[str, _UnderTrainers] = {}
    for record in records:
        trainer = record.trainer()
        if trainer in ("ray", "v1") and record.outcome != "skipped":
            key = configuration_but_trainer(record.stamp.scenario_spec.model_dump())
            both = by_key.setdefault(key, _UnderTrainers())
            (both.ray if trainer == "ray" else both.v1).append(record)
    pairs = [(ray, v1) for both in by_key.values() for ray in both.ray for v1 in both.v1]
    return [(ray, v1) for ray, v1 in pairs if ray.outcome != v1.outcome]


# -- what verify's closing block says about the patch (render/verify_closing.py writes it) ------------------------


def patch_changes(patches) -> tuple[str, list[str]]:
    """(the patch's description: the text above each diff's first '---' line, one paragraph; the verl files it
    touches, in the diff's order). An unreadable diff says so rather than stopping the verdict."""
    texts, files = [], []
    for path in patches:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            texts.append(f"({Path(path).name}: not readable: {exc.strerror})")
            continue
        head = re.split(r"^(?:--- |diff --git )", text, maxsplit=1, flags=re.MULTILINE)[0]
        texts.append(" ".join(head.split()))
        # Each name read whole as plan/diffs.py reads it (git's quoted form, or up to a timestamp's tab).
        for old, new in re.findall(r"^--- (.+)\n\+\+\+ (.+)", text, flags=re.MULTILINE):
            old, new = _header_name(old, path), _header_name(new, path)
            name = new if new != "/dev/null" else old
            name = name[2:] if name.startswith(("a/", "b/")) else name
            if name not in files:
                files.append(name)
    description = " ".join(t for t in texts if t) or "(no description above the diff)"
    return description, files


def _header_name(field: str, patch) -> str:
    try:
        return header_name(field, str(patch))
    except UsageError:  # a malformed quoted name: as written, rather than stopping the verdict
        return field.strip()


def failures_by_cause(failing: list) -> list[tuple[str, list]]:
    """verify's failing (record, note) pairs grouped by their cause's kind and subject (records/record_cause.py
    cause_of), each group with its words (render/cause_words.py), the cause explaining the most cells first."""
    groups = grouped(failing, lambda pair: cause_of(pair[0]))
    return sorted(groups, key=lambda kv: -len(kv[1]))


WARNING_CHARS = 110  # a warning's text in the verdict; whole: the record's `warnings`


def _warning_key(w: RaisedWarning) -> tuple[str, str]:
    """A warning as the same from run to run: its category and its text less numbers and addresses."""
    text = re.sub(r"0x[0-9a-f]+|\d+", "N", " ".join(w.message.split()))
    return w.category, text


@dataclass
class NewWarning:
    """A warning an arm's runs raised that the runs beside it did not (new_warnings)."""

    category: str
    text: str  # cut at WARNING_CHARS
    cells: int  # how many of the arm's cells raised it where the cell beside it got as far (compared)
    hazard: str | None  # the known hazard it signals (records/known_failures.py KNOWN_WARNINGS), if any
    harmless: str | None  # why the hazard cannot bite for this arm, where a test shows it
    # how many of the arm's cells raised it where the cell beside it stopped in an earlier phase (rank/phases.py):
    # nothing says the cell beside it would not have raised it too, so these are not "raised only with the patch"
    beyond_base: int = 0


def new_warnings(arm: str, records: list[Record]) -> tuple[list[NewWarning], str]:
    """(the warnings the arm's runs raised that upstream's runs beside it did not, what they were compared with):
    each once, with how many of the arm's cells raised it, the known hazards (records/known_failures.py) first.
    A cell counts only where the cell of its scenario beside it got as far (judge_change/patch_reach.py reached): where
    upstream's crashed earlier, it is counted apart (beyond_base), never as new. upstream itself is compared with
    none; without the runs beside it (--alone) every warning of the arm's is listed."""
    from harness.judge_change.patch_reach import reached

    baseline = "upstream" if arm != "upstream" else "none"  # verify of upstream itself: beside the unfixed none
    beside = [r for r in records if r.arm == baseline and r.outcome != "skipped"]
    against = f"{baseline}'s runs beside it" if beside else ""  # "": nothing to compare with
    seen_upstream = {_warning_key(w) for r in beside for w in (r.warnings or [])}
    beside_of = {r.scenario: r for r in beside}
    found: dict[tuple, NewWarning] = {}
    for r in records:
        if r.arm != arm:
            continue
        base = beside_of.get(r.scenario)
        stopped_earlier = base is not None and reached(base) < reached(r)
        for key, w in {_warning_key(w): w for w in (r.warnings or [])}.items():
            if key in seen_upstream:
                continue
            entry = found.get(key) or _new_warning(found, key, w, arm)
            if stopped_earlier:
                entry.beyond_base += 1
            else:
                entry.cells += 1
    ordered = sorted(found.values(), key=lambda e: (e.cells == 0, e.hazard is None, -e.cells, -e.beyond_base))
    return ordered, against


def _new_warning(found: dict, key: tuple, w: RaisedWarning, arm: str) -> NewWarning:
    from harness.records.known_failures import known_warning

    message = " ".join(w.message.split())
    known = known_warning(message)
    entry = found[key] = NewWarning(
        category=key[0],
        text=message if len(message) <= WARNING_CHARS else message[: WARNING_CHARS - 1] + "…",
        cells=0,
        hazard=known["hazard"] if known else None,
        harmless=(known.get("harmless") or {}).get(arm) if known else None,
    )
    return entry
