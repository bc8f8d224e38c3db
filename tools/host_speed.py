"""How fast this host is right now, and what kind of host it is (no import beyond the standard library).

Figures, best of three each:
- a fixed Python loop, in seconds of CPU;
- new memory: 256 MiB mapped and written a byte per 4 KiB page, in microseconds a page (each write a page fault);
- a system call (getppid), in microseconds.
Facts, read from the kernel: whether it runs under a hypervisor (and a nested one), whether a transparent huge page
is granted when asked for, and whether DAMON pages out memory left untouched (on this project's host the page
cache: a venv's modules read again from disk by a command a minute after the last).

The same suite's CPU time moved by a factor of two between a morning and an afternoon on this project's 2-core host
while the loop did not move; the page figure did (docs/TIME.md). A figure compares with another only beside these.
.ci/run prints them first.

    python3 tools/host_speed.py
"""

import mmap
import os
import time
from pathlib import Path

PAGE, SIZE, HUGE = 4096, 256 << 20, 2 << 20
KERNEL = Path("/")  # where /proc and /sys are read from (a test's own tree in tests/unit/test_tooling.py)


def loop_s(steps: int = 5_000_000) -> float:
    started = time.process_time()
    total = 0
    for i in range(steps):
        total += i
    return time.process_time() - started


def new_page_us(size: int = SIZE) -> float:
    memory = mmap.mmap(-1, size)
    started = time.perf_counter()
    for offset in range(0, size, PAGE):
        memory[offset] = 1
    elapsed = time.perf_counter() - started
    memory.close()
    return elapsed / (size // PAGE) * 1e6


def syscall_us(calls: int = 200_000) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        os.getppid()
    return (time.perf_counter() - started) / calls * 1e6


def _file(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _read(path: str) -> str:
    """A kernel file's text ("" where it is missing or unreadable); path as the kernel names it."""
    return _file(KERNEL / path.lstrip("/"))


def hypervisor() -> str:
    """One of: bare metal, a VM, a nested VM (a guest of a guest: its page tables are kept by a hypervisor that is
    itself a guest, so each page fault and each page-table change costs several exits)."""
    if " hypervisor" not in _read("/proc/cpuinfo"):
        return "bare metal"
    nested = any(word.startswith("nested_pvm=1") for word in _read("/proc/cmdline").split())
    return "a nested VM (nested_pvm)" if nested else "a VM"


def _anon_huge_kb() -> int:
    for line in _read("/proc/self/smaps_rollup").splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def huge_page_granted() -> bool | None:
    """Whether 4 MiB mapped, madvise(MADV_HUGEPAGE)d and written (a 2 MiB-aligned block inside) get a huge page
    (None: the kernel does not say). With transparent huge pages set to madvise or always, a bare-metal kernel
    grants one; a nested guest's did not (2026-12-02, docs/TIME.md)."""
    if not _read("/proc/self/smaps_rollup") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    memory = mmap.mmap(-1, 2 * HUGE)
    before = _anon_huge_kb()
    try:
        memory.madvise(mmap.MADV_HUGEPAGE)
        for offset in range(0, 2 * HUGE, PAGE):
            memory[offset] = 1
        return _anon_huge_kb() > before
    finally:
        memory.close()


def damon_pageout_s() -> float | None:
    """The idle time after which a running DAMON scheme pages memory out (None: none runs, or none is readable):
    its scheme's minimum age, in aggregation intervals, times the interval."""
    for kdamond in (KERNEL / "sys/kernel/mm/damon/admin/kdamonds").glob("[0-9]*"):
        if _file(kdamond / "state") != "on":
            continue
        for context in (kdamond / "contexts").glob("[0-9]*"):
            aggr_us = _file(context / "monitoring_attrs/intervals/aggr_us")
            for scheme in (context / "schemes").glob("[0-9]*"):
                age = _file(scheme / "access_pattern/age/min")
                if _file(scheme / "action") == "pageout" and age.isdigit() and aggr_us.isdigit():
                    return int(age) * int(aggr_us) / 1e6
    return None


def facts() -> str:
    granted = huge_page_granted()
    pageout = damon_pageout_s()
    return "; ".join(
        [
            f"host: {hypervisor()}",
            "huge pages: " + {True: "granted", False: "none granted", None: "unknown"}[granted],
            "idle memory: " + (f"paged out after {pageout:g} s untouched (DAMON)" if pageout is not None else "kept"),
        ]
    )


if __name__ == "__main__":
    loop, page = min(loop_s() for _ in range(3)), min(new_page_us() for _ in range(3))
    call = min(syscall_us() for _ in range(3))
    print(
        f"host speed: loop {loop:.2f} s of CPU (5M steps), new memory {page:.2f} us a 4 KiB page, "
        f"a system call {call:.2f} us; best of 3"
    )
    print(facts())
