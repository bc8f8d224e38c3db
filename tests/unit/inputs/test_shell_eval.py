"""inputs/shell_eval.py: bash's test commands and integer arithmetic on known values; None where bash would run a
command or read a value import does not know."""

from __future__ import annotations

import ast

import pytest

from harness.inputs.shell_eval import combine, command_status, integer

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "words, status",
    [
        (["[", "gpu", "=", "gpu", "]"], True),
        (["[", "gpu", "!=", "gpu", "]"], False),
        (["[[", "gpu-8", "==", "gpu*", "]]"], True),
        (["!", "[", "-z", "", "]"], False),
        (["[", "3", "-ge", "2", "]"], True),
        (["[", "-f", "/etc/x", "]"], None),  # files are not looked at
        (["python3", "-c", "import torch_npu"], None),  # a command: not run
        (["[", "\x00U0\x00", "=", "npu", "]"], None),  # an unknown value
    ],
)
def test_a_condition_is_what_bash_finds_or_not_known(words, status):
    assert command_status(words) is status


def test_and_or_lists_keep_what_is_known():
    assert combine(False, "&&", None) is False and combine(True, "||", None) is True
    assert combine(None, "&&", True) is None and combine(True, ";", False) is False


def test_integer_division_truncates_toward_zero_as_bashs_does():
    assert integer(ast.parse("-7 // 2", mode="eval").body) == -3
    assert integer(ast.parse("-7 % 2", mode="eval").body) == -1
    with pytest.raises(ValueError):
        integer(ast.parse("'a' + 1", mode="eval").body)
