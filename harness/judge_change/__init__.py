"""Judging a change across cells: a patch or pull request against its base and the oracle, a recipe's answer, a
setting's effect, the changed lines and branches the cells ran, the fused head's memory. The commands call it with the
records the runner wrote; it never starts a cell."""
