"""The one runner: run_plan walks every cell through plan -> launch -> judge -> records (runner.py); an executor runs
each launch on this host's threads or as a Ray task (executors.py, ray_executor.py). Never imports torch or verl at
module load (tests/unit/test_layout.py checks it)."""
