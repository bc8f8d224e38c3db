"""Everything that runs inside a torchrun rank, in three rooms and the plumbing around them:

oracle/     the reference a run is judged against: the seeded model and batches both sides start from, the losses
            written from their definitions, the per-sample oracle, its training update, FSDP2's own unfused path.
            It never imports verl, nor anything of verl_side/ or measures/ (tests/unit/test_oracle_independence.py).
verl_side/  what drives verl's own code: its configuration (verl_config.py, the one source), its engine, the
            direct and engine paths, and the named environment adapters that let it run on a CPU host.
measures/   what is measured around verl's step and compared with the oracle: parity, collectives, residency,
            the fused head's memory.
worker.py, torchrun.py, phases.py, stacks.py, warning_log.py: the process plumbing of one rank (its lifecycle, the
            torchrun wrapper, the phases it announces, its stacks on demand, the warnings it raised).
"""
