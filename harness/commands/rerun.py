"""rerun: run a record's scenario (as stored in it, seed included) with the same arm, and compare the outcome.

On the verl the record ran on: a record made on a verl tree (stamp.verl_tree, plan/verl_trees.py) runs again on
that tree's commit, in its environment; one whose tree cannot be had again as it was (edits since gone, the
checkout gone) is refused in one line, as is a --verl (VERL=) other than the record's.

The arm's diffs come from the record itself (their text is stored with their sha256, checked before use), so a
record reruns after its patch files are gone or changed; a record from before the text was stored needs them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.errors import EXIT_COUNTED, EXIT_OK, UsageError
from harness.paths import ROOT


def cmd_rerun(args) -> int:
    from harness.inputs.scenario import Scenario
    from harness.paths import shown_path
    from harness.plan.arms import Arm, patch_from_text, resolve_arm
    from harness.records.failure_signature import FailureSignature
    from harness.records.store import load_record, package_versions, sha256_file
    from harness.render.tables import COLUMNS, markdown_table, row
    from harness.run.runner import run_plan

    record = load_record(args.record)
    _written_here(args.record)
    on_records_verl(record, args.record)
    if record.stamp.scenario_spec is None:
        raise UsageError(f"{args.record}: field 'stamp.scenario_spec': missing (a record from before it was stored)")
    scenario = Scenario.model_validate_json(json.dumps(record.stamp.scenario_spec.written()))
    patches = []
    for patch in record.stamp.arm_patches or []:
        path = ROOT / patch.file if not Path(patch.file).is_absolute() else Path(patch.file)
        if patch.text is not None:
            patches.append(patch_from_text(patch.text, patch.sha256, patch.file, args.record))
            if not path.is_file() or sha256_file(path) != patch.sha256:
                state = "no longer exists" if not path.is_file() else "changed since the record was made"
                print(f"note: {patch.file} {state}; using the diff stored in the record", file=sys.stderr)
            continue
        if not path.is_file():
            raise UsageError(f"{args.record}: field 'stamp.arm_patches': {patch.file} no longer exists")
        if sha256_file(path) != patch.sha256:
            raise UsageError(
                f"{args.record}: field 'stamp.arm_patches': {patch.file} changed since the record was made"
            )
        patches.append(path)
    arm = Arm(record.arm, tuple(patches)) if patches else resolve_arm("upstream")
    now = package_versions()
    for name, then in (record.stamp.versions or {}).items():
        if now.get(name) != then:
            print(f"note: {name} is {now.get(name)} now, {then} in the record", file=sys.stderr)
    result = run_plan("rerun", [(scenario, arm)])
    again = result.records[0]
    # Which row is which: the stored record first, then this run.
    print(markdown_table(["run"] + COLUMNS, [["stored record"] + row(record), ["new run"] + row(again)]))
    finished = record.stamp.finished_at or "?"
    print(f"stored record: {args.record} (finished {finished}); new run: {shown_path(result.path)}:1")
    # The outcome alone (records/failure_signature.py same_outcome): a rerun repeats its cell on this host, where a
    # number's last bits may move within the same outcome.
    same = FailureSignature.of(again).same_outcome(FailureSignature.of(record))
    print(
        f"rerun: outcome {again.outcome} ({'same as' if same else 'differs from'} the stored record's {record.outcome})"
    )
    return EXIT_OK if same else EXIT_COUNTED


def _written_here(ref: str) -> None:
    """A record whose MAC does not verify (records/signing.py: edited, or written by a pull request's code into
    results/) is not rerun; one without a MAC (older than signing, or a `--json` list) reruns as before."""
    from harness.records.store import mac_state

    if mac_state(ref) == "forged":
        raise UsageError(
            f"{ref}: field 'mac': does not verify: not written by this harness (edited since, or made elsewhere); "
            "not rerun"
        )


def on_records_verl(record, where: str) -> None:
    """Returns where this process runs on the verl the record ran on; runs this command again on the record's tree
    (plan/verl_trees.py enter: exec) where it does not yet; refuses (UsageError) where it cannot."""
    from harness.plan.verl_trees import enter, resolve
    from harness.records.results import VerlTree
    from harness.render.tables import tree_words

    then, now = record.stamp.verl_tree, VerlTree.of_this_command()
    field = f"{where}: field 'stamp.verl_tree'"
    if then is None and now is None:
        return
    if then is None or now is not None:
        same = then is not None and now.commit == then.commit
        if same and (not then.dirty or now.key == then.key):
            return
        ran = tree_words(then) if then else "the installed verl"
        raise UsageError(
            f"{field}: the record ran on {ran}, this command runs on {tree_words(now)}; rerun it without --verl (or "
            "VERL=): it runs on the record's verl"
        )
    if not then.commit:
        raise UsageError(f"{field}: the record ran on {then.path}, outside git: it cannot be had again as it was")
    if then.dirty:  # its files on disk, edits included: only where they are still as they were
        try:
            here, _ = resolve(then.path)
        except UsageError as exc:
            raise UsageError(f"{field}: {exc}") from None
        if here.key != then.key:
            raise UsageError(
                f"{field}: the record ran on {tree_words(then)} with local edits, which are no longer as they were "
                "there: it cannot run again on that verl"
            )
    try:
        enter(then.spec, ["rerun", where])  # exec: the record's tree; returns where that tree is the installed verl
    except UsageError as exc:
        raise UsageError(f"{field}: {exc}") from None
