"""The nightly CI workflow (.github/workflows/nightly.yml), its constraint sets, and what it shows of records:
`harness report --format summary|junit`. Nothing here launches a run; every record is written by the test.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from harness.inputs.expectations import load_expectations
from harness.inputs.scenario import NON_SCENARIO_FILES
from harness.paths import ROOT, SCENARIOS_DIR
from harness.render.ci import junit_xml, summary_markdown

WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "nightly.yml"
CI_WORKFLOW = WORKFLOWS / "ci.yml"
DEFAULT_SET = ROOT / "constraints.txt"
TORCH211_SET = ROOT / "constraints" / "torch211.txt"


def scenario_names_on_disk() -> list[str]:
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml") if p.name not in NON_SCENARIO_FILES)


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def called_job(job: dict) -> dict:
    """A job as it runs: a job that calls a reusable workflow (`uses: ./.github/workflows/X.yml`) runs X's one job,
    with each `${{ inputs.NAME }}` standing for what the caller passes (`with: NAME: ...`)."""
    if "uses" not in job:
        return job
    called = yaml.safe_load((ROOT / job["uses"]).read_text())
    (body,) = called["jobs"].values()
    text = yaml.safe_dump(body, sort_keys=False, width=1000)
    for name, value in (job.get("with") or {}).items():
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        text = text.replace("${{ inputs.%s }}" % name, shown)  # noqa: UP031 - the braces are GitHub's
    return yaml.safe_load(text)


def run_steps(job: dict) -> list[str]:
    return [step["run"] for step in called_job(job).get("steps", []) if "run" in step]


def scenario_jobs(workflow) -> dict[str, dict]:
    """The jobs that run scenarios: those with a scenario matrix."""
    return {
        name: job
        for name, job in workflow["jobs"].items()
        if "scenario" in ((job.get("strategy") or {}).get("matrix") or {})
    }


# ---------------------------------------------------------------- the workflow


def test_triggers_nightly_and_by_hand(workflow):
    on = workflow.get("on", workflow.get(True))  # PyYAML reads a bare `on:` key as the boolean True
    assert "workflow_dispatch" in on
    crons = [entry["cron"] for entry in on["schedule"]]
    assert crons and all(len(c.split()) == 5 for c in crons), crons


def test_guard_rails(workflow):
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["concurrency"]["group"]
    for name, job in workflow["jobs"].items():  # a job calling a workflow has the called job's
        assert isinstance(called_job(job).get("timeout-minutes"), int), f"job {name} has no timeout-minutes"


def test_list_names_prints_exactly_the_scenario_files(cli_in_process):
    done = cli_in_process("list", "--names")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == scenario_names_on_disk()


def test_matrix_covers_every_scenario_file(workflow):
    """A scenario added to scenarios/ runs nightly without editing the workflow: the matrix is computed."""
    jobs = scenario_jobs(workflow)
    assert {"cpu", "cuda"} <= set(jobs), sorted(workflow["jobs"])
    for name, job in jobs.items():
        scenarios = job["strategy"]["matrix"]["scenario"]
        if isinstance(scenarios, list):
            assert sorted(scenarios) == scenario_names_on_disk(), name
            continue
        source = re.fullmatch(r"\$\{\{\s*fromJSON\(needs\.([\w-]+)\.outputs\.([\w-]+)\)\s*\}\}", scenarios)
        assert source, f"{name}: matrix.scenario is neither a list nor fromJSON(needs.<job>.outputs.<name>)"
        lister_name, output = source.groups()
        needs = job["needs"] if isinstance(job["needs"], list) else [job["needs"]]
        assert lister_name in needs, name
        lister = workflow["jobs"][lister_name]
        step_id = re.fullmatch(
            r"\$\{\{\s*steps\.([\w-]+)\.outputs\.%s\s*\}\}" % re.escape(output),  # noqa: UP031
            lister["outputs"][output],
        ).group(1)
        step = next(s for s in lister["steps"] if s.get("id") == step_id)
        assert "python -m harness list --names" in step["run"] and "GITHUB_OUTPUT" in step["run"]


def test_both_constraint_sets_in_both_jobs(workflow):
    for name, job in scenario_jobs(workflow).items():
        matrix = job["strategy"]["matrix"]
        sets = {entry["set"]: entry["overrides"] for entry in matrix["include"]}
        assert set(matrix["set"]) == set(sets), name
        assert sets == {"default": "", "torch211": "constraints/torch211.txt"}, name
        assert job["strategy"]["fail-fast"] is False, name
    for path in ("constraints.txt", "constraints/torch211.txt"):
        assert (ROOT / path).is_file(), path
    assert workflow["jobs"]["cpu"]["with"]["cpu-wheels"] is True
    cell = called_job(workflow["jobs"]["cpu"])
    index_step = next(s for s in cell["steps"] if "UV_EXTRA_INDEX_URL" in s.get("run", ""))
    assert str(index_step["if"]).lower() == "true" and "download.pytorch.org/whl/cpu" in index_step["run"]
    # the default set from the lock, every file by its hash (docs/SECURITY.md); the torch 2.11 set from the index
    assert index_step["env"]["CELL_SET"] == "${{ matrix.set }}"
    assert (
        'if [ "$CELL_SET" = default ]; then\n  echo "LOCK=requirements-ci.lock" >> "$GITHUB_ENV"' in index_step["run"]
    )


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def test_jobs_run_the_makefile_targets_users_run(workflow):
    targets = make_targets()
    for name, job in scenario_jobs(workflow).items():
        scripts = run_steps(job)
        used = {m for script in scripts for m in re.findall(r"\bmake\s+(?:-\w+\s+)*([\w-]+)", script)}
        assert used and used <= targets, (name, used, targets)
        matrix_steps = [s for s in called_job(job)["steps"] if re.search(r"\bmake\s+matrix\b", s.get("run", ""))]
        assert len(matrix_steps) == 1, name
        # the matrix's values reach the script as environment variables (never pasted into it: tests/unit/
        # test_workflows.py), each passed on to make
        (step,) = matrix_steps
        env = {value: key for key, value in step["env"].items()}
        assert f'OVERRIDES="${env["${{ matrix.overrides }}"]}"' in step["run"]
        assert f"--scenario ${env['${{ matrix.scenario }}']}" in step["run"]
        assert "--json results/" in step["run"]
        for script in scripts:  # nothing beside make runs the scenarios, or pytest runs them a second time
            assert not re.search(r"-m harness (matrix|run|repro|verify)\b|\bpytest\b", script), script


def test_reports_and_artifacts_even_when_the_matrix_fails(workflow):
    for name, job in scenario_jobs(workflow).items():
        steps = called_job(job)["steps"]
        uploads = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
        assert len(uploads) == 1 and uploads[0].get("if") == "always()", name
        assert "results/" in uploads[0]["with"]["path"]
        artifact = uploads[0]["with"]["name"]  # unique per matrix cell, or the uploads collide
        assert "${{ matrix.scenario }}" in artifact and "${{ matrix.set }}" in artifact
        summary = [s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
        assert summary and all(s.get("if") == "always()" for s in summary), name
        assert any("--format summary" in s["run"] for s in summary)
        assert any("--format junit" in s.get("run", "") and s.get("if") == "always()" for s in steps), name
        setup = next(s for s in steps if str(s.get("uses", "")).startswith("actions/setup-python@"))
        assert setup["with"]["python-version"] == "3.11" and "cache" not in setup["with"]
        uv = next(s for s in steps if str(s.get("uses", "")).startswith("astral-sh/setup-uv@"))
        assert uv["with"]["enable-cache"] is True


def test_cuda_job_is_skipped_without_a_gpu_runner(workflow):
    cuda = workflow["jobs"]["cuda"]
    assert json.loads(cuda["with"]["runs-on"]) == ["self-hosted", "gpu"]
    assert re.fullmatch(r"vars\.HAS_GPU_RUNNER\s*==\s*'true'", cuda["if"].strip())
    assert cuda["with"]["cpu-wheels"] is False  # PyPI's Linux torch is the CUDA build
    index_step = next(s for s in called_job(cuda)["steps"] if "UV_EXTRA_INDEX_URL" in s.get("run", ""))
    assert str(index_step["if"]).lower() == "false"


def test_cpu_and_cuda_jobs_share_one_body(workflow):
    """One definition of a cell (a reusable workflow): the two jobs differ only in what they pass it."""
    cpu, cuda = workflow["jobs"]["cpu"], workflow["jobs"]["cuda"]
    assert cpu["uses"] == cuda["uses"] and cpu["uses"].startswith("./.github/workflows/")
    assert set(cpu["with"]) == set(cuda["with"])
    assert cpu["strategy"]["matrix"] == cuda["strategy"]["matrix"]


# ---------------------------------------------------------------- CI on pull requests


@pytest.fixture(scope="module")
def ci_workflow() -> dict:
    return yaml.safe_load(CI_WORKFLOW.read_text())


def test_ci_runs_on_pull_requests_and_pushes_to_main(ci_workflow):
    on = ci_workflow.get("on", ci_workflow.get(True))
    assert "pull_request" in on and on["push"]["branches"] == ["main"]
    assert ci_workflow["permissions"] == {"contents": "read"}
    for name, job in ci_workflow["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int), f"job {name} has no timeout-minutes"


def test_ci_runs_the_fresh_clone_entry_point_with_uvs_cache(ci_workflow):
    test = ci_workflow["jobs"]["test"]
    assert [s for s in run_steps(test) if s.strip() == "bash .ci/run"]
    uses = [str(s.get("uses", "")) for s in test["steps"]]
    uv = next(s for s in test["steps"] if str(s.get("uses", "")).startswith("astral-sh/setup-uv@"))
    assert uv["with"]["enable-cache"] is True
    assert uses.index(uv["uses"]) < next(i for i, s in enumerate(test["steps"]) if s.get("run") == "bash .ci/run")
    assert "torch" not in (ROOT / ".ci" / "run").read_text()  # the entry point is the Makefile's, nothing special


def test_ci_lints_with_the_pinned_ruff(ci_workflow):
    scripts = run_steps(ci_workflow["jobs"]["lint"])
    assert any("ruff check" in s and "constraints.txt" in s for s in scripts)
    assert "ruff" in pins(DEFAULT_SET)


def test_no_workflow_uses_pips_cache():
    """uv builds every environment (the Makefile takes the uv on PATH): its cache is the one kept."""
    for path in WORKFLOWS.glob("*.yml"):
        text = path.read_text()
        assert "cache: pip" not in text, path.name
        if "make " in text or "bash .ci/run" in text:
            assert "astral-sh/setup-uv@" in text and "enable-cache: true" in text, path.name


def _make(*args, cwd=ROOT):
    return subprocess.run(["make", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_makefile_installs_the_merged_pins_of_the_chosen_set(tmp_path):
    done = _make("-n", "-B", "venv", "OVERRIDES=constraints/torch211.txt")
    assert done.returncode == 0, done.stderr
    assert "-c .venv/pins.txt" in done.stdout and "pins OVERRIDES=constraints/torch211.txt" in done.stdout
    # Really merged: constraints.txt with exactly the overridden pins replaced, and a new one appended.
    overrides = tmp_path / "overrides.txt"
    overrides.write_text("# a comment line\ntorch==2.11.0\nTransformers == 5.9.0  # spaces, case\nnew-pkg==1.0\n")
    done = _make("-s", "pins", f"OVERRIDES={overrides}", f"VENV={tmp_path / 'v'}")
    assert done.returncode == 0, done.stderr
    merged, default = pins(tmp_path / "v" / "pins.txt"), pins(DEFAULT_SET)
    assert merged == {**default, "torch": "2.11.0", "transformers": "5.9.0", "new-pkg": "1.0"}
    done = _make("-s", "pins", f"VENV={tmp_path / 'w'}")
    assert (tmp_path / "w" / "pins.txt").read_text() == DEFAULT_SET.read_text()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_asking_for_another_constraint_set_rebuilds_the_venv():
    """The stamp names the set: a venv built from one set is out of date for another, so
    `make matrix OVERRIDES=...` can never run on the old packages. (-n: only what make would do.)"""
    done = _make("-n", "venv", "OVERRIDES=constraints/torch211.txt")
    assert done.returncode == 0, done.stderr
    assert "rm -f .venv/.installed-*" in done.stdout and "-c .venv/pins.txt" in done.stdout


# ---------------------------------------------------------------- the constraint sets


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[re.sub(r"[-_.]+", "-", name).lower()] = version
    return out


def merged(overrides: Path) -> dict[str, str]:
    return {**pins(DEFAULT_SET), **pins(overrides)}


def test_torch211_set_overrides_only_torch_and_transformers():
    assert pins(TORCH211_SET) == {"torch": "2.11.0", "transformers": "5.9.0"}
    assert set(pins(TORCH211_SET)) <= set(pins(DEFAULT_SET))  # replaces pins, adds none


def test_torch211_set_is_what_verl_pins_and_requirements_admit_both():
    from packaging.requirements import Requirement

    requirements = [
        Requirement(line.split("#", 1)[0].strip())
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.split("#", 1)[0].strip()
    ]
    for path, pinned in ((DEFAULT_SET, pins(DEFAULT_SET)), (TORCH211_SET, merged(TORCH211_SET))):
        for req in requirements:
            name = re.sub(r"[-_.]+", "-", req.name).lower()
            assert name in pinned, f"{path.name} does not pin {req.name}"
            assert req.specifier.contains(pinned[name], prereleases=True), f"{path.name}: {req} vs {pinned[name]}"
    try:
        verl_requires = metadata.requires("verl") or []
    except metadata.PackageNotFoundError:
        pytest.skip("verl is not installed: its extras' pins cannot be read")
    cpu_extra = {
        Requirement(r.split(";")[0]).name: str(Requirement(r.split(";")[0]).specifier)
        for r in verl_requires
        if 'extra == "cpu"' in r
    }
    torch211 = pins(TORCH211_SET)
    assert cpu_extra.get("torch") == f"=={torch211['torch']}"
    assert cpu_extra.get("transformers") == f"=={torch211['transformers']}"


# ---------------------------------------------------------------- what CI shows of the records


@pytest.fixture(scope="module")
def batch(record):
    """Four records: one as expected (an error), one drifting (a pass where a failure is expected), and two of an
    arm no expectation names (a mismatch, and a skip)."""
    expected = load_expectations()
    cells = [(s, a, e) for s, arms in expected.items() for a, e in arms.items()]
    as_expected = next((s, a, e) for s, a, e in cells if e.outcome == "error")
    drifting = next((s, a, e) for s, a, e in cells if e.outcome != "pass" and (s, a) != as_expected[:2])
    s, a, e = as_expected
    message = f"aten.mm.default got {e.error_contains or 'an error'}, need to convert"
    records = [
        record(
            scenario=s,
            arm=a,
            outcome="error",
            parity=None,
            comm=None,
            error={
                "type": "RuntimeError",
                "message": message,
                "full_message": message,
                "phase": "forward",
                "rank": 0,
                "root_cause": {"type": "RuntimeError", "message": message},
                "traceback_tail": "Traceback (most recent call last):\n  \x1b[31mboom\x1b[0m\x07\n" + message,
            },
        ),
        record(scenario=drifting[0], arm=drifting[1], outcome="pass"),
        record(
            scenario="fsdp2-multigpu",
            arm="my-patch",
            outcome="mismatch",
            failures=["grad lm_head.weight: relative error 0.93 > 0.0001"],
            parity={
                "logprob_max_abs": 0.0,
                "entropy_max_abs": 1.9e-06,
                "grad_worst_rel": 0.93,
                "grad_worst_param": "lm_head.weight",
                "grads_over_tolerance": {"lm_head.weight": 0.93},
                "missing_grads": [],
            },
        ),
        record(
            scenario="fsdp2-multigpu-4",
            arm="my-patch",
            outcome="skipped",
            world_size=4,
            device="cuda",
            backend="nccl",
            parity=None,
            comm=None,
            skipped_reason="needs 4 CUDA device(s), 0 visible",
        ),
    ]
    return {"records": records, "as_expected": as_expected[:2], "drifting": drifting[:2]}


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r.written(), sort_keys=True) + "\n" for r in records))
    return path


def test_summary_of_a_results_file(tmp_path, batch, cli_in_process):
    records = batch["records"]
    # Two files: JSON lines as `results/*.jsonl`, and the JSON list `--json OUT` writes (what the workflow reads).
    first = write_jsonl(tmp_path / "a.jsonl", records[:2])
    second = tmp_path / "matrix-b.json"
    second.write_text(json.dumps([r.written() for r in records[2:]], indent=1))
    done = cli_in_process("report", "--format", "summary", "--title", "cpu nightly (default)", first, second)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("## cpu nightly (default)\n")
    assert "**DRIFT** in 1 of 2 cell(s)" in out
    assert "1 error, 1 mismatch, 1 pass, 1 skipped" in out
    assert "torch 2.13.0+cpu, transformers 5.10.4, verl 0.9.1" in out
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(records)  # header and one row per record
    for r in records:
        assert any(
            f"| {r.scenario} " in line and f"| {r.arm} " in line and f"| {r.outcome} " in line for line in table
        ), r.scenario
    drift_section = out.split("### Drift from scenarios/expectations.yaml", 1)[1]
    scenario, arm = batch["drifting"]
    drift_lines = [line for line in drift_section.splitlines() if line.startswith("- ")]
    assert len(drift_lines) == 1 and f"`{scenario}` x `{arm}`: outcome pass (expected" in drift_lines[0]
    assert "Without an expectation (2;" in drift_section and "`fsdp2-multigpu` x `my-patch`" in drift_section


def test_summary_without_drift_says_so(batch):
    text = summary_markdown(batch["records"][:1])
    assert "**As expected:** all 1 cell(s)" in text
    assert "None: all 1 cell(s) with an expectation are as expected." in text


def test_junit_of_a_results_file(tmp_path, batch, cli_in_process):
    path = write_jsonl(tmp_path / "batch.jsonl", batch["records"])
    done = cli_in_process("report", "--format", "junit", path)
    assert done.returncode == 0, done.stderr
    root = ET.fromstring(done.stdout.encode())  # well-formed, the traceback's control characters included
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [(r.scenario, r.arm) for r in batch["records"]]
    counts = tuple(suite.get(k) for k in ("tests", "failures", "skipped", "errors"))
    assert counts == ("4", "2", "1", "0")
    by_cell = {(c.get("classname"), c.get("name")): c for c in cases}
    assert by_cell[batch["as_expected"]].find("failure") is None  # the expected error is a pass of the test
    assert "as expected" in by_cell[batch["as_expected"]].find("system-out").text
    drifted = by_cell[batch["drifting"]].find("failure")
    assert drifted.get("type") == "drift" and "outcome pass (expected" in drifted.get("message")
    unexpected = by_cell[("fsdp2-multigpu", "my-patch")].find("failure")
    assert unexpected.get("type") == "mismatch" and "relative error 0.93" in unexpected.text
    skipped = by_cell[("fsdp2-multigpu-4", "my-patch")].find("skipped")
    assert skipped is not None and "needs 4 CUDA" in skipped.get("message")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["torch"] == "2.13.0+cpu" and properties["verl"] == "0.9.1"


def test_junit_of_records_of_two_stacks_names_both(record):
    older = {"python": "3.11.7", "torch": "2.11.0+cpu", "transformers": "5.9.0", "verl": "0.9.1"}
    records = [
        record(scenario="fsdp2-1gpu", arm="my-patch", outcome="pass"),
        record(scenario="fsdp2-1gpu", arm="my-patch", outcome="pass", versions=older),
    ]
    suite = ET.fromstring(junit_xml(records, expectations={}, title="two stacks")).find("testsuite")
    assert suite.get("name") == "two stacks" and suite.get("failures") == "0"
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["torch"] == "2.13.0+cpu, 2.11.0+cpu"


def test_default_format_is_the_terminal_table_and_wide_the_unchanged_one(tmp_path, batch, monkeypatch, cli_in_process):
    from harness.render.tables import summary_counts, terminal_table, verdict_table, versions_line

    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path / "results"))  # where the pictures go
    records = batch["records"]
    path = write_jsonl(tmp_path / "batch.jsonl", records)
    done = cli_in_process("report", path)
    assert done.returncode == 0, done.stderr
    closing = f"{summary_counts(records)}\n{versions_line(records)}\n"
    assert done.stdout.startswith(f"{terminal_table(records)}\n\n{closing}")
    assert (tmp_path / "results" / "outcomes.svg").is_file()
    done = cli_in_process("report", "--format", "wide", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{verdict_table(records)}\n\n{closing}")


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "no such results file"),
        ("", "no records"),
        ("1\n2\n", "not a results file"),
        ("[1, 2", "not a results file"),
    ],
)
def test_report_usage_errors_are_one_line(tmp_path, content, words, cli_in_process):
    path = tmp_path / "bad.jsonl"
    if content is not None:
        path.write_text(content)
    done = cli_in_process("report", "--format", "summary", path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0] and "bad.jsonl" in lines[0]


def test_verl_main_job_checks_out_verl_main_runs_on_it_and_never_fails_the_workflow(workflow):
    job = workflow["jobs"]["verl-main"]
    assert job["continue-on-error"] is True
    checkout = next(s["with"] for s in job["steps"] if s.get("with", {}).get("repository") == "volcengine/verl")
    assert checkout["ref"] == "main"
    scripts = run_steps(job)
    # The matrix on that checkout's verl (plan/verl_trees.py), not on the installed one.
    assert any(re.search(rf"\bmake matrix VERL={checkout['path']}@HEAD\b", s) for s in scripts)
    assert any("--format summary" in s for s in scripts)


def test_releases_job_runs_the_make_target(workflow):
    scripts = run_steps(workflow["jobs"]["releases"])
    assert any(re.search(r"\bmake releases\b", s) for s in scripts) and "releases" in make_targets()
