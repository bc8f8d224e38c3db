"""What `harness bisect` answers (issue 74): the outcome and cause on each side of the first changed commit, whether
it made the cell better, worse or different, and a known cause named only on a tree that has the code it describes
(`git grep` on the commit). Built records and a two-commit git repository of our own; nothing runs a cell."""

from __future__ import annotations

import pytest
from verl_tree import git  # tests/verl_tree.py

from harness.commands.bisect import cause_on_tree, result_lines
from harness.plan.bisect_search import Result, Signature, Step, direction, search
from harness.records.known_failures import KNOWN_MISMATCHES, known_cause_in

pytestmark = pytest.mark.unit

PACKED = KNOWN_MISMATCHES[0]
PARAMS = tuple(f"model.language_model.layers.{i}.linear_attn.conv1d.weight" for i in range(5))
MISMATCH = Signature("mismatch", None, PARAMS)
OTHER = Signature("mismatch", None, ("lm_head.weight",))
PASS = Signature("pass")
WHY = f"grad {PARAMS[0]}: relative error 0.3 > 0.0001; {PACKED['why']}"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A verl tree whose qwen3_5.py lacks cu_seqlens, then one that has it (as verl #6660 brought it)."""
    repo = tmp_path_factory.mktemp("bisect") / "verl"
    file = repo / PACKED["code"][0]
    file.parent.mkdir(parents=True)
    git(repo.parent, "init", "--quiet", "--initial-branch=main", str(repo))
    commits = []
    for text in (
        "def forward(hidden):\n    return hidden\n",
        "def forward(hidden, cu_seqlens=None):\n    return hidden\n",
    ):
        file.write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "--quiet", "-m", "qwen3_5.py")
        commits.append(git(repo, "rev-parse", "HEAD"))
    return repo, commits


def test_what_the_first_changed_commit_did_to_the_cell():
    assert direction(MISMATCH, PASS) == "better"
    assert direction(PASS, MISMATCH) == "worse"
    assert direction(OTHER, MISMATCH) == "different"


def test_a_signature_names_a_few_parameters_then_how_many_more():
    assert MISMATCH.words() == f"mismatch ({', '.join(PARAMS[:3])}, +2 more)"


def test_a_known_cause_is_named_only_on_a_tree_with_the_code_it_describes(history):
    repo, (without, with_it) = history
    assert known_cause_in(WHY)["code"] == PACKED["code"]
    assert cause_on_tree(repo, with_it, WHY) == WHY
    cut = cause_on_tree(repo, without, WHY)
    assert PACKED["why"] not in cut and cut.startswith(f"grad {PARAMS[0]}: relative error")
    assert cut.endswith(f"(not {PACKED['name']}: this tree has no cu_seqlens in {PACKED['code'][0]})")


def test_the_answer_says_each_sides_outcome_and_cause_and_the_direction(history):
    """GOOD fails another way than the first changed commit: the commit made it different, both causes named, the
    known one cut on the tree without its code."""
    repo, (without, with_it) = history
    steps = {
        without: Step(without, OTHER, 1.0, why="grad lm_head.weight: this rank's gradient only"),
        with_it: Step(with_it, MISMATCH, 1.0, why=WHY),
    }
    result = search([with_it], steps.get, OTHER, MISMATCH)  # BAD is the first changed commit
    assert isinstance(result, Result) and result.first_changed == with_it and result.before is None
    lines = result_lines(result, repo, 2.0, steps)
    assert lines[2].startswith("  before it (") and lines[2].endswith(
        "mismatch (lm_head.weight): grad lm_head.weight: this rank's gradient only"
    )
    assert lines[3].startswith("  at it (") and PACKED["why"] in lines[3]
    assert lines[4] == "  it made the cell fail another way (both causes above)"
    fixed = result_lines(search([with_it], steps.get, MISMATCH, PASS), repo, 2.0, {without: steps[without]})
    assert fixed[4] == "  it made the cell better: failing -> passing" and fixed[3].endswith(": pass")


def test_report_full_lists_no_closest_guesses_where_the_cause_is_known(record):
    """The Qwen3.5 packed-rows cell: dozens of linear_attn gradients fit no pattern; with the cause known (its why),
    `report --full` counts them in one line instead of a guess each."""
    from harness.commands.inspect import full_report
    from harness.records.measures import Diagnosis, GradDiagnosis

    guess = GradDiagnosis(closest="sum", text="no known pattern (closest: the sum over ranks, residual 0.9)")
    cell = record("engine-qwen3-5-packed-samples", "upstream", "mismatch", why=WHY)
    cell.verdict.diagnosis = Diagnosis(grads=dict.fromkeys(PARAMS, guess))
    text = full_report(cell, "r")
    assert "closest:" not in text
    assert "diagnosis: 5 gradient(s) fit no known pattern; their closest-alternative guesses are left out" in text
    cell.verdict.why = f"grad {PARAMS[0]}: relative error 0.3 > 0.0001"  # no known cause: each guess is listed
    assert full_report(cell, "r").count("closest:") == len(PARAMS)
