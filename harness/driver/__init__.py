"""The user's process: arms, launch, the runner, the verdict, records. Never imports torch or verl at module
load (tests/unit/test_layout.py checks it)."""
