"""rerun runs a record on the verl the record ran on (commands/rerun.py on_records_verl): a record made on a verl tree
runs again on that tree's commit, or is refused in one line; a record of the installed verl is never run on a tree.
The tree is the tests' own checkout (tests/verl_tree.py); nothing is launched."""

from __future__ import annotations

import json

import pytest
from verl_tree import make_verl_repo  # tests/verl_tree.py

from harness.commands.rerun import on_records_verl
from harness.errors import UsageError
from harness.paths import VERL_TREE_ENV
from harness.plan import verl_trees

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_verl_repo(tmp_path_factory.mktemp("tree"))


@pytest.fixture
def entered(monkeypatch):
    """What on_records_verl asks verl_trees.enter to run on (its exec is the part not run here)."""
    calls = []
    monkeypatch.setattr(verl_trees, "enter", lambda spec, argv: calls.append((spec, argv)))
    monkeypatch.delenv(VERL_TREE_ENV, raising=False)
    return calls


def on_tree(record, repo, **tree):
    made, _ = verl_trees.resolve(f"{repo.path}@fsdp2-lmhead-forward")
    record.stamp.verl_tree = {**made.model_dump(), **tree}
    return record


def test_a_record_of_a_tree_runs_again_on_its_commit_not_its_ref(record, repo, entered):
    on_records_verl(on_tree(record(), repo), "results/x.jsonl:3")
    assert entered == [(f"{repo.path}@{repo.fix}", ["rerun", "results/x.jsonl:3"])]


def test_once_there_it_goes_on(record, repo, entered, monkeypatch):
    made = on_tree(record(), repo)
    monkeypatch.setenv(
        VERL_TREE_ENV, json.dumps({**made.stamp.verl_tree.model_dump(), "ref": made.stamp.verl_tree.commit})
    )
    on_records_verl(made, "x:1")
    assert entered == []


@pytest.mark.parametrize(
    "ran_on, runs_on, words",
    [
        (None, "tree", "the record ran on the installed verl, this command runs on "),
        ("tree", "other", "this command runs on /elsewhere@main (bbbbbbbbbbbb); rerun it without --verl"),
    ],
)
def test_a_record_never_runs_on_another_verl(record, repo, entered, monkeypatch, ran_on, runs_on, words):
    made = on_tree(record(), repo) if ran_on else record()
    now = {"path": "/elsewhere", "ref": "main", "commit": "b" * 40, "dirty": False, "key": "k"}
    monkeypatch.setenv(VERL_TREE_ENV, json.dumps(now))
    with pytest.raises(UsageError) as caught:
        on_records_verl(made, "x:1")
    assert str(caught.value).startswith("x:1: field 'stamp.verl_tree': ") and words in str(caught.value)
    assert entered == []


def test_a_record_of_edits_since_gone_or_of_a_lost_checkout_is_refused(record, repo, entered, tmp_path):
    edited = on_tree(record(), repo, ref=None, dirty=True, key="0.9.1-tree-000000000000")
    with pytest.raises(UsageError, match="with local edits, which are no longer as they were there"):
        on_records_verl(edited, "x:1")
    lost = on_tree(record(), repo, path=str(tmp_path / "gone"), dirty=True)
    with pytest.raises(UsageError, match=r"^x:1: field 'stamp.verl_tree': VERL=.*gone: no such directory"):
        on_records_verl(lost, "x:1")
    outside_git = on_tree(record(), repo, commit=None)
    with pytest.raises(UsageError, match="outside git: it cannot be had again as it was"):
        on_records_verl(outside_git, "x:1")
    assert entered == []


def test_a_record_of_the_installed_verl_runs_here(record, entered):
    on_records_verl(record(), "x:1")
    assert entered == []


def test_a_record_whose_mac_does_not_verify_is_not_rerun(record, tmp_path, capsys):
    """The driver's record reruns; the same line edited (its outcome flipped) is refused in one line before anything
    runs; a line with no MAC (older than signing) goes on with a note."""
    from argparse import Namespace

    from harness.commands.rerun import cmd_rerun
    from harness.records.signing import signed_record
    from harness.records.store import mac_state

    data = signed_record(record(outcome="mismatch").written())
    path = tmp_path / "20261201T000000Z-verify-1.jsonl"
    lines = [data, {**data, "outcome": "pass"}, {k: v for k, v in data.items() if k != "mac"}]
    path.write_text("".join(json.dumps(d, sort_keys=True, default=str) + "\n" for d in lines))
    assert [mac_state(f"{path}:{n}") for n in (1, 2, 3)] == ["signed", "forged", "unsigned"]
    with pytest.raises(UsageError, match=r"jsonl:2: field 'mac': does not verify: not written by this harness"):
        cmd_rerun(Namespace(record=f"{path}:2"))
