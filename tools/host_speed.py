"""How fast this host runs plain Python right now: the best of three runs of a fixed loop (no import, no I/O), in
seconds. The same suite's CPU time moved by a factor of two between two days on this project's 2-core host (docs/
TIME.md): a figure is comparable to another only beside this one. .ci/run prints it first.

    python3 tools/host_speed.py
"""

import time


def loop_s(steps: int = 5_000_000) -> float:
    started = time.process_time()
    total = 0
    for i in range(steps):
        total += i
    return time.process_time() - started


if __name__ == "__main__":
    print(f"host speed: a 5M-step Python loop in {min(loop_s() for _ in range(3)):.2f} s of CPU (best of 3)")
