"""The one runner: run_plan walks every cell through plan -> launch -> judge -> records (runner.py), locally or as
Ray tasks (ray_runner.py). Never imports torch or verl at module load (tests/unit/test_layout.py checks it)."""
