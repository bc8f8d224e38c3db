"""A command run in a cell's sandbox, as a fresh interpreter (no preloaded parent): enter the policy, then exec.

    python -m harness.processes.sandbox_exec POLICY.json -- COMMAND...
        the cell's torchrun, started by the driver (launch.py) where no preloaded parent serves it
    python -m harness.processes.sandbox_exec --probe RUN_DIR
        sandbox.available()'s check: enter the least policy, print "ok" (or one line saying why not)

Standard library only, so that its own start costs little (~30 ms): the command it execs imports what it needs.
"""

from __future__ import annotations

import errno
import os
import sys

from harness.processes import kernel, sandbox

# The exit code of a command whose sandbox could not be made (as env(1) and container runtimes use 125-127).
EXIT_NO_SANDBOX = 125

_HINTS = {
    errno.EPERM: "user namespaces are not allowed here (Ubuntu 24.04: sysctl kernel.apparmor_restrict_unprivileged_"
    "userns=0; elsewhere user.max_user_namespaces > 0)",
    errno.ENOSPC: "no user namespace left (sysctl user.max_user_namespaces)",
    errno.EINVAL: "the process is not single-threaded, or the kernel lacks a namespace kind",
}


def why_not(exc: OSError) -> str:
    """One line for a sandbox that could not be made."""
    hint = _HINTS.get(exc.errno) if "unshare" in str(exc) else None
    return f"no sandbox: {exc}" + (f" ({hint})" if hint else "")


def enter_or_exit(policy: sandbox.Policy):
    """confine.enter, or this process (or the sandbox's first process) ends with one line and EXIT_NO_SANDBOX."""
    from harness.processes import confine

    if kernel.landlock_abi() < 1:
        print("no sandbox: this kernel has no Landlock (Linux >= 5.13 with lsm=landlock)", file=sys.stderr)
        os._exit(EXIT_NO_SANDBOX)
    try:
        confine.enter(policy)
    except OSError as exc:
        print(why_not(exc), file=sys.stderr, flush=True)
        os._exit(EXIT_NO_SANDBOX)


def confined() -> bool:
    """The probe's check, inside: pid 1 of its own namespace, the checkout's records not there, and a write outside
    the run directory denied (Landlock)."""
    try:
        with open("/sandbox-probe", "w"):
            return False
    except PermissionError:
        pass
    return os.getpid() == 1 and not os.path.exists(sandbox.ROOT / "results")


def main(argv: list[str]):
    if argv[:1] == [sandbox.PROBE]:
        enter_or_exit(sandbox.probe_policy(argv[1]))
        print("ok" if confined() else "no sandbox: the probe was not confined", flush=True)
        return
    policy_file, dash, *command = argv
    if dash != "--" or not command:
        sys.exit("usage: python -m harness.processes.sandbox_exec POLICY.json -- COMMAND...")
    policy = sandbox.Policy.read(policy_file)
    enter_or_exit(policy)
    os.execvpe(command[0], command, policy.env)


if __name__ == "__main__":
    main(sys.argv[1:])
