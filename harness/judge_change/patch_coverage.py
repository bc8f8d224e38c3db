"""What of a patch ran, hunk by hunk: per hunk of its diffs, the scenarios whose ranks ran one of its lines (the
records' measures.patch_lines_run, rank/measures/line_watch.py); for a hunk that ran in none, where it might run
(earlier records, the left-out scenarios' settings). The closing block says it by lines and branches
(judge_change/changed_coverage.py); the recipes' answers (judge_change/recipe_verdict.py) read it per hunk.

A verdict is evidence about the code that ran: a hunk no scenario ran is one the verdict says nothing about, and a
pass where none of the patch's lines ran is no pass of the change. Scenarios left out of the run (nightly ones)
are named for such a hunk where earlier records of the same diffs show that they run it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.plan.patch_lines import PatchHunk
from harness.records.results import Record

SCENARIOS_NAMED = 4  # the scenarios named after a hunk; all of them: each record's measures.patch_lines_run


@dataclass
class HunkCoverage:
    hunk: PatchHunk
    ran_in: list[str] = field(default_factory=list)  # the scenarios of this run whose ranks ran one of its lines
    elsewhere: list[str] = field(default_factory=list)  # scenarios not run here whose earlier records ran it
    # scenarios not run here whose engine settings are what its branch conditions ask: {scenario: "setting: value"}
    matching: dict[str, str] = field(default_factory=dict)

    @property
    def runnable(self) -> bool:
        return bool(self.hunk.lines)


def _ran(hunk: PatchHunk, record: Record) -> bool:
    ran = (record.measures.patch_lines_run or {}).get(hunk.origin.file) or []
    return bool(set(ran) & set(hunk.lines))


def recorded(records: list[Record]) -> list[Record]:
    """The records that watched the patch's lines (a cell that failed before verl was imported has none)."""
    return [r for r in records if r.measures.patch_lines_run is not None and r.outcome != "skipped"]


def hunk_coverage(
    hunks: list[PatchHunk], records: list[Record], earlier: list[Record] = (), left_out: list = ()
) -> list[HunkCoverage]:
    """Per hunk, the scenarios of records (the patch's own cells) that ran it; for a hunk that ran in none here,
    earlier: the same diffs' records from before, of scenarios not among records, and left_out: the scenarios
    (inputs/scenario.py Scenario) this run left out, matched against its branch conditions."""
    here = recorded(records)
    names = {r.scenario for r in records}
    before = [r for r in recorded(list(earlier)) if r.scenario not in names]
    out = []
    for hunk in hunks:
        cover = HunkCoverage(hunk, sorted({r.scenario for r in here if _ran(hunk, r)}))
        if hunk.lines and not cover.ran_in:
            cover.elsewhere = sorted({r.scenario for r in before if _ran(hunk, r)})
            cover.matching = {s.name: m for s in left_out if (m := settings_match(hunk, s))}
        out.append(cover)
    return out


def settings_match(hunk: PatchHunk, scenario) -> str | None:
    """Where a hunk's branch conditions name settings of a scenario's `engine:` section by name ("not
    use_fused_kernels"), and the scenario's values are what they ask, those settings ("use_fused_kernels: false");
    None where no condition names one, or one is not met. A cheap way to tell, from the source's words: a
    condition on anything else (a tensor, another flag) is not judged."""
    engine = scenario.engine
    met = []
    for condition in hunk.conditions:
        for term in condition.split(" and "):
            negated = term.startswith("not ")
            name = term.removeprefix("not ").strip("() ")
            value = getattr(engine, name, None) if name in type(engine).model_fields else None
            if value is None or not isinstance(value, bool):
                continue
            if value == negated:
                return None
            met.append(f"{name}: {str(value).lower()}")
    return ", ".join(met) or None


def unrun(coverage: list[HunkCoverage]) -> list[HunkCoverage]:
    """The hunks with lines that can run which ran in no scenario."""
    return [c for c in coverage if c.runnable and not c.ran_in]


def scenarios_named(scenarios: list[str]) -> str:
    shown = ", ".join(scenarios[:SCENARIOS_NAMED]) + (", …" if len(scenarios) > SCENARIOS_NAMED else "")
    return f"{len(scenarios)} scenario(s) ({shown})"
