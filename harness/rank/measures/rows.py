"""The rows of a step's log-probs and entropy by what verl's trainer does with them, and two readings of them:
the rows a head skipped (verl's log-prob and entropy exactly 0 where the oracle's are not), and the comparison
over the rows the trainer reads alone.

Row t of a sequence scores token t+1. verl's trainer keeps only the rows that score the response,
`[:, -response_length - 1 : -1]` (verl/utils/torch_functional.py logprobs_from_logits_response, the engines'
`output.log_probs[:, -response_length - 1 : -1]`): the prompt's rows before its last and the sequence's last row
(its label wraps around to the first token) are never read. The loss weighs the rows it reads by the response
mask: a row past a response's end is read and weighed 0.
"""

from __future__ import annotations

import torch

from harness.rank.measures.parity import compare_outputs

PROMPT, BEFORE_RESPONSE, RESPONSE, RESPONSE_PADDING, LAST, SHARD_END = (
    "prompt rows",
    "the row before the response (it scores the response's first token)",
    "response rows",
    "response rows past the response's end",
    "the last row (its label wraps around)",
    "response rows before an SP shard boundary (a shard's last row)",
)

LOSS_ROLES = (BEFORE_RESPONSE, RESPONSE, SHARD_END)  # the rows the loss weighs


def sequence_roles(seq_len: int, response_mask: torch.Tensor) -> tuple[list[list[str]], torch.Tensor]:
    """(per sample, each row's role; the rows the trainer reads, (B, L) bool) of a (B, L) batch whose last
    R = response_mask.shape[1] tokens are the response."""
    response_mask = response_mask.cpu()
    batch, response_len = response_mask.shape
    first = seq_len - response_len - 1  # the row that scores the response's first token
    roles, read = [], torch.zeros(batch, seq_len, dtype=torch.bool)
    read[:, first : seq_len - 1] = True
    for b in range(batch):
        row = [PROMPT] * first + [BEFORE_RESPONSE]
        row += [RESPONSE if response_mask[b, j] else RESPONSE_PADDING for j in range(1, response_len)]
        roles.append(row + [LAST])
    return roles, read


def response_roles(mask: torch.Tensor, shard_ends: set | None = None) -> tuple[list[list[str]], torch.Tensor]:
    """The same for a batch of response rows only (the engine path compares those): every one read; shard_ends:
    the (sample, token) rows computed last in their Ulysses SP shard."""
    ends = shard_ends or set()
    roles = [[SHARD_END if (b, t) in ends else RESPONSE for t in range(mask.shape[1])] for b in range(mask.shape[0])]
    return roles, mask.bool()


def skipped_rows(log_probs, entropy, ref_log_probs, ref_entropy, roles: list[list[str]], read) -> dict | None:
    """Rows where verl's log-prob (and entropy, where both have one) are exactly 0 and the oracle's log-prob is
    not: {"count", "of" (rows the oracle scored), "by_role": {role: count}, "read": how many the trainer reads,
    "in_loss": how many the loss weighs (read, within the response's end)}."""
    lp, ref = log_probs.detach().float().cpu(), ref_log_probs.detach().float().cpu()
    if lp.shape != ref.shape:
        return None
    zero = lp == 0
    if entropy is not None and ref_entropy is not None and entropy.shape == lp.shape:
        zero &= entropy.detach().float().cpu() == 0
    skipped = zero & (ref != 0)
    by_role: dict[str, int] = {}
    for b, t in skipped.nonzero().tolist():
        role = roles[b][t]
        by_role[role] = by_role.get(role, 0) + 1
    return {
        "count": int(skipped.sum()),
        "of": int((ref != 0).sum()),
        "by_role": by_role,
        "read": int((skipped & read).sum()),
        "in_loss": sum(n for role, n in by_role.items() if role in LOSS_ROLES),
    }


def read_rows_comparison(actual, expected, read) -> dict:
    """compare_outputs over the rows the trainer reads only (flattened)."""
    actual, expected = actual.detach().float().cpu(), expected.detach().float().cpu()
    if actual.shape != expected.shape or actual.shape != read.shape:
        return compare_outputs(actual, expected)
    return compare_outputs(actual[read], expected[read])
