"""The per-hunk lines about what of a patch ran (judge/patch_coverage.py), as verify, `report` and `upstream`'s
REPORT.md print them: the hunks from the arm's diffs (the files, or the text a record keeps), what ran from the
records, and what earlier records of the same diffs say of the scenarios a run left out."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UsageError
from harness.judge.patch_coverage import coverage_lines, coverage_note, hunk_coverage
from harness.plan.arms import installed_verl_dir, patch_from_text
from harness.plan.diffs import read_patch
from harness.plan.patch_lines import PatchHunk, patch_hunks
from harness.records.results import Record, VerlTree


def hunks_of_files(patches) -> list[PatchHunk]:
    """The hunks of an arm's diff files, applied to the installed verl as its copy was."""
    return patch_hunks(installed_verl_dir(), [(Path(p), read_patch(Path(p))) for p in patches])


def hunks_of_record(record: Record) -> list[PatchHunk]:
    """The hunks of the diffs a record keeps (stamp.arm_patches), applied to the verl the record ran on (the verl
    tree of VERL=PATH[@REF] where it ran on one: its line numbers are those its ranks watched, not the installed
    verl's); [] where it keeps none or they no longer apply."""
    import tempfile

    patches = record.stamp.arm_patches or []
    try:
        files = [patch_from_text(p.text, p.sha256, p.file, "record") for p in patches]
        if not files:
            return []
        diffs = [(f, f.read_bytes()) for f in files]
        tree = record.stamp.verl_tree
        if not tree:
            return patch_hunks(installed_verl_dir(), diffs)
        with tempfile.TemporaryDirectory() as tmp:
            return patch_hunks(_tree_copy(tree, Path(tmp)), diffs)
    except UsageError:
        return []


def _tree_copy(tree: VerlTree, where: Path) -> Path:
    """The verl package of the tree a record ran on, written under `where` (its verl/ directory returned)."""
    from harness.plan.verl_trees import source_files

    for name, blob in source_files(Path(tree.path), tree.commit or tree.ref).items():
        target = where / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
    return where / "verl"


def patch_ran_lines(
    hunks: list[PatchHunk], arm: str, records: list[Record], left_out: list[str] = (), earlier_from: Path | None = None
) -> tuple[list[str], str]:
    """(the lines about each hunk, the verdict line's note) for the arm's records; left_out: the scenarios the run
    left out (Scenario); earlier_from: the results file of this run, whose neighbours' records of the same diffs
    tell about the scenarios left out."""
    mine = [r for r in records if r.arm == arm]
    earlier = earlier_records(mine, earlier_from) if earlier_from is not None and left_out else []
    coverage = hunk_coverage(hunks, mine, earlier, left_out)
    return coverage_lines(coverage, mine, [s.name for s in left_out]), coverage_note(coverage, mine)


def report_ran_lines(records: list[Record], arm: str | None) -> list[str]:
    """`report`'s lines for the arm a verify judged: its hunks from the diffs its records keep."""
    mine = [r for r in records if r.arm == arm and r.stamp.arm_patches]
    if arm is None or not mine:
        return []
    return patch_ran_lines(hunks_of_record(mine[0]), arm, records)[0]


def earlier_records(mine: list[Record], this_file: Path) -> list[Record]:
    """Records of other results files with the same diffs (by their sha256) and the lines watched."""
    from harness.records.store import records_mentioning

    shas = [p.sha256 for r in mine[:1] for p in (r.stamp.arm_patches or [])]
    if not shas:
        return []
    found = records_mentioning(shas[0], exclude=this_file)
    return [r for r in found if [p.sha256 for p in r.stamp.arm_patches or []] == shas]
