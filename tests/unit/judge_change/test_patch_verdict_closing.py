"""issue 49: verify's closing block about the patch, numbers that are not judged, whys that name the cause."""

from __future__ import annotations

import pytest
from record_builder import VIEW_WARNING, make_record  # tests/record_builder.py (tests/ is on sys.path: its conftest)

from harness.records.measures import UpdateStepNumbers
from harness.records.results import FailureKind, GradientOf

pytestmark = pytest.mark.unit


def test_an_update_number_without_a_bound_shows_as_not_judged():
    """bf16: no bound on the update (inputs/tolerances.py update_rel None): the column says so, not a number."""
    from harness.render.tables import row

    update = {"update_worst_rel": 0.27, "update_worst_param": "model.visual.blocks.0.norm2.weight"}
    bf16 = {"logprob_abs": 0.1, "update": {"update_rel": None, "param_rel": 0.02}}
    cells = row(make_record("engine-update-bf16", outcome="pass", update=update, tolerance=bf16))
    assert "update not judged" in cells and not any("0.27" in c for c in cells)
    fp32 = {"logprob_abs": 1e-5, "update": {"update_rel": 0.05, "param_rel": 1e-3}}
    cells = row(make_record("engine-update-adamw", outcome="pass", update=update, tolerance=fp32))
    assert "update 0.27 (visual.blocks.0.norm2.weight)" in cells


HSDP_TAIL = """Traceback (most recent call last):
  File "/home/u/fsdp2-harness/harness/rank/verl_side/engine_path.py", line 334, in _compare
    entry["grads"] = compare_gradients(handle.engine.module.named_parameters(), oracle.grads)
  File "/home/u/fsdp2-harness/harness/rank/measures/parity.py", line 120, in compare_gradients
    share = chunk(expected).float().cpu()
  File "/home/u/fsdp2-harness/harness/rank/measures/parity.py", line 32, in chunk
    return distribute_tensor(full.detach(), mesh, placements, src_data_rank=None).to_local().cpu()
  File "/u/h/.venv/lib/python3.11/site-packages/torch/distributed/tensor/_api.py", line 941, in distribute_tensor
    raise ValueError(
"""


def _error(type_, message, phase, tail=HSDP_TAIL):
    from harness.records.results import RankError

    return RankError(
        type=type_, message=message, phase=phase, rank=0, traceback_tail=tail,
        root_cause={"type": type_, "message": message},
    )  # fmt: skip


def test_a_harness_side_traceback_while_reading_the_arm_is_named_as_such_never_no_known_pattern():
    """engine-hsdp under the sum fix (issue 49): torch's ValueError raised in the compare phase, in the harness's
    own code. Before: 'no known pattern', which reads like a harness crash."""
    from harness.judge_cell.diagnosis import NO_PATTERN, error_diagnosis

    message = (
        "`placements` must have the same length as `device_mesh.ndim`! "
        "Found placements length: 1, and device_mesh.ndim: 2."
    )
    d = error_diagnosis(_error("ValueError", message, "compare"), make_record("engine-hsdp", world_size=4))
    assert d.error_class == "harness-side" and d.text != NO_PATTERN
    assert d.text.startswith("raised in the harness's own code while comparing the arm's results with the oracle's")
    assert "measures/parity.py:32" in d.text and message in d.text


def test_a_gradient_the_harness_cannot_read_is_named_by_the_arms_output():
    """What rank/measures/parity.py raises now for such a gradient: the parameter and its placements on the mesh."""
    from harness.judge_cell.diagnosis import error_diagnosis

    message = (
        "lm_head.weight's gradient has 1 placement(s) (Partial(sum)) on a 2-D mesh (2, 2): a DTensor needs one "
        "per mesh dimension"
    )
    d = error_diagnosis(_error("ArmOutputUnreadable", message, "compare"), make_record("engine-hsdp", world_size=4))
    assert (d.error_class, d.object) == ("arm-output-unreadable", "lm_head.weight")
    assert d.text.startswith("the arm's results cannot be read (phase compare): lm_head.weight's gradient has 1")
    assert "lm_head.weight's gradient has 1 placement(s)" in d.text and "not a harness defect" in d.text


def test_the_gradient_reader_refuses_placements_that_do_not_fit_the_mesh():
    """The check itself, on a real DTensor-like gradient's attributes: one placement on a 2-D mesh is named."""
    from types import SimpleNamespace

    from harness.rank.measures.parity import ArmOutputUnreadable, _check_readable

    mesh = SimpleNamespace(ndim=2, mesh=SimpleNamespace(shape=(2, 2)))
    with pytest.raises(ArmOutputUnreadable, match=r"lm_head.weight's gradient has 1 placement\(s\) \('P'\) on a 2-D"):
        _check_readable("lm_head.weight", SimpleNamespace(placements=("P",), device_mesh=mesh))
    _check_readable("lm_head.weight", SimpleNamespace(placements=("P", "S"), device_mesh=mesh))  # fits: no error


def _spec(placements: str) -> str:
    """A DTensorSpec as torch's sharding-propagation error prints it (from engine-update-hsdp's record)."""
    return (
        "DTensorSpec(mesh=DeviceMesh((ddp=2, fsdp=2), 'cpu', stride=(2, 1)), placements=("
        + placements
        + "), tensor_meta=TensorMeta(shape=torch.Size([]), stride=(), dtype=torch.float32), shard_order=(), "
        "use_strided_shard_as_shard_order=False)"
    )


def test_a_gradient_norm_with_placements_that_do_not_fit_the_mesh_is_named_not_a_bare_index_error():
    """engine-update-hsdp under the sum fix: 'RuntimeError: tuple index out of range' in the step, whose full
    message lists the DTensors torch's clip_grad_norm_ stacked: one has 1 placement on the 2-D mesh."""
    from harness.judge_cell.diagnosis import error_diagnosis

    full = "tuple index out of range\n\nSharding propagation failed for aten.stack.default([" + ", ".join(
        [_spec("Replicate(), _NormPartial(2.0)")] * 3 + [_spec("Replicate(),")]
    )
    err = _error("RuntimeError", "tuple index out of range", "forward", tail="")
    err = err.model_copy(update={"full_message": full + "]) on None)"})
    d = error_diagnosis(err, make_record("engine-update-hsdp", world_size=4))
    assert d.error_class == "placements-misfit-mesh"
    assert d.text.startswith("1 of the 4 DTensors shown meeting in aten.stack (gradient norms, as clip_grad_norm_")
    assert "has 1 placement(s) (Replicate()) on the 2-D mesh (ddp=2, fsdp=2)" in d.text


def _judged(record):
    """The record with the cause its diagnosis gives (judge_cell/cell_cause.py one_step_cause), as judge sets it."""
    from harness.judge_cell.cell_cause import one_step_cause

    record.verdict.cause = one_step_cause(record)
    return record


def _summed(world: int, name: str = "lm_head.weight") -> dict:
    """A one-step diagnosis of `name`'s gradient: the sum over ranks instead of the mean (k = W)."""
    text = f"the sum over ranks instead of the mean (x W = {world})"
    return {"grads": {name: {"pattern": "reference", "k": float(world), "residual": 1e-7, "text": text}}}


def test_failures_are_grouped_by_cause_whatever_the_world_size_and_numbers():
    from harness.judge_change.patch_verdict import failures_by_cause

    def failing(scenario, why, outcome="mismatch", world=2, **fields):
        return _judged(make_record(scenario, "fix", outcome, why=why, world_size=world, **fields)), ""

    sum_why = "grad lm_head.weight: the sum over ranks instead of the mean (x W = {}) (residual 1e-07: the part …)"
    known = {"error": {"error_class": "no-sync-post-backward-without-forward", "reference": "verl issue #7520"}}
    groups = failures_by_cause(
        [
            failing("fsdp2-multigpu", sum_why.format(2), diagnosis=_summed(2)),
            failing("fsdp2-multigpu-4", sum_why.format(4), world=4, diagnosis=_summed(4)),
            failing("engine-sp2-dp2", sum_why.format(4), world=4, diagnosis=_summed(4)),
            failing("engine-bf16-no-sync", "FSDP's ...; verl issue #7520: ...", "error", diagnosis=known),
        ]
    )
    assert [(cause, [r.scenario for r, _ in pairs]) for cause, pairs in groups] == [
        (
            "grad lm_head.weight: the sum over ranks instead of the mean (x W)",
            ["fsdp2-multigpu", "fsdp2-multigpu-4", "engine-sp2-dp2"],
        ),
        ("verl issue #7520 (no-sync-post-backward-without-forward)", ["engine-bf16-no-sync"]),
    ]


def test_verifys_table_lists_whole_only_the_patchs_whys():
    """none's and upstream's long whys stay their one cut line in verify's table (they were 60 lines before)."""
    from harness.render.tables import terminal_table

    long = "a why longer than the column " * 8
    records = [make_record("s", "upstream", "mismatch", why=long), make_record("s", "mine", "mismatch", why=long)]
    listed = terminal_table(records, whole_whys={"mine"}).split("why, whole (cut above):\n")[1]
    assert listed.startswith("  s x mine: a why") and "s x upstream" not in listed
    assert "s x upstream" in terminal_table(records).split("why, whole (cut above):\n")[1]  # run, repro: all


def _png_size(path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    data = path.read_bytes()[16:24]
    return int.from_bytes(data[:4], "big"), int.from_bytes(data[4:], "big")


def _many_cells(n_scenarios: int) -> list:
    """n scenarios x none, upstream and a patch, every cell failing, the patch's for one cause whatever W."""
    grads = {f"model.layers.{i}.mlp.weight": 1e-7 * (i + 1) for i in range(60)} | {"lm_head.weight": 7.0}
    parity = {"grad_rel": grads, "grad_worst_param": "lm_head.weight", "grad_worst_rel": 7.0}
    records = []
    for i in range(n_scenarios):
        name = f"scenario-{i:02d}"
        error = {"error": {"error_class": "dtensor-outside-fsdp-forward", "object": "lm_head.weight"}}
        why = "sharded lm_head.weight read outside its FSDP unit"
        records.append(_judged(make_record(name, "none", "error", why=why, diagnosis=error)))
        records.append(make_record(name, "upstream", "mismatch", why=f"grad lm_head.weight: x 1/W = {i}"))
        world = 2 + i % 3
        sum_why = f"grad lm_head.weight: the sum over ranks instead of the mean (x W = {world})"
        mine = make_record(name, "mine", "mismatch", why=sum_why, parity=parity, world_size=world)
        mine.verdict.diagnosis = _summed(world)
        records.append(_judged(mine))
    return records


def test_every_picture_is_at_most_2000_px_tall_and_groups_the_failures_by_cause(tmp_path):
    """The user's PNGs were 1,762 x 8,429 and 1,212 x 11,142 px (issue 49): 60 scenarios x 3 arms now fit in
    2,000 px, each failing cell numbered by its cause, the patch's cause listed first under the grid; the gradient
    picture draws one run per cause, the patch's first."""
    pytest.importorskip("matplotlib")
    from harness.render.pictures import causes_of, grad_errors, outcome_grid, pick_runs

    records = _many_cells(60)
    grid = outcome_grid(records, tmp_path / "grid.svg", title="verify mine")
    width, height = _png_size(grid.with_suffix(".png"))
    assert height <= 2000 and width <= 2000, (width, height)
    causes = causes_of(records)
    assert causes[0][0] == "grad lm_head.weight: the sum over ranks instead of the mean (x W)"
    assert len(causes[0][1]) == 60 and "mismatch [1]" in grid.read_text()
    runs = pick_runs(records)
    assert runs[0].arm == "mine" and len({r.verdict.why.split(" = ")[0] for r in runs}) == len(runs)
    grads = grad_errors(runs, tmp_path / "grads.svg")
    assert _png_size(grads.with_suffix(".png"))[1] <= 2000


def test_a_later_verify_never_overwrites_an_earlier_ones_picture(tmp_path, monkeypatch):
    """One picture per run, named by the arm and the UTC time, and verify-<arm>.png the latest's copy."""
    pytest.importorskip("matplotlib")
    from harness.render.pictures import verify_picture

    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path))
    first = verify_picture(_many_cells(3), "mine")
    second = verify_picture(_many_cells(1), "mine")
    named = {p.name for p in tmp_path.glob("verify-mine-*.png")}
    assert len(named) == 2 and first != second, (named, first, second)
    latest = next(n for n in named if n in second)  # "picture: .../verify-mine-<UTC>[-2].png (and .svg; ...)"
    assert (tmp_path / "verify-mine.png").read_bytes() == (tmp_path / latest).read_bytes()


def test_an_updates_why_leads_with_the_gradient_before_the_clip_and_names_the_updates_as_dragged():
    """The user's sum fix, fp32 AdamW update (issue 49): the why led with 'update model.visual.blocks.0.attn.qkv.bias:
    relative error 0.121'. In causal order the gradient before the clip (verl's grad_norm) is wrong first; the clip
    then scales every parameter by that norm, so the updates are named as dragged along."""
    from harness.judge_cell.update_verdict import metric_failure, moment, param_failure
    from harness.judge_cell.update_why import update_why
    from harness.records.results import Failure

    at = "at step 1, mini-batch 1"
    first = moment(0, 0)
    failures = [
        param_failure("update", "model.visual.blocks.0.attn.qkv.bias", 0.121, 0.05, first),
        param_failure("update", "lm_head.weight", 0.06, 0.05, first),
        param_failure("weights", "model.visual.blocks.0.attn.qkv.bias", 0.002, 0.001, first),
        metric_failure("grad_norm", {"verl": 4.2, "oracle": 2.1, "error": 1, "kind": "rel"}, 0.001, first),
        Failure(kind="log-probs", words="log-probs before step 2: differ by 0.01 > 1e-05", **moment(1, word="before")),
    ]
    why = update_why(failures, [UpdateStepNumbers(step=0, mini_batch=0, clip_active=True)], 1.0)
    assert why.startswith(f"grad_norm: verl 4.2, oracle 2.1 {at} (relative error 1 > 0.001): the gradient is already")
    assert "wrong before the clip (verl's norm x2 the oracle's); the clip then scaled every parameter" in why
    assert "2 parameter update(s) dragged along by the clip (worst model.visual.blocks.0.attn.qkv.bias 0.121)" in why
    assert why.endswith("(+2 more)")
    # the forward before the gradient: a wrong loss at the same moment leads instead
    loss = metric_failure("loss", {"verl": 1.5, "oracle": 1.2, "error": 0.3, "kind": "abs"}, 0.0001, first)
    loss_first = update_why([*failures, loss])
    assert loss_first.startswith("loss: verl 1.5"), loss_first


def test_a_wrong_grad_norm_whose_updates_leave_tolerance_later_names_those_as_dragged():
    """engine-update-adamw under the sum fix, as recorded: grad_norm x1.29 at step 1; the updates within their
    bound there, off from step 2 on."""
    from harness.judge_cell.update_verdict import metric_failure, moment, param_failure
    from harness.judge_cell.update_why import update_why

    def norm(verl, oracle, error, at):
        return metric_failure("grad_norm", {"verl": verl, "oracle": oracle, "error": error, "kind": "rel"}, 0.001, at)

    failures = [
        norm(3.655, 2.83, 0.2915, moment(0, 0)),
        norm(3.603, 2.807, 0.2834, moment(0, 1)),
        param_failure("update", "model.visual.blocks.0.attn.proj.bias", 0.0658, 0.05, moment(1, 0)),
        param_failure("update", "model.visual.patch_embed.proj.bias", 0.0652, 0.05, moment(1, 0)),
        param_failure("update", "model.visual.patch_embed.proj.bias", 0.07, 0.05, moment(1, 1)),
    ]
    why = update_why(failures, [UpdateStepNumbers(step=0, mini_batch=0, clip_active=True)], 1.0)
    assert why.startswith("grad_norm: verl 3.655, oracle 2.83 at step 1, mini-batch 1")
    assert "(verl's norm x1.29 the oracle's); the clip then scaled every parameter by that wrong norm: 2 " in why
    assert (
        "dragged along by the clip (worst model.visual.blocks.0.attn.proj.bias 0.0658 at step 2, mini-batch 1)" in why
    )
    assert why.endswith("(+2 more)")


def test_the_candidates_view_warning_is_listed_as_a_hazard_with_the_test_that_shows_it_cannot_bite_there():
    from harness.judge_change.patch_verdict import new_warnings

    records = [
        make_record("fsdp2-multigpu", "fsdp2-lmhead-forward", "pass", warnings=[VIEW_WARNING]),
        make_record("engine-no-sync", "fsdp2-lmhead-forward", "pass", warnings=[VIEW_WARNING]),
        make_record("fsdp2-multigpu", "upstream", "mismatch", warnings=[]),
    ]
    [found], against = new_warnings("fsdp2-lmhead-forward", records)
    assert against == "upstream's runs beside it" and found.cells == 2
    assert found.hazard.startswith("FSDP2: an in-place op on a view")
    assert "tests/distributed/test_fused_head_view_hook.py" in found.harmless
    # raised by upstream too: not the patch's
    records[2] = make_record("fsdp2-multigpu", "upstream", "mismatch", warnings=[VIEW_WARNING])
    assert new_warnings("fsdp2-lmhead-forward", records)[0] == []


def test_a_classed_errors_cause_is_its_class_and_object_whatever_the_mesh():
    """Two cells of one error class on different meshes: one cause (the class), its words render's."""
    from harness.judge_change.patch_verdict import failures_by_cause

    def cell(scenario, mesh):
        text = (
            f"the arm's results cannot be read (phase compare): lm_head.weight's gradient has 1 placement(s) "
            f"(Replicate()) on a 2-D mesh {mesh}: a DTensor needs one per mesh dimension; about the arm's output"
        )
        diagnosis = {"error": {"error_class": "arm-output-unreadable", "object": "lm_head.weight", "text": text}}
        return _judged(make_record(scenario, "mine", "error", why=text, diagnosis=diagnosis)), ""

    [(words, pairs)] = failures_by_cause([cell("engine-hsdp", "(2, 2)"), cell("engine-hsdp-8", "(2, 4)")])
    assert words == "the arm's results cannot be read (lm_head.weight)" and len(pairs) == 2
    cause = pairs[0][0].verdict.cause
    assert (cause.kind, cause.subject, cause.parameters) == ("error", "arm-output-unreadable", ["lm_head.weight"])


def test_verifys_expectation_stubs_go_to_a_file_named_in_one_line(tmp_path, monkeypatch):
    """Stubs for none's and upstream's cells without an entry came after the verdict, whole; now a file, one line."""
    from harness.commands import run

    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path))
    records = [
        make_record("mine-own", "upstream", "mismatch", parity={"grads_over_tolerance": {"lm_head.weight": 2.0}})
    ]
    line = run.stub_file_line(records, {}, "fix")
    assert line.startswith("no expectation for 1 cell(s): observed, paste-ready for scenarios/expectations.yaml")
    stub = (tmp_path / "verify-fix-expectations-stub.yaml").read_text()
    assert stub.startswith("mine-own:\n  upstream:\n    outcome: mismatch\n") and "reason: TODO" in stub
    from harness.inputs.expectations import load_expectations

    expected = load_expectations()  # fsdp2-multigpu x upstream has its entry: no stub, no line
    assert run.stub_file_line([make_record("fsdp2-multigpu", "upstream", "mismatch")], expected, "f") is None


def test_make_report_after_a_verify_draws_the_patchs_failures_not_upstreams(tmp_path):
    """The user's `make report` drew upstream's failing cells (issue 49): the patch's come first now."""
    pytest.importorskip("matplotlib")
    from harness.commands.inspect import draw_pictures

    grads = {"lm_head.weight": 1.0, "model.norm.weight": 1e-7}
    parity = {"grad_rel": grads, "grad_worst_param": "lm_head.weight", "grad_worst_rel": 1.0}
    records = [
        make_record("fsdp2-multigpu", "upstream", "mismatch", why="grad lm_head.weight: not reduced", parity=parity),
        make_record("fsdp2-multigpu", "mine", "mismatch", why="grad lm_head.weight: the sum (x W = 2)", parity=parity),
    ]
    lines = draw_pictures(records, tmp_path)
    assert lines[1].startswith("gradient errors of fsdp2-multigpu x mine, fsdp2-multigpu x upstream:"), lines


def test_make_report_of_a_verifys_file_draws_only_that_patchs_failing_cells(tmp_path):
    """The arm is read from the verify's results file: its failing cells are the ones drawn, in the gradient picture
    and in the update chart alike, though upstream's mismatching update comes first in the file."""
    pytest.importorskip("matplotlib")
    from harness.commands.inspect import draw_pictures, verified_arm

    grads = {"lm_head.weight": 1.0, "model.norm.weight": 1e-7}
    parity = {"grad_rel": grads, "grad_worst_param": "lm_head.weight", "grad_worst_rel": 1.0}
    step = {"step": 0, "mini_batch": 0, "update_rel": {"lm_head.weight": 1.0}, "update_worst": {"lm_head.weight": 1.0}}
    update = {"steps": [step], "update_worst_rel": 1.0, "update_worst_param": "lm_head.weight"}
    records = [
        make_record("engine-update-adamw", "upstream", "mismatch", why="update lm_head.weight", update=update),
        make_record("fsdp2-multigpu", "upstream", "mismatch", why="grad lm_head.weight: not reduced", parity=parity),
        make_record("fsdp2-multigpu", "none", "error"),
        make_record("fsdp2-multigpu", "mine", "mismatch", why="grad lm_head.weight: the sum (x W = 2)", parity=parity),
        make_record("engine-update-adamw", "mine", "mismatch", why="update lm_head.weight x", update=update),
    ]
    assert verified_arm(tmp_path / "20261203T101821Z-verify-123.jsonl", records) == "mine"
    assert verified_arm(tmp_path / "20261203T101821Z-matrix-123.jsonl", records) is None
    upstream_alone = [r for r in records if r.arm != "mine"]
    assert verified_arm(tmp_path / "20261203T101821Z-verify-1.jsonl", upstream_alone) == "upstream"
    lines = draw_pictures(records, tmp_path, patch="mine")
    assert lines[1].startswith("gradient errors of fsdp2-multigpu x mine:"), lines
    assert lines[2].startswith("update errors per optimizer step of engine-update-adamw x mine:"), lines
    # a patch with no failing cell: the others are drawn as before
    passing = [r.model_copy(update={"outcome": "pass"}) if r.arm == "mine" else r for r in records]
    assert "x upstream" in draw_pictures(passing, tmp_path, patch="mine")[1]


def test_upstreams_own_warnings_are_compared_with_nones():
    from harness.judge_change.patch_verdict import new_warnings

    upstream = make_record("fsdp2-multigpu", "upstream", "mismatch", warnings=[VIEW_WARNING])
    none = make_record("fsdp2-multigpu", "none", "error", warnings=[VIEW_WARNING])
    assert new_warnings("upstream", [upstream, none]) == ([], "none's runs beside it")


def test_an_updates_cause_is_its_first_wrong_number_whatever_its_numbers():
    from harness.judge_cell.update_verdict import metric_failure, moment, param_failure
    from harness.judge_cell.update_why import update_cause
    from harness.judge_change.patch_verdict import failures_by_cause

    def cell(scenario, verl, step, update_error):
        m = {"verl": verl, "oracle": 2.83, "error": verl / 2.83 - 1, "kind": "rel"}
        norm = metric_failure("grad_norm", m, 0.001, moment(step, 0))
        update = param_failure("update", "model.norm.weight", update_error, 0.05, moment(step, 0))
        cause = update_cause([norm, update])
        return make_record(scenario, "mine", "mismatch", why=norm.words, cause=cause), ""

    groups = failures_by_cause([cell("engine-update-adamw", 3.655, 0, 0.1), cell("engine-update-4", 3.1, 1, 0.2)])
    assert [(words, len(pairs)) for words, pairs in groups] == [("verl's grad_norm wrong", 2)]
    update = param_failure("update", "model.visual.blocks.0.attn.qkv.bias", 0.121, 0.05, moment(0, 0))
    lead = update_cause([update])
    assert (lead.kind, lead.subject, lead.step, lead.mini_batch, lead.value) == (
        "update",
        "model.visual.blocks.0.attn.qkv.bias",
        0,
        0,
        0.121,
    )
    [(words, _)] = failures_by_cause([(make_record("s", "mine", "mismatch", why=update.words, cause=lead), "")])
    assert words == "update model.visual.blocks.0.attn.qkv.bias off"


def test_the_cause_of_samples_wrong_is_shared_by_their_cells():
    from harness.judge_change.patch_verdict import failures_by_cause

    why = (
        "log-probs wrong in samples {} of the global batch's 4 (max diff 6.1), right in 0 (11 tokens) (max diff 0): "
        "exactly the responses shorter than the batch's longest (11 tokens), under the ray trainer's batch "
        "(response_mask dense 4x11)"
    )

    def cell(scenario, wrong):
        rows = {"wrong": wrong, "of": 4, "shorter_than_longest": True, "text": why.format(wrong)}
        diagnosis = {"log_probs": {"pattern": None, "max_abs": 6.1, "text": "no known pattern"}, "rows": rows}
        return _judged(make_record(scenario, "mine", "mismatch", why=why.format(wrong), diagnosis=diagnosis)), ""

    [(words, pairs)] = failures_by_cause([cell("s", [1]), cell("t", [2])])
    assert words == "log-probs wrong in some samples: exactly the responses shorter than the batch's longest"
    assert len(pairs) == 2 and pairs[0][0].verdict.cause.key() == ("log-probs", None, "some samples, the shorter ones")


def test_rewording_a_cause_in_render_changes_no_grouping(monkeypatch):
    """verify groups by the causes' kind and subject; render/cause_words.py only writes the words: other words, the same
    groups of the same cells."""
    from harness.judge_change.patch_verdict import failures_by_cause
    from harness.render import cause_words

    def failing(scenario, world, **fields):
        diagnosis = fields.pop("diagnosis", _summed(world))
        return _judged(make_record(scenario, "fix", "mismatch", world_size=world, diagnosis=diagnosis, **fields)), ""

    cells = [
        failing("fsdp2-multigpu", 2),
        failing("fsdp2-multigpu-4", 4),
        failing("engine-norm", 2, diagnosis=_summed(2, "model.norm.weight")),
        failing("engine-sp2-dp2", 4),
    ]

    def shape(groups):
        return [[r.scenario for r, _ in pairs] for _, pairs in groups]

    before = failures_by_cause(cells)
    assert shape(before) == [["fsdp2-multigpu", "fsdp2-multigpu-4", "engine-norm", "engine-sp2-dp2"]]
    assert [w for w, _ in before] == [
        "grads of lm_head.weight, model.norm.weight: the sum over ranks instead of the mean (x W)"
    ]
    monkeypatch.setitem(cause_words.GRADIENT_WORDS, "reference x W", "reworded: summed")
    after = failures_by_cause(cells)
    assert shape(after) == shape(before)
    assert [w for w, _ in after] == ["grads of lm_head.weight, model.norm.weight: reworded: summed"]
    monkeypatch.setitem(
        cause_words.KIND_WORDS, FailureKind.GRADIENT, lambda c, names: f"{c.subject} of {len(names)} parameter(s)"
    )
    after = failures_by_cause(cells)
    assert shape(after) == shape(before) and [w for w, _ in after] == ["reference x W of 2 parameter(s)"]


def test_a_head_cells_wrong_gradient_is_its_cause_and_a_record_without_a_cause_groups_by_its_why():
    """path: head (judge_cell/head_step.py): the gradient over its bound is the verdict's cause, whatever the error;
    a record from before verdict.cause loads and is a cause of its own, its why."""
    from harness.inputs.tolerances import tolerance_for
    from harness.judge_cell.head_step import head_outcome
    from harness.judge_change.patch_verdict import failures_by_cause
    from harness.records.results import RankResult

    def head(scenario, diff_sq):
        step = {"step_s": 0.1, "collective_ms": 1.0, "held_fwd_to_bwd": 1, "held_weight_sized": 0}
        step |= {"peak_rss_process": 1, "ref_sq": 1.0, "diff_sq": diff_sq}
        results = [RankResult(rank=r, world_size=2, device="cpu", head_step=step) for r in (0, 1)]
        fields = head_outcome(results, tolerance_for("fp32"))
        return make_record(scenario, "mine", fields["outcome"], failures=fields["failures"], cause=fields.get("cause"))

    assert head("head", 0.0).outcome == "pass" and head("head", 0.0).verdict.cause is None
    first, second = head("head", 0.25), head("head-4", 1.0)
    assert (first.verdict.cause.key(), first.verdict.cause.value) == (
        (FailureKind.GRADIENT, GradientOf.HEAD_UNIT, "lm_head.weight"),
        0.5,
    )
    assert "cause" not in make_record("head", "mine", "pass").verdict.written()
    old = [make_record(s, "mine", "mismatch", why="a why of its own") for s in ("a", "b")]
    groups = failures_by_cause([(r, "") for r in (first, second, *old)])
    assert [(words, [r.scenario for r, _ in pairs]) for words, pairs in groups] == [
        ("the lm_head unit's lm_head.weight gradient wrong", ["head", "head-4"]),
        ("a why of its own", ["a", "b"]),
    ]
