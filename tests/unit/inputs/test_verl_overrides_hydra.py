"""Every key=value the harness reads (import, a scenario's `verl:` numbers, verl's defaults) is read by Hydra's own
override parser (inputs/verl_overrides.py hydra_value), the one verl's main_ppo reads it with: each value below goes
through Hydra and through the harness, and both give the same value of the same type (issue 65: the harness's own
reader took `none` for null, which Hydra gives verl as the string "none")."""

from __future__ import annotations

import math

import pytest

from harness.inputs.verl_overrides import hydra_value

pytestmark = pytest.mark.unit

# (the text after `key=`, what verl gets): null in any case, `none` a string, lists nested and quoted,
# interpolations kept as their text (OmegaConf resolves them in verl's config), exponents, booleans in any case.
VALUES = [
    ("null", None),
    ("NULL", None),
    ("Null", None),
    ("none", "none"),
    ("None", "None"),
    ("true", True),
    ("True", True),
    ("TRUE", True),
    ("tRuE", True),
    ("false", False),
    ("FALSE", False),
    ("", ""),
    ("10", 10),
    ("-3", -3),
    ("1_000", 1000),
    ("1e-6", 1e-6),
    ("2.0e-3", 2.0e-3),
    ("1E5", 1e5),
    ("-1.5e+20", -1.5e20),
    (".5", 0.5),
    ("inf", math.inf),
    ("[0.9,0.95]", [0.9, 0.95]),
    ("[0.9, 0.95]", [0.9, 0.95]),
    ("[]", []),
    ("[[1,2],[3,[4]]]", [[1, 2], [3, [4]]]),
    ("[1, none, null]", [1, "none", None]),
    ("['a b', \"c,d\"]", ["a b", "c,d"]),
    ("'x y'", "x y"),
    ('"null"', "null"),
    ("'1e-6'", "1e-6"),
    ("${a.b}", "${a.b}"),
    ("${oc.select:a.b,1}", "${oc.select:a.b,1}"),
    ("pre_${a}_post", "pre_${a}_post"),
    ("{a: 1, b: [x, 'y z']}", {"a": 1, "b": ["x", "y z"]}),
    ("vllm", "vllm"),
    ("Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"),
    ("$HOME/data/geo3k/train.parquet", "$HOME/data/geo3k/train.parquet"),
    ("str(1)", "1"),
]


def _same(a, b) -> bool:
    """Equal, of the same type all the way down (1 is not 1.0 nor True here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("text, meaning", VALUES, ids=[repr(t) for t, _ in VALUES])
def test_a_value_is_what_hydra_gives_verl(text, meaning):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    hydra = OverridesParser.create().parse_overrides([f"actor_rollout_ref.actor.x={text}"])[0].value()
    harness = hydra_value(text)
    assert _same(harness, hydra), (text, harness, hydra)
    assert _same(harness, meaning), (text, harness, meaning)


@pytest.mark.parametrize(
    "text, said",
    [
        ("[console,", "Hydra's override grammar cannot read it: no viable alternative at input '[console,'"),
        ("'abc", "Hydra's override grammar cannot read it"),
        ("a,b", "Hydra reads a sweep"),
        ("range(1,3)", "Hydra reads a sweep"),
    ],
)
def test_a_value_hydra_cannot_read_whole_or_reads_as_a_sweep_is_refused_with_why(text, said):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_overrides([f"k={text}"])[0]
    except HydraException:
        pass  # Hydra refuses it too
    else:
        assert override.is_sweep_override(), text
    with pytest.raises(ValueError, match=None) as raised:
        hydra_value(text)
    assert str(raised.value).startswith(said), str(raised.value)


def test_the_driver_imports_hydra_only_when_a_value_is_read():
    import subprocess
    import sys

    from harness.paths import ROOT

    code = "import sys, harness.inputs.verl_overrides, harness.commands.importer; print('hydra' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


def test_verl_defaults_are_read_as_hydra_composes_them():
    """verl's trainer YAML through OmegaConf (Hydra's reading): a quoted 'true' and `none` stay strings there."""
    from harness.inputs.verl_defaults import MISSING, _defaults, verl_default

    nsys = "global_profiler.global_tool_config.nsys.worker_nsight_options."
    assert _defaults()[nsys + "kill"] == "none"
    assert _defaults()[nsys + "cuda-memory-usage"] == "true"
    assert verl_default("actor_rollout_ref.actor.optim.lr", {}) == 1e-6
    assert verl_default("no.such.name", {}) is MISSING
