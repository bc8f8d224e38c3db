"""What runs verl's own code on the rank: its config classes filled as its trainer fills them (verl_config.py), its
training engine and worker (engine.py), the direct path around its monkey patch, the engine path and its update,
and the small named environment adapters a CPU-only host needs (adapters.py, varlen_attention.py)."""
