"""The one place where every rank's per-parameter shard statistics become the whole gradient's.

A rank holds only its shard of each gradient, so rank/measures/parity.py reports sums over that shard: ||g - g_ref||^2,
||g_ref||^2 and its element count for the parity numbers, and <g, g> with <g, B> and <B, B> per alternative B (the
reference itself among them) for the diagnosis. Shards are disjoint, so each sum over ranks is the unsharded
gradient's. Ranks are added in order, so the same results always give the same floats. judge_cell/verdict.py and
judge_cell/diagnosis.py read only these sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.records.rank_measures import GradShard


@dataclass
class AlternativeSums:
    """<g, B> and <B, B> for one alternative B, summed over the ranks that measured them."""

    gb: float = 0.0
    bb: float = 0.0
    ranks: int = 0


@dataclass
class GradientSums:
    """One parameter's gradient statistics, summed over every rank's shard."""

    ranks: int  # ranks merged, whether or not each reported this parameter
    diff_sq: float = 0.0  # ||g - g_ref||^2
    ref_sq: float = 0.0  # ||g_ref||^2
    numel: int = 0  # elements (0 from records written before it was stored)
    problems: set[str] = field(default_factory=set)  # what any rank found wrong with its shard ("missing", ...)
    alternative_ranks: int = 0  # ranks that compared their shard with the alternatives
    gg: float = 0.0  # <g, g>, over those ranks
    alternatives: dict[str, AlternativeSums] = field(default_factory=dict)

    def every_rank_compared(self) -> bool:
        """Whether every rank compared its shard with the alternatives: only then are the sums the whole
        gradient's."""
        return self.alternative_ranks == self.ranks


def merge_ranks(grads_by_rank: list[dict[str, GradShard]]) -> dict[str, GradientSums]:
    """Every rank's per-parameter entries (rank/measures/parity.py compare_gradients) -> parameter name -> global
    sums, in the order the parameters first appear."""
    merged: dict[str, GradientSums] = {}
    for grads in grads_by_rank:
        for name, entry in grads.items():
            sums = merged.setdefault(name, GradientSums(ranks=len(grads_by_rank)))
            sums.diff_sq += entry.diff_sq
            sums.ref_sq += entry.ref_sq
            sums.numel += entry.numel
            if entry.problem:
                sums.problems.add(entry.problem)
            # A shard's comparison with the alternatives is its "fit": <g, g> under "gg", and per alternative
            # its <g, B> and <B, B>.
            fit = entry.fit
            if not fit:
                continue
            sums.alternative_ranks += 1
            sums.gg += fit["gg"]
            for alternative, terms in fit.items():
                if alternative == "gg":
                    continue
                alt = sums.alternatives.setdefault(alternative, AlternativeSums())
                alt.gb += terms["gb"]
                alt.bb += terms["bb"]
                alt.ranks += 1
    return merged


def even_share_relative(sums: dict[str, tuple[float, float, int]]) -> dict[str, float]:
    """name -> (||x - x_ref||^2, ||x_ref||^2, elements), summed over ranks -> name -> ||x - x_ref|| / max(||x_ref||,
    its even share of the whole reference's norm).

    The even share, ||X_ref|| * sqrt(n_p / N) (N elements in all), is the norm the parameter's part would have if
    the whole reference were spread evenly over its elements. A parameter whose part is tiny next to the model's
    (Qwen3.5's linear-attention dt_bias) is then not judged on rounding relative to its own near-zero norm; one
    whose part is at least its even share (lm_head's gradient is) is judged by its own norm. Entries without
    elements (records from before they were stored) use their own norm. Gradients and updates are judged so."""
    all_ref_sq = sum(ref_sq for _, ref_sq, _ in sums.values())
    all_numel = sum(numel for _, _, numel in sums.values())
    rel = {}
    for name, (diff_sq, ref_sq, numel) in sums.items():
        even_share_sq = all_ref_sq * numel / all_numel if all_numel else 0.0
        scale_sq = max(ref_sq, even_share_sq)
        if diff_sq == 0:
            rel[name] = 0.0
        elif scale_sq == 0 or math.isinf(diff_sq):
            rel[name] = math.inf
        else:
            rel[name] = math.sqrt(diff_sq / scale_sq)
    return rel
