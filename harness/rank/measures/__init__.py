"""What is measured around verl's step on the rank, and how it is compared with the oracle: parity of log-probs,
entropies and gradient shards, the collectives from the profiler's trace, what the step leaves resident, and the
fused head's memory (around_step.py)."""
