"""How fast this host is right now, two ways (best of three each, no import beyond the standard library):
- a fixed Python loop, in seconds of CPU;
- new memory: 256 MiB mapped and written a byte per 4 KiB page, in microseconds a page (each write a page fault).
The same suite's CPU time moved by a factor of two between a morning and an afternoon on this project's 2-core host
while the loop did not move; the page figure did (docs/TIME.md). A figure compares with another only beside these.
.ci/run prints them first.

    python3 tools/host_speed.py
"""

import mmap
import time

PAGE, SIZE = 4096, 256 << 20


def loop_s(steps: int = 5_000_000) -> float:
    started = time.process_time()
    total = 0
    for i in range(steps):
        total += i
    return time.process_time() - started


def new_page_us() -> float:
    memory = mmap.mmap(-1, SIZE)
    started = time.perf_counter()
    for offset in range(0, SIZE, PAGE):
        memory[offset] = 1
    elapsed = time.perf_counter() - started
    memory.close()
    return elapsed / (SIZE // PAGE) * 1e6


if __name__ == "__main__":
    loop, page = min(loop_s() for _ in range(3)), min(new_page_us() for _ in range(3))
    print(f"host speed: loop {loop:.2f} s of CPU (5M steps), new memory {page:.2f} us a 4 KiB page; best of 3")
