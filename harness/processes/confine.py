"""Entering a cell's sandbox (sandbox.py's Policy) in this process, with the kernel's own mechanisms (kernel.py).

    enter(policy)   in a single-threaded process: returns in the cell's first process (pid 1 of its PID namespace),
                    confined; the calling process never returns from it: it waits for that child and exits as it did.

In order, and why each:
1. no_new_privs: nothing the cell runs gains privileges by exec (a setuid binary), and Landlock requires it.
2. New user, mount, network, IPC, UTS and PID namespaces (unshare), the caller's uid and gid mapped to themselves:
   the rights to mount and to confine without being root, a network of loopback only, no System V IPC or abstract
   unix socket of the host, a host name of its own.
3. Fork: the child is pid 1 of the new PID namespace. It sees no process outside (no pid to signal, no
   /proc/<pid>/environ to read), and when it ends the kernel kills every process of the namespace: nothing of the
   cell outlives it, a double-forked daemon included. It dies with its parent (PR_SET_PDEATHSIG).
4. A new root (pivot_root) made of the policy's paths only, each bound at its own path, the run directory among them,
   a fresh /proc of the namespace, and fresh tmpfs at /tmp and /dev/shm: nothing else of the host's filesystem is
   there to open, a unix socket of the host (the preloaded parent's, a docker daemon's) included.
5. Limits (setrlimit): address space, CPU seconds, processes, file size, open files; no core dumps.
6. Landlock: every filesystem right of the running ABI handled; reading allowed everywhere in the new root, writing
   only beneath the policy's writable paths (the run directory, /tmp, /dev/shm) and to devices; no signal and no
   abstract unix socket outside the cell (ABI >= 6). Landlock also forbids the cell to mount, unmount or pivot_root,
   so the new root cannot be undone from inside.
7. The environment replaced by the policy's (an allowlist the driver made), the working directory set.
"""

from __future__ import annotations

import os
import resource
import signal
import sys

from harness.processes import kernel, sandbox
from harness.processes.sandbox import Policy

_NAMESPACES = (kernel.CLONE_NEWUSER | kernel.CLONE_NEWNS | kernel.CLONE_NEWNET | kernel.CLONE_NEWIPC
               | kernel.CLONE_NEWUTS | kernel.CLONE_NEWPID)  # fmt: skip
_READ = kernel.FS_READ_FILE | kernel.FS_READ_DIR | kernel.FS_EXECUTE
_DEVICES = kernel.FS_READ_FILE | kernel.FS_WRITE_FILE | kernel.FS_READ_DIR | kernel.FS_IOCTL_DEV
_ALL = -1  # masked by the ABI's rights in kernel.landlock_restrict
_STAGE = ".sandbox-root"  # the new root, built in the run directory (a mount point of its own)
NOBODY = sandbox.NOBODY


def enter(policy: Policy):
    """This process confined to policy, as its module docstring says; returns in the sandbox's pid 1. The calling
    process never returns: it waits for its child (which made the namespaces), and exits as it did. OSError in the
    child where a step fails."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    child = os.fork()
    if child:
        os.close(ready_w)
        os.close(go_r)
        if os.read(ready_r, 1) == b"1" and os.getuid() == 0:
            _map_ids(child, 0, NOBODY, NOBODY)  # root's privilege writes a map to another uid (user_namespaces(7))
        try:
            os.write(go_w, b"1")
        except BrokenPipeError:
            pass  # the child failed before it read it: it says why, and this process exits as it did
        os.close(ready_r)
        os.close(go_w)
        _wait_and_exit_as(child)
    os.close(ready_r)
    os.close(go_w)
    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    uid, gid = os.getuid(), os.getgid()
    kernel.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1)
    kernel.unshare(_NAMESPACES)
    os.write(ready_w, b"1")
    os.read(go_r, 1)
    os.close(ready_w)
    os.close(go_r)
    # Resolved and opened while this process may still traverse what it will bind (a root-owned 0700 home above
    # a pyenv interpreter): the binds are made from the open descriptors.
    sources = [(path, *_open_source(path)) for path in [*policy.read_only, *policy.writable]]
    if uid == 0:
        os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)  # root in the namespace, nobody outside (the map its parent wrote)
        kernel.prctl(kernel.PR_SET_DUMPABLE, 1)  # a change of uid cleared it, and the death signal:
        kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    else:
        _map_ids("self", uid, uid, gid)
    first = os.fork()
    if first:
        _wait_and_exit_as(first)
    _inside(policy, sources)


def _inside(policy: Policy, sources: list):
    """The sandbox's pid 1 (its parent's child after the PID namespace): root, limits, Landlock, environment."""
    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)  # nothing mounted here reaches the host
    _new_root(policy, sources)
    kernel.sethostname(policy.hostname)
    kernel.loopback_up()
    _limit(policy)
    kernel.landlock_restrict(kernel.landlock_abi(), _rules(policy), kernel.SCOPE_SIGNAL
                             | kernel.SCOPE_ABSTRACT_UNIX_SOCKET)  # fmt: skip
    os.environ.clear()
    os.environ.update(policy.env)
    os.chdir(policy.cwd)


def _map_ids(pid, inside: int, uid: int, gid: int):
    """pid's user namespace maps `inside` to uid and gid outside. The process itself ("self") may map only its own
    ids, after denying setgroups; a root parent may map its child's to any."""
    if pid == "self":
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(f"{inside} {uid} 1")
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(f"{inside} {gid} 1")


def _wait_and_exit_as(child: int):
    """The calling process: waits for the sandbox's pid 1, passing on the signals that end a process, then ends as
    it did (the same exit code, or killed by the same signal), so that whoever started it sees the cell's end."""

    def relay(signum, _frame):
        try:
            os.kill(child, signal.SIGKILL if signum == signal.SIGKILL else signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, relay)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
    sys.stdout.flush()
    sys.stderr.flush()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _new_root(policy: Policy, sources: list):
    """The new root: a tmpfs in the run directory holding the policy's paths, each bound at its own path (symbolic
    links on the way recreated as they are), then pivoted into; the host's root detached."""
    # Reached through the run directory's descriptor: nobody (NOBODY) may not traverse what lies above it (a
    # test's 0700 /tmp/pytest-of-root).
    run_dir_fd = next(source[3] for source in sources if source[0] == policy.run_dir)
    stage = f"/proc/self/fd/{run_dir_fd}/{_STAGE}"
    os.makedirs(stage, exist_ok=True)
    kernel.mount("tmpfs", stage, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "mode=0755")
    read_only = [source for source in sources if source[0] in policy.read_only]
    # A path beneath a tmpfs (a test's run directory in /tmp) is bound after it, on it; the others before (the
    # tmpfs at /dev/shm goes over the host's, bound with /dev).
    # (As named or as it resolves: a checkout in /tmp whose venv is a link elsewhere has the link made there.)
    beneath = [s for s in read_only if any(_within(s[0], t) or _within(s[2], t) for t in policy.tmpfs)]
    for source in read_only:
        if source not in beneath:
            _bind(stage, *source[1:], kernel.MS_REC)
    os.makedirs(stage + "/proc", exist_ok=True)
    kernel.mount("proc", stage + "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV)
    for path in policy.tmpfs:
        os.makedirs(stage + path, exist_ok=True)
        kernel.mount("tmpfs", stage + path, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "mode=1777")
    for source in beneath:
        _bind(stage, *source[1:], kernel.MS_REC)
    for source in sources:  # the writable: without what is mounted beneath (the stage itself, in the run directory)
        if source[0] in policy.writable:
            _bind(stage, *source[1:], 0)
    os.chdir(stage)
    for source in sources:
        if source[3] is not None:
            os.close(source[3])
    kernel.pivot_root(".", ".")  # the old root is stacked on the new one, then detached: only the new one is left
    kernel.umount(".", kernel.MNT_DETACH)
    os.chdir("/")


def _within(real: str, directory: str) -> bool:
    return real == directory or real.startswith(directory.rstrip("/") + "/")


def _open_source(path: str) -> tuple[list, str, int | None]:
    """(the symbolic links on the way to path, as (where, what it reads), the real path it resolves to, an O_PATH
    descriptor of it or None where there is nothing)."""
    links, real = _links_on_the_way(path)
    try:
        return links, real, os.open(real, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return links, real, None


def _bind(stage: str, links: list, real: str, fd: int | None, recursive: int):
    """The links made in stage, then the real directory (or file) bound there from its descriptor (recursive:
    MS_REC, with what is mounted beneath it)."""
    for where, text in links:
        if not os.path.lexists(stage + where):
            os.makedirs(os.path.dirname(stage + where), exist_ok=True)
            os.symlink(text, stage + where)
    if fd is None:
        return
    inside = stage + real
    if not os.access(f"/proc/self/fd/{fd}", os.R_OK):
        raise PermissionError(f"{real}: the cell may not read it (as nobody, where the driver is root): chmod o+rX")
    # Made only where it is not there yet: where a directory bound before holds it, the host's own file is there,
    # and making anything inside that directory would make it on the host.
    if os.path.isdir(f"/proc/self/fd/{fd}") and not os.path.isdir(inside):
        os.makedirs(inside)
    elif not os.path.lexists(inside):
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        open(inside, "a").close()
    kernel.mount(f"/proc/self/fd/{fd}", inside, None, kernel.MS_BIND | recursive)


def _links_on_the_way(path: str) -> tuple[list, str]:
    """Walks path component by component: ([(each symbolic link met, what it reads)], the real path)."""
    resolved, links = "/", []
    parts = [p for p in os.path.abspath(path).split("/") if p]
    while parts:
        current = os.path.join(resolved, parts.pop(0))
        if os.path.islink(current):
            if len(links) > 40:
                raise OSError(f"{path}: too many symbolic links")
            link = os.readlink(current)
            links.append((current, link))
            parts = [p for p in link.split("/") if p] + parts
            if link.startswith("/"):
                resolved = "/"
            continue
        resolved = os.path.normpath(current)
    return links, resolved


def _limit(policy: Policy):
    for name, (soft, hard) in policy.limits.items():
        which = getattr(resource, name)
        _, current_hard = resource.getrlimit(which)
        # Never above the hard limit this process already has (raising it needs a privilege the cell lacks).
        if current_hard != resource.RLIM_INFINITY:
            hard = current_hard if hard == resource.RLIM_INFINITY else min(hard, current_hard)
            soft = min(soft if soft != resource.RLIM_INFINITY else hard, hard)
        resource.setrlimit(which, (soft, hard))


def _rules(policy: Policy) -> dict[str, int]:
    rules = {"/": _READ, "/dev": _DEVICES}
    for path in [*policy.writable, *policy.tmpfs]:
        rules[path] = _ALL
    return rules
