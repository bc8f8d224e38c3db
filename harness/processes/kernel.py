"""The kernel's own sandboxing calls, through libc (ctypes): Python 3.11 has no os.unshare, and nothing here may
import more than the standard library (the driver imports processes/ without torch). Linux only; each call raises
OSError with the kernel's errno, and the caller (confine.py) decides what a failure means.

The same mechanisms bubblewrap and nsjail use: namespaces (unshare), mounts and pivot_root, prctl, Landlock
(landlock(7): its three system calls have the same numbers on every architecture), rlimits.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import socket
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38

_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

# Landlock's filesystem rights (linux/landlock.h), and the ABI version that brought each.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
# Scopes (ABI 6): no abstract unix socket, no signal, to a process outside the sandbox's Landlock domain.
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def unshare(flags: int):
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None):
    def enc(s):
        return None if s is None else os.fsencode(s)

    result = _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(result, f"mount {target}")


def umount(target: str, flags: int = 0):
    _check(_libc.umount2(os.fsencode(target), ctypes.c_int(flags)), f"umount {target}")


def pivot_root(new_root: str, put_old: str):
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: no system call number known for {platform.machine()}")
    _check(_libc.syscall(ctypes.c_long(number), os.fsencode(new_root), os.fsencode(put_old)), "pivot_root")


def prctl(option: int, value: int):
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), 0, 0, 0), f"prctl {option}")


def sethostname(name: str):
    data = name.encode()
    _check(_libc.sethostname(data, ctypes.c_size_t(len(data))), "sethostname")


def loopback_up():
    """The network namespace's `lo` up (a new one has it down): torchrun's rendezvous and gloo talk over it."""
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def landlock_abi() -> int:
    """The running kernel's Landlock ABI version; 0 where it has none (or it is disabled at boot)."""
    version = _libc.syscall(ctypes.c_long(_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))  # fmt: skip
    return max(version, 0)


def fs_rights(abi: int) -> int:
    """Every filesystem right the ABI knows: all of them handled, so that what a rule does not grant is denied."""
    return _FS_BY_ABI[max(v for v in _FS_BY_ABI if v <= abi)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_restrict(abi: int, rules: dict[str, int], scoped: int):
    """This process (and every process it starts) confined to `rules` ({path: rights beneath it}), every right of
    the ABI handled; `scoped`: the ABI-6 scopes, where the kernel has them. Needs no_new_privs set first."""
    handled = fs_rights(abi)
    attr = _RulesetAttr(handled, 0, scoped if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(_libc.syscall(ctypes.c_long(_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                                   ctypes.c_size_t(size), ctypes.c_uint32(0)), "landlock_create_ruleset")  # fmt: skip
    try:
        for path, rights in rules.items():
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                # A rule on a file (not a directory) may hold only the rights that apply to a file.
                if not os.path.isdir(path):
                    rights &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
                beneath = _PathBeneath(rights & handled, fd)
                _check(_libc.syscall(ctypes.c_long(_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset),
                                     ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(beneath),
                                     ctypes.c_uint32(0)), f"landlock_add_rule {path}")  # fmt: skip
            finally:
                os.close(fd)
        _check(_libc.syscall(ctypes.c_long(_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")  # fmt: skip
    finally:
        os.close(ruleset)
