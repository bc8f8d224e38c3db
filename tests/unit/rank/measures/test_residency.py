"""The rank-side residency check (rank/measures/residency.py): a full-size lm_head copy left alive after the step is
found among live objects, one that a parameter, a gradient or the references hold is not."""

from __future__ import annotations

import pytest
import torch

from harness.rank.measures.residency import _plain_tensors, residency_after_step

pytestmark = pytest.mark.unit


class _Subclass(torch.Tensor):
    pass


def test_plain_tensors_are_judged_by_type_as_isinstance_would():
    class NotATensor:
        pass

    plain, sub = torch.zeros(2), torch.zeros(3).as_subclass(_Subclass)
    param = torch.nn.Parameter(torch.zeros(2))
    found = _plain_tensors([plain, param, sub, NotATensor(), 3, "x", [plain]], dtensor_type=())
    assert [id(t) for t in found] == [id(plain), id(sub)]


def test_a_kept_lm_head_copy_is_counted_and_one_held_by_the_references_is_not():
    head = torch.nn.Linear(4, 6, bias=False)
    head.weight.grad = torch.ones(6, 4)
    model = torch.nn.Sequential(head)
    ours = torch.zeros(6, 4)
    before = residency_after_step(model, (6, 4), ignore=[ours])
    leaked = head.weight.detach().clone()  # a gathered copy a patch would keep alive
    after = residency_after_step(model, (6, 4), ignore=[ours])
    assert before["lm_head_copies"] == 0
    assert (after["lm_head_copies"], after["lm_head_copy_bytes"]) == (1, 6 * 4 * 4)
    del leaked
