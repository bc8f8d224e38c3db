"""The one place where every rank's per-parameter shard statistics become the whole gradient's.

A rank holds only its shard of each gradient, so rank/parity.py reports sums over that shard: ||g - g_ref||^2,
||g_ref||^2 and its element count for the parity numbers, and <g, g> with <g, B> and <B, B> per alternative B (the
reference itself among them) for the diagnosis. Shards are disjoint, so each sum over ranks is the unsharded
gradient's. Ranks are added in order, so the same results always give the same floats. driver/verdict.py and
driver/diagnosis.py read only these sums.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


def merge_ranks(grads_by_rank: list[dict]) -> dict[str, GradientSums]:
    """Every rank's per-parameter entries (rank/parity.py compare_gradients) -> parameter name -> global sums, in
    the order the parameters first appear."""
    merged: dict[str, GradientSums] = {}
    for grads in grads_by_rank:
        for name, entry in grads.items():
            sums = merged.setdefault(name, GradientSums(ranks=len(grads_by_rank)))
            sums.diff_sq += entry["diff_sq"]
            sums.ref_sq += entry["ref_sq"]
            sums.numel += entry.get("numel", 0)
            if entry["problem"]:
                sums.problems.add(entry["problem"])
            # The record's key for a shard's comparison with the alternatives is "fit": <g, g> under "gg", and
            # per alternative its <g, B> and <B, B>.
            fit = entry.get("fit")
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
