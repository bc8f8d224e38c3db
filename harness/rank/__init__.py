"""Everything that runs inside a torchrun rank: model, batch, loss, oracle, references, step, measures, parity,
residency, collectives, and the worker that runs them phase by phase."""
