"""Judging what a launch produced: the verdict, the update's verdict, the diagnosis of a failure, shard sums, known
failures, the fused head's memory, a patch's verdict against expectations."""
