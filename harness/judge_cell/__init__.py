"""Judging one cell: what its ranks left against the oracle (the verdict, the update's verdict, the diagnosis of a
failure, shard sums). The runner (run/) calls it once per cell; it never looks at another cell."""
