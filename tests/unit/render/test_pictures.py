"""What a terminal and a report show of records: the 120-column table, and the two pictures (outcome grid, one
run's gradient errors). The records are synthetic, in the shape the verdict writes; matplotlib draws for real."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from record_builder import make_record  # tests/record_builder.py (tests/ is on sys.path: its conftest)

from harness.paths import ROOT
from harness.records.results import Record
from harness.render.tables import TERMINAL_WIDTH, terminal_report, terminal_table, verdict_table

LONG = "aten.mm.default got mixed torch.Tensor and DTensor, for at least one of the arguments! " * 3


# What every record pictured here has, besides its own fields: a 2-rank engine run on CPU that passed.
PICTURED = {
    "world_size": 2,
    "device": "cpu",
    "backend": "gloo",
    "settings": {"path": "engine", "precision": "fp32"},
    "failures": [],
    "error": None,
    "tolerance": {"grad_rel": 1e-4, "noise_floor": {"grad_rel": 7.57e-7}},
    "wall_s": 12.5,
    "parity": {
        "logprob_max_abs": 4.8e-7,
        "entropy_max_abs": 1e-6,
        "grad_worst_rel": 6.5e-7,
        "grad_worst_param": "model.visual.blocks.1.mlp.linear_fc2.bias",
        "grads_over_tolerance": {},
        "missing_grads": [],
        "grad_rel": {
            "lm_head.weight": 3e-7,
            "model.norm.weight": 0.0,
            "model.visual.blocks.1.mlp.linear_fc2.bias": 6.5e-7,
        },
    },
}


def record(scenario, arm, outcome, **extra) -> Record:
    """make_record's bare record with PICTURED's fields, then extra's."""
    return make_record(scenario, arm, outcome, bare=True, **{**PICTURED, **extra})


RECORDS = [
    record(
        "fsdp2-multigpu",
        "none",
        "error",
        parity=None,
        error={"type": "RuntimeError", "message": LONG, "phase": "forward", "rank": 0},
    ),
    record(
        "fsdp2-multigpu",
        "upstream",
        "mismatch",
        failures=["grad lm_head.weight: relative error 1 > 0.0001"],
        parity={
            **record("a", "b", "pass").measures.parity.written(),
            "grad_worst_rel": 1.0,
            "grad_worst_param": "lm_head.weight",
            "grads_over_tolerance": {"lm_head.weight": 1.0},
            "grad_rel": {"lm_head.weight": 1.0, "model.norm.weight": 0.0, "model.embed.weight": 4e-7},
        },
    ),
    record("fsdp2-multigpu", "fsdp2-lmhead-forward", "pass"),
    record(
        "fsdp2-compile-inductor",
        "fsdp2-lmhead-forward",
        "hang",
        parity=None,
        error={
            "type": "Timeout",
            "message": "no result after 600s",
            "waits_in": {"0": 'File "/x/torch/distributed/distributed_c10d.py", line 2799 in recv'},
        },
    ),
]


def _with_why(record: Record, why: str) -> Record:
    """A copy of the record whose verdict says `why` (the record's own verdict untouched)."""
    return record.model_copy(update={"verdict": record.verdict.model_copy(update={"why": why})})


def test_terminal_table_fits_in_120_columns_and_says_why():
    table = terminal_table(RECORDS)
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= TERMINAL_WIDTH, max(len(line) for line in lines)
    assert [c.strip() for c in lines[0].split("|")[1:-1]] == ["scenario", "W", "arm", "outcome", "why"]
    assert "RuntimeError: aten.mm.default got mixed" in lines[2] and lines[2].rstrip(" |").endswith("…")
    assert "grad lm_head.weight: relative error 1 > 0.0001" in lines[3]
    assert "rank 0 waits in distributed_c10d.py" in lines[5]
    diagnosed = _with_why(RECORDS[1], "grad lm_head.weight: this rank's gradient only, not reduced across ranks")
    assert "not reduced across ranks" in terminal_table([diagnosed]).splitlines()[2]  # the diagnosis, when there
    assert max(len(line) for line in verdict_table(RECORDS).splitlines()) > TERMINAL_WIDTH  # the wide one is wide


def test_a_run_prints_the_narrow_table_and_keeps_the_closing_lines():
    wide = f"{verdict_table(RECORDS)}\n\n1 error, 1 pass\ntorch 2.13.0\nrecords: results/x.jsonl\n"
    text = terminal_report(RECORDS, wide)
    assert text.startswith(terminal_table(RECORDS) + "\n\n1 error, 1 pass\ntorch 2.13.0\nrecords: results/x.jsonl")
    assert "results/latest.md" in text


def _svg_text(path) -> str:
    root = ET.parse(path).getroot()  # well-formed SVG
    assert root.tag.endswith("svg")
    return path.read_text()


def test_report_draws_the_outcome_grid_and_one_runs_gradient_errors(tmp_path, cli_in_process):
    pytest.importorskip("matplotlib")
    results = tmp_path / "batch.jsonl"
    results.write_text("".join(json.dumps(r.written()) + "\n" for r in RECORDS))
    out = tmp_path / "out"
    done = cli_in_process("report", results, env={"HARNESS_RESULTS_DIR": str(out)})
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines() if line.startswith("|")) <= TERMINAL_WIDTH
    assert "gradient errors of fsdp2-multigpu x upstream" in done.stdout  # the mismatch is the run drawn
    grid = _svg_text(out / "outcomes.svg")
    # Text is kept as SVG text: every cell's words are in the file.
    for words in ("fsdp2-multigpu (W=2)", "mismatch", "lm_head.weight", "RuntimeError", "hang", "not run"):
        assert words in grid, words
    errors = _svg_text(out / "grad-errors.svg")
    for words in ("lm_head.weight", "tolerance 0.0001", "noise floor 7.6e-07", "0 (exactly equal)"):
        assert words in errors, words
    # The log axis reads as plain numbers: mathtext is off for every text (a rank's '$'), so its default labels were
    # drawn as their source, run together ($\mathdefault{10^{-6}}$).
    assert "mathdefault" not in errors and ">1e\u221206<" in errors, errors  # matplotlib's minus sign, U+2212


def test_pictures_are_not_imported_with_the_report_command():
    """matplotlib is imported only when a picture is drawn: not by the user's side at module load."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, harness.cli, harness.commands.inspect, "
            "harness.render.tables; print('matplotlib' in sys.modules, 'torch' in sys.modules)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_bench_chart_labels_each_checkpoint_once_without_overlap():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from harness.commands.bench import DEFAULT_BANDWIDTH_GBPS, projection_rows, real_models
    from harness.render.chart import draw

    rows = projection_rows(real_models(), worlds=(8, 64), bandwidth_gbps=DEFAULT_BANDWIDTH_GBPS)
    fig = draw(rows, DEFAULT_BANDWIDTH_GBPS, world=64)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    texts = [t for t in ax.texts if t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    plt.close(fig)
    names = [n for t in texts for n in t.get_text().split(", ")]
    untied = {r["model"].replace("Qwen3-VL-", "") for r in rows if not r["tied"]}
    assert sorted(names) == sorted(untied)  # each once: 8B and 235B-A22B share a size, and one label
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (a, b)


def test_a_why_cut_in_the_terminal_table_is_listed_whole_under_it():
    why = (
        "FSDP's no-sync post-backward on a unit whose forward never ran (in to_accumulated_grad_if_needed, "
        "_fsdp_param.py:807); verl issue #7520: the weight was read outside lm_head's FSDP forward"
    )
    crashed = _with_why(RECORDS[0], why)
    lines = terminal_table([crashed, RECORDS[2]]).splitlines()
    assert max(len(line) for line in lines) <= TERMINAL_WIDTH
    assert lines[2].rstrip(" |").endswith("…") and len(lines) > 4
    at = lines.index("why, whole (cut above):")
    listed = " ".join(line.strip() for line in lines[at + 1 :])
    assert listed == f"fsdp2-multigpu x none: {why}", listed
    assert "why, whole" not in terminal_table([RECORDS[2]])  # nothing cut, nothing listed


def _text_ends(svg_path, words: str) -> tuple[float, float, float, float]:
    """(x end, y, picture width, height) of an SVG text element: its x, plus its length at the font's size
    (DejaVu Sans averages under 0.65 em a character)."""
    root = ET.parse(svg_path).getroot()
    view = [float(v) for v in root.get("viewBox").split()]
    for node in root.iter():
        if node.tag.endswith("text") and node.text == words:
            size = float(re.search(r"font-size: ([\d.]+)px", node.get("style")).group(1))
            return float(node.get("x")) + 0.65 * size * len(words), float(node.get("y")), view[2], view[3]
    raise AssertionError(f"no text {words!r} in {svg_path}")


def test_pictures_come_as_png_too_nothing_is_cut_and_the_failing_runs_are_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    from harness.commands.inspect import draw_pictures

    why = "grad lm_head.weight: this rank's gradient only, not reduced across ranks (residual 4e-07)"
    failing = _with_why(RECORDS[1], why)
    other = _with_why(failing.model_copy(update={"scenario": "fsdp2-cpu-offload"}), "grad lm_head.weight: x 1/W")
    passing_first = [RECORDS[2], RECORDS[0], failing, other, RECORDS[3]]
    lines = draw_pictures(passing_first, tmp_path)
    for name in ("outcomes", "grad-errors"):
        png = tmp_path / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    # Both failing runs are drawn (one per cause: they have two), the passing one (listed first) is not.
    assert "gradient errors of fsdp2-multigpu x upstream, fsdp2-cpu-offload x upstream:" in lines[1], lines
    errors = _svg_text(tmp_path / "grad-errors.svg")
    assert "fsdp2-cpu-offload x upstream" in errors and "x fsdp2-lmhead-forward" not in errors
    # The grid reads none, upstream, then the patch, and a failing cell its cause's number, the causes under it.
    grid = _svg_text(tmp_path / "outcomes.svg")
    assert grid.index(">none<") < grid.index(">upstream<") < grid.index(">fsdp2-lmhead-forward<")
    assert "not reduced across ranks" in grid
    # The legend's last entry is inside the picture, also where one arm makes it narrower than the legend.
    draw_pictures([failing], tmp_path / "one-arm")
    for svg in (tmp_path / "outcomes.svg", tmp_path / "one-arm/outcomes.svg"):
        x_end, y, width, height = _text_ends(svg, "skipped")
        assert x_end <= width and y <= height, (svg, x_end, y, width, height)


def test_the_update_picture_reads_its_log_axes_as_plain_numbers(tmp_path):
    """render/update_chart.py: both panels' log axes in plain text, as the gradient picture's (plain_log_labels)."""
    pytest.importorskip("matplotlib")
    from harness.render.update_chart import update_errors

    def step(k: int, error: float) -> dict:
        metric = {"verl": 2.0 + error, "oracle": 2.0, "error": error, "kind": "rel"}
        return {
            "step": k,
            "clip_active": False,
            "update_rel": {"lm_head.weight": error},
            "metrics": {"grad_norm": metric},
        }

    update = {"steps": [step(0, 1e-6), step(1, 0.05)], "optimizer_steps": 2}
    record = make_record("engine-update-adamw", "upstream", "mismatch", update=update)
    text = _svg_text(update_errors(record, tmp_path / "update-errors.svg"))
    assert "mathdefault" not in text and ">1e\u221206<" in text, text  # matplotlib's minus sign, U+2212
