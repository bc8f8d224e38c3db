"""Per-child start cost: this project's server + stand-in against multiprocessing's forkserver with
set_forkserver_preload, the same preload list, the same trivial child (its imports done already; it exits).

    .venv/bin/python tools/forkserver_bench.py ours|forkserver|interp      (N=10 children; figures: docs/TIME.md)
"""

import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD_DIR = tempfile.mkdtemp(prefix="forkserver-bench-")
Path(CHILD_DIR, "bench_child.py").write_text(
    "import sys\nimport torch  # noqa: F401\nimport transformers.models.qwen3_vl.modeling_qwen3_vl  # noqa: F401\n"
    "sys.exit(0)\n"
)
sys.path[:0] = [str(ROOT), CHILD_DIR]
os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
from harness.processes.server import PRELOAD  # noqa: E402

N = int(os.environ.get("N", "8"))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([CHILD_DIR, str(ROOT)]))


def child():
    import runpy

    runpy.run_module("bench_child", run_name="__main__")


def ours():
    d = tempfile.mkdtemp()
    sock = os.path.join(d, "s")
    t = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-X", "frozen_modules=off", "-m", "harness.processes.server", sock],
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    ready = server.stdout.readline().decode().strip()
    start = time.perf_counter() - t
    env = dict(ENV, HARNESS_PRELOAD_SOCKET=sock)
    times = []
    for _ in range(N):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "harness.processes.stand_in", "--module", "bench_child"],
            env=env,
            check=True,
            cwd=ROOT,
        )
        times.append(time.perf_counter() - t)
    server.stdin.close()
    server.wait()
    return ready, start, times


def forkserver():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    t = time.perf_counter()
    p = ctx.Process(target=child)
    p.start()
    p.join()  # the forkserver starts (and preloads) here
    start = time.perf_counter() - t
    times = []
    for _ in range(N):
        t = time.perf_counter()
        p = ctx.Process(target=child)
        p.start()
        p.join()
        assert p.exitcode == 0, p.exitcode
        times.append(time.perf_counter() - t)
    return start, times


def interp():
    times = []
    for _ in range(N):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import json, socket, struct"], env=ENV, check=True)
        times.append(time.perf_counter() - t)
    return times


def _spread(times: list[float]) -> str:
    ms = [t * 1e3 for t in times]
    return f"median {statistics.median(ms):.0f} ms [{min(ms):.0f}-{max(ms):.0f}]"


if __name__ == "__main__":
    name = sys.argv[1]
    up = open("/proc/loadavg").read().split()[:3]
    if name == "ours":
        ready, start, times = ours()
        print(f"ours       load {up}: server {ready} in {start:.1f} s; per child {_spread(times)}", flush=True)
    elif name == "forkserver":
        start, times = forkserver()
        print(f"forkserver load {up}: server start + first child {start:.1f} s; per child {_spread(times)}", flush=True)
    else:
        print(f"interp     load {up}: a fresh python (the stand-in's own start) {_spread(interp())}", flush=True)
