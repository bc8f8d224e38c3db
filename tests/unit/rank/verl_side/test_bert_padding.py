"""rank/verl_side/bert_padding.py's stand-ins for flash_attn.bert_padding against a plain per-row reference on small
tensors (loops over the batch, no indexing tricks), and the rule that installs the adapter only where a tree needs
it. No verl is imported: the tree's attention_utils is given as a plain namespace."""

from __future__ import annotations

import importlib.util
import types

import pytest
import torch

from harness.rank.verl_side import bert_padding as bp


def batch():
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 2, 4)  # (batch, seqlen, heads, dim)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]])
    return hidden, mask


def test_unpad_input_keeps_the_masked_tokens_in_order_with_their_lengths():
    hidden, mask = batch()
    rows, indices, cu_seqlens, max_len, used = bp.unpad_input(hidden, mask)
    expected_rows = [hidden[b, s] for b in range(3) for s in range(5) if mask[b, s]]
    assert torch.equal(rows, torch.stack(expected_rows))
    assert indices.tolist() == [b * 5 + s for b in range(3) for s in range(5) if mask[b, s]]
    assert cu_seqlens.tolist() == [0, 3, 8, 11] and cu_seqlens.dtype == torch.int32
    assert max_len == 5 and used.tolist() == [3, 5, 3]


def test_unpad_input_counts_unused_tokens_in_the_lengths_but_not_in_used():
    hidden, mask = batch()
    unused = torch.zeros_like(mask)
    unused[0, 3] = 1
    rows, indices, cu_seqlens, _, used = bp.unpad_input(hidden, mask, unused)
    assert 3 in indices.tolist() and rows.shape[0] == 12
    assert cu_seqlens.tolist() == [0, 4, 9, 12] and used.tolist() == [3, 5, 3]


def test_pad_input_puts_each_row_back_and_zeros_the_rest():
    hidden, mask = batch()
    rows, indices, *_ = bp.unpad_input(hidden, mask)
    padded = bp.pad_input(rows, indices, 3, 5)
    for b in range(3):
        for s in range(5):
            assert torch.equal(padded[b, s], hidden[b, s] if mask[b, s] else torch.zeros(2, 4))


def test_index_first_axis_selects_rows_and_its_gradient_reaches_only_them():
    table = torch.randn(6, 3, requires_grad=True)
    picked = bp.index_first_axis(table, torch.tensor([4, 0, 2]))
    assert torch.equal(picked, torch.stack([table[4], table[0], table[2]]))
    picked.sum().backward()
    assert table.grad[:, 0].tolist() == [1, 0, 1, 0, 1, 0]
    with pytest.raises(ValueError, match="at least 2 dims"):
        bp.index_first_axis(torch.arange(3), torch.tensor([0]))


@pytest.mark.parametrize(
    ("pattern", "sizes", "reference"),
    [
        ("b s ... -> (b s) ...", {}, lambda x: x.reshape(15, 2, 4)),
        ("(b s) ... -> b s ...", {"b": 3}, None),
        ("b s h d -> b s (h d)", {}, lambda x: x.reshape(3, 5, 8)),
        ("b s h d -> b h s d", {}, lambda x: x.transpose(1, 2)),
        ("b ... -> b (...)", {}, lambda x: x.reshape(3, 40)),
    ],
)
def test_rearrange_matches_the_reshape_and_permute_it_names(pattern, sizes, reference):
    hidden, _ = batch()
    if reference is None:  # the inverse of the first: back from (b s) rows
        flat = hidden.reshape(15, 2, 4)
        assert torch.equal(bp.rearrange(flat, pattern, **sizes), hidden)
        return
    assert torch.equal(bp.rearrange(hidden, pattern, **sizes), reference(hidden))


def test_rearrange_refuses_what_it_does_not_handle_in_one_line():
    hidden, _ = batch()
    with pytest.raises(ValueError, match="no '->'"):
        bp.rearrange(hidden, "b s h d")
    with pytest.raises(ValueError, match="different axes"):
        bp.rearrange(hidden, "b s h d -> b s h")
    with pytest.raises(ValueError, match="without sizes"):
        bp.rearrange(hidden.reshape(15, 8), "(b s) d -> b s d")


def tree(fallbacks: bool):
    """A tree's verl.utils.attention_utils as the adapter reads it: a resolver, and #7127's fallbacks or not."""
    module = types.SimpleNamespace(_get_attention_functions=lambda: None)
    if fallbacks:
        module._fallback_pad_input = object()
    return module


def test_installed_only_where_the_tree_needs_it_and_flash_attn_is_absent():
    if importlib.util.find_spec("flash_attn") is not None:
        assert not bp.installed_for(tree(fallbacks=False))  # the real flash-attn: never replaced
        return
    assert bp.installed_for(tree(fallbacks=False))  # before verl #7127
    assert not bp.installed_for(tree(fallbacks=True))  # from #7127 on: verl's own fallbacks
    assert not bp.installed_for(types.SimpleNamespace())  # no resolver to wrap


def test_the_wrapped_resolver_answers_flash_attn_s_absence_alone():
    def needs(module: str):
        def resolve():
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)

        return resolve

    assert bp.or_stand_ins(needs("flash_attn"))() == (bp.index_first_axis, bp.pad_input, bp.rearrange, bp.unpad_input)
    assert bp.or_stand_ins(needs("flash_attn.bert_padding"))()[1] is bp.pad_input
    with pytest.raises(ModuleNotFoundError, match="torch_npu"):  # another missing package stays the tree's error
        bp.or_stand_ins(needs("torch_npu"))()
    real = (1, 2, 3, 4)
    assert bp.or_stand_ins(lambda: real)() is real  # where verl resolves them itself, its own functions
