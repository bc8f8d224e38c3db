"""Processes as the driver and the tests see them, through psutil, one way: which exist, which have ended, which
descend from which, and killing a run's whole tree.

A sandboxed cell's pids as its own PID namespace names them: namespace_pids."""

from __future__ import annotations

import os
import signal
import time

import psutil

_ENDED = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def state(pid: int) -> str | None:
    """The process's status (psutil's names: "running", "sleeping", "zombie", ...), None when there is none."""
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        return "?"


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie (a killed rank is reparented; its reaper may be slow or absent)."""
    return state(pid) in (None, *_ENDED)


def children(pid: int, recursive: bool = False) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=recursive)]
    except psutil.Error:
        return []


def live_descendants(pid: int) -> set[int]:
    """Every process below pid that has not ended (torchrun and its ranks run in sessions of their own but are still
    its descendants)."""
    return {child for child in children(pid, recursive=True) if not gone(child)}


def kill_all(pids: list[int]):
    """SIGKILL each pid and its process group (torchrun starts each rank in a session of its own)."""
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def wait_gone(pids: list[int], wait_s: float = 10.0):
    """Return once every pid has ended, or after wait_s: SIGKILL is delivered at once but a rank takes a moment to
    exit (and to free its memory, a GPU's too), and the next run must never overlap a dying one."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(gone(pid) for pid in pids):
        time.sleep(0.05)


def namespace_pids(pid: int) -> dict[int, int]:
    """{pid as its own PID namespace names it: pid here} for every process below pid (Linux's NSpid: the last is the
    innermost namespace's)."""
    found = {}
    for child in children(pid, recursive=True):
        try:
            with open(f"/proc/{child}/status") as status:
                line = next((row for row in status if row.startswith("NSpid:")), "")
        except OSError:
            continue
        numbers = line.split()[1:]
        if numbers:
            found[int(numbers[-1])] = child
    return found
