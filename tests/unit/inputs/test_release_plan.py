"""`harness releases` without building anything: its plan file, the two facts read from a release's source, the
table. The real run on an older release is tests/distributed/test_releases.py (a different basename: pytest imports
these test files by basename)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.inputs.release_plan import RELEASES_FILE, load_release_plan
from harness.inputs.scenario import load_all
from harness.plan.release_facts import lm_head_unit, release_facts, weight_read
from harness.records.results import Record
from harness.render.tables import release_table

pytestmark = pytest.mark.unit


def test_the_plan_names_releases_scenarios_and_a_candidate_that_exist():
    plan = load_release_plan()
    assert plan.releases[0] == "0.6.0" and "0.9.1" in plan.releases
    assert set(plan.scenarios) <= {s.name for s in load_all()}
    assert (RELEASES_FILE.parent.parent / "patches" / f"{plan.candidate}.diff").is_file()


def test_a_release_pin_replaces_the_shared_pin_of_its_package(tmp_path):
    path = tmp_path / "releases.yaml"
    path.write_text(
        "releases: ['0.7.0', '0.8.0']\nscenarios: [direct-1gpu]\ncandidate: x\n"
        "pins: ['torch==2.13.0+cpu', 'transformers==5.10.4']\n"
        "release_pins: {'0.7.0': ['Transformers==4.57.6', 'numpy==1.26.4']}\n"
    )
    plan = load_release_plan(path)
    assert plan.pins_for("0.7.0") == ("torch==2.13.0+cpu", "Transformers==4.57.6", "numpy==1.26.4")
    assert plan.pins_for("0.8.0") == ("torch==2.13.0+cpu", "transformers==5.10.4")


def test_the_releases_written_for_transformers_4_get_transformers_4():
    """0.6.0 to 0.7.1 unpack the vision tower's output as a tuple (transformers 4); the others run on the shared
    transformers 5, and every release on the one CPU torch."""
    plan = load_release_plan()
    for version in plan.releases:
        pins = plan.pins_for(version)
        assert "torch==2.13.0+cpu" in pins
        transformers = next(p for p in pins if p.startswith("transformers=="))
        old = version in ("0.6.0", "0.6.1", "0.7.0", "0.7.1")
        assert transformers.startswith("transformers==4.57.") == old, (version, pins)


@pytest.mark.parametrize(
    "text,field",
    [
        ("releases: [0.8]\nscenarios: [direct-1gpu]\ncandidate: x\n", "releases"),
        ("releases: ['0.8.0']\nscenarios: [direct-1gpu]\ncandidate: x\npins: ['verl==0.9.1']\n", "pins"),
        ("releases: ['0.8.0']\nscenarios: [direct-1gpu]\ncandidate: x\npins: ['torch>=2']\n", "pins"),
        ("releases: ['0.8.0']\ncandidate: x\n", "scenarios"),
        ("releases: ['0.8.0']\nscenarios: [direct-1gpu]\ncandidate: x\ncolour: red\n", "colour"),
        (
            "releases: ['0.8.0']\nscenarios: [direct-1gpu]\ncandidate: x\nrelease_pins: {'0.7.0': ['a==1']}\n",
            "release_pins",
        ),
        (
            "releases: ['0.8.0']\nscenarios: [direct-1gpu]\ncandidate: x\nrelease_pins: {'0.8.0': ['a>=1']}\n",
            "release_pins",
        ),
        (
            "releases: ['0.8.0']\nscenarios: [direct-1gpu]\ncandidate: x\nrelease_pins: {'0.8.0': ['verl==0.9.1']}\n",
            "release_pins",
        ),
    ],
)
def test_a_bad_plan_is_one_line_naming_file_and_field(tmp_path, text, field):
    path = tmp_path / "releases.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as exc:
        load_release_plan(path)
    message = str(exc.value)
    assert message.startswith(f"{path}: field '{field}") and "\n" not in message, message


def _verl(tmp_path: Path, fsdp_utils: str, qwen3_vl: str | None) -> Path:
    root = tmp_path / "verl"
    (root / "utils").mkdir(parents=True)
    (root / "models" / "transformers").mkdir(parents=True)
    (root / "utils" / "fsdp_utils.py").write_text(fsdp_utils)
    if qwen3_vl is not None:
        (root / "models" / "transformers" / "qwen3_vl.py").write_text(qwen3_vl)
    return root


ROOT_UNIT = """def apply_fsdp2(model, fsdp_kwargs, config):
    # lm_head is not named: "lm_head" in a comment does not count
    modules = [m for m in model.modules() if isinstance(m, nn.Embedding)]
"""
OWN_UNIT = """def _wrap(model):
    _wrap_by_name = set() if _tie else {"embed_tokens", "lm_head"}
"""
READ_AS_IS = """def other():
    return self.lm_head.weight.full_tensor()

def forward_with_torch_backend(self, x):
    # self.lm_head.weight.full_tensor() in a comment does not count
    return fused(x, self.lm_head.weight)

def after():
    pass
"""
READ_FULL = """def forward_with_torch_backend(self, x):
    w = self.lm_head.weight
    if isinstance(w, DTensor):
        w = w.full_tensor()
    return fused(x, w)
"""


def test_facts_read_from_source_text_with_their_line(tmp_path):
    assert lm_head_unit(_verl(tmp_path / "a", ROOT_UNIT, READ_AS_IS))["value"] == "root unit"
    own = lm_head_unit(_verl(tmp_path / "b", OWN_UNIT, READ_AS_IS))
    assert own == {"value": "own unit (untied)", "where": "utils/fsdp_utils.py:2"}
    # Only the fused forward's own body counts, comments never.
    assert weight_read(_verl(tmp_path / "c", ROOT_UNIT, READ_AS_IS)) == {
        "value": "as is (self.lm_head.weight)",
        "where": "models/transformers/qwen3_vl.py:6",
    }
    assert weight_read(_verl(tmp_path / "d", ROOT_UNIT, READ_FULL)) == {
        "value": "full_tensor()",
        "where": "models/transformers/qwen3_vl.py:4",
    }
    assert weight_read(_verl(tmp_path / "e", ROOT_UNIT, None))["value"] == "no fused torch path"


def test_facts_of_the_installed_verl():
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is not installed")
    facts = release_facts(Path(spec.submodule_search_locations[0]))
    # verl 0.9.x: lm_head in its own unit since 0.7.1, read through full_tensor() since #6659.
    assert facts["lm_head_unit"]["value"] == "own unit (untied)"
    assert facts["lm_head_weight_read"]["value"] == "full_tensor()"


def test_release_table_one_row_per_release_with_both_arms():
    facts = {
        "lm_head_unit": {"value": "root unit", "where": "u:1"},
        "lm_head_weight_read": {"value": "as is (self.lm_head.weight)", "where": "q:2"},
    }
    records = [
        {"release": "0.7.0", "release_facts": facts, "scenario": "s1", "arm": "upstream", "outcome": "pass"},
        {
            "release": "0.7.0",
            "release_facts": facts,
            "scenario": "s1",
            "arm": "cand",
            "outcome": "skipped",
            "skipped_reason": "does not apply: p.diff: hunk #2 (@@ -1 +1 @@) does not apply to verl/x.py: context",
        },
        {
            "release": "0.9.1",
            "release_facts": facts,
            "scenario": "s1",
            "arm": "upstream",
            "outcome": "mismatch",
            "parity": {"grad_worst_rel": 1.0, "grad_worst_param": "lm_head.weight"},
        },
        {
            "release": "0.9.1",
            "release_facts": facts,
            "scenario": "s1",
            "arm": "cand",
            "outcome": "error",
            "why": "sharded lm_head.weight read outside its FSDP unit's forward",
            "error": {"type": "RuntimeError"},
        },
    ]
    lines = release_table([Record.model_validate(r) for r in records], ["s1"], "cand").splitlines()
    assert len(lines) == 4 and "s1: as released / cand" in lines[0]
    assert (
        "| 0.7.0 | root unit (u:1) | as is (self.lm_head.weight) (q:2) | pass / does not apply (hunk #2) |"
        in " ".join(" ".join(lines[2].split()).split("  "))
    )
    assert "mismatch: grad lm_head.weight 1 / error: sharded lm_head.weight read outside its FSDP unit" in lines[3]


def test_each_committed_constraints_file_was_resolved_with_its_releases_pins():
    """A pin changed in scenarios/releases.yaml takes effect only when --compile resolves the file again: a file
    resolved with other pins would run a release on what the plan does not say."""
    from harness.plan.release_envs import constraints_file

    plan = load_release_plan()
    for version in plan.releases:
        path = constraints_file(version)
        if not path.is_file():
            continue
        lines = path.read_text().splitlines()
        assert lines[0].endswith(f"verl=={version} {' '.join(plan.pins_for(version))}"), (path, lines[0])
        for pin in plan.pins_for(version):
            assert pin in lines, (path, pin)
