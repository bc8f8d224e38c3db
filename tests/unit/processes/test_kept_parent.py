"""A preloaded parent kept for the next command (harness/processes/client.py keep_s, kept.py, server.py serve): the
bare server (serve, without the preload) serves on after the command that started it has ended, ends after its
idle time, at SIGTERM or Ctrl-C, or once its checkout is gone, and removes its directory; the process list is the
registry: a command borrows its checkout's kept parent of the same key, tells one of another key to go, and never
keeps a second; `harness stop` ends them and `harness status` lists them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.paths import ROOT
from harness.processes import client, kept, server, wire

# One process runs these (`--dist loadgroup`, make unit's and make test's): `harness stop` and retire_kept end every
# parent of a deleted checkout (kept.stoppable), so one test's stop counted the parent another worker's test had just
# orphaned by deleting its checkout ("stopped 2 kept parent(s)"), whenever two of these ran at once.
pytestmark = [pytest.mark.unit, pytest.mark.xdist_group("kept-parents")]

# The bare server, started with the command line server.command writes (what kept.py reads back).
_SERVE = "import sys; from harness.processes import server; a = server.parse(sys.argv[2:]); "
_SERVE += "server.serve(a.socket, a.keep, a.checkout or None)"


def _argv(socket: Path, key: str, checkout: Path, owner: int, keep_s: float, python: str = sys.executable):
    return [python, "-c", _SERVE, *server.command(str(socket), key, str(checkout), owner, keep_s)[2:]]


def _wait(predicate, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def servers(tmp_path):
    """servers(key, checkout, keep_s, after_its_command=False, python=...) -> pid of a bare server serving at a
    socket of its own (a short path: 107 bytes at most). after_its_command: started by a process that has ended
    since, as a kept parent is once its command is over; else this test's own child. Each is killed at the end."""
    pids, procs = [], []

    def start(key: str, checkout: Path, keep_s: float, after_its_command: bool = False, python=sys.executable):
        directory = Path(client.tempfile.mkdtemp(prefix=server.DIRECTORY_PREFIX, dir="/tmp"))
        socket = directory / "s"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        if after_its_command:
            launcher = (  # the command: starts it as its owner, then ends
                "import os, subprocess, sys\n"
                "argv = [str(os.getpid()) if a == '-1' else a for a in sys.argv[1:]]\n"
                "p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
                "assert p.stdout.readline() == b'ready\\n'\n"
                "print(p.pid)\n"
            )
            argv = _argv(socket, key, checkout, -1, keep_s, python)
            done = subprocess.run([sys.executable, "-c", launcher, *argv], env=env, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            pid = int(done.stdout)
        else:
            proc = subprocess.Popen(
                _argv(socket, key, checkout, os.getpid(), keep_s, python),
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert proc.stdout.readline() == b"ready\n"
            procs.append(proc)
            pid = proc.pid
        pids.append((pid, directory))
        return pid

    yield start
    for pid, directory in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(directory, ignore_errors=True)
    for proc in procs:
        proc.wait()


def _served(socket: str, tmp_path: Path) -> str:
    """What a child the server forks for a stand-in prints (a module of the test's own)."""
    (tmp_path / "kept_probe.py").write_text("import os\nprint('served by', os.getppid())\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", **{wire.SOCKET: socket})
    stand_in = [sys.executable, "-m", "harness.processes.stand_in", "--module", "kept_probe"]
    return subprocess.run(stand_in, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60).stdout


def _up(pid: int) -> kept.Up:
    [up] = [up for up in kept.parents_up() if up.pid == pid]
    return up


def _gone(pid: int) -> bool:
    return not kept.psutil.pid_exists(pid) or kept.psutil.Process(pid).status() == kept.psutil.STATUS_ZOMBIE


def test_a_kept_server_serves_after_its_command_ends_then_ends_when_idle_and_removes_its_directory(servers, tmp_path):
    pid = servers("k", tmp_path, keep_s=2.0, after_its_command=True)
    up = _up(pid)
    assert up.ready and not up.owned and up.keep_s == 2.0 and up.checkout == str(tmp_path) and up.key == "k"
    touched = os.stat(up.socket).st_mtime
    time.sleep(0.05)  # five ticks of the coarsest kernel clock a file's time is stamped with (HZ=100): a later stamp
    assert _served(up.socket, tmp_path).strip() == f"served by {pid}"
    assert os.stat(up.socket).st_mtime > touched  # its children's starts and ends tell borrowers it is in use
    assert _wait(lambda: _gone(pid)) and not os.path.exists(os.path.dirname(up.socket))


def test_a_server_not_kept_ends_with_its_command(servers, tmp_path):
    pid = servers("k", tmp_path, keep_s=0)
    up = _up(pid)
    assert up.owned and up.keep_s == 0
    os.kill(pid, signal.SIGTERM)
    assert _wait(lambda: _gone(pid), 10) and not os.path.exists(up.socket)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_sigterm_ctrl_c_or_a_hangup_ends_a_kept_server_at_once(servers, tmp_path, sig):
    pid = servers("k", tmp_path, keep_s=600, after_its_command=True)
    directory = os.path.dirname(_up(pid).socket)
    os.kill(pid, sig)  # SIGINT: what a terminal's Ctrl-C sends the command's group, where the parent it started is
    assert _wait(lambda: _gone(pid), 10) and not os.path.exists(directory)


def test_a_kept_server_whose_checkout_is_deleted_ends_itself(servers, tmp_path):
    checkout = tmp_path / "clone"
    checkout.mkdir()
    pid = servers("k", checkout, keep_s=600, after_its_command=True)
    assert not _gone(pid)
    shutil.rmtree(checkout)
    assert _wait(lambda: _gone(pid), 10)  # at its next idle tick (1 s)


def test_a_command_borrows_its_checkouts_kept_parent_of_its_key_and_tells_another_keys_to_go(
    servers, tmp_path, monkeypatch
):
    monkeypatch.setattr(client, "ROOT", tmp_path)
    monkeypatch.setenv(client.KEEP, "600")
    same = servers("mine", tmp_path, keep_s=600, after_its_command=True)
    other = servers("another", tmp_path, keep_s=600, after_its_command=True)
    elsewhere = servers("another", tmp_path / "..", keep_s=600, after_its_command=True)  # another checkout's
    borrowed, may_keep = client._kept_parent("mine")
    assert isinstance(borrowed, client.Borrowed) and borrowed.pid == same and borrowed.keep_s == 600
    assert not may_keep  # it borrows: nothing of its own to keep
    assert _wait(lambda: _gone(other), 10) and not _gone(same) and not _gone(elsewhere)
    # A key no parent has: one started here may be kept once the other key's is gone; none is borrowed.
    assert client._kept_parent("a third") == (None, True) and _wait(lambda: _gone(same), 10)


def test_a_command_keeps_no_second_parent_while_another_keys_command_runs(servers, tmp_path, monkeypatch):
    monkeypatch.setattr(client, "ROOT", tmp_path)
    running = servers("another", tmp_path, keep_s=600)  # its command (this test) still runs: it is not told to go
    assert client._kept_parent("mine") == (None, False)
    assert not _gone(running)


def test_a_kept_parent_near_its_end_is_not_borrowed(servers, tmp_path, monkeypatch):
    monkeypatch.setattr(client, "ROOT", tmp_path)
    pid = servers("mine", tmp_path, keep_s=600, after_its_command=True)
    idle = time.time() - 590  # ten seconds left of its 600: it could end before a stand-in connects
    os.utime(_up(pid).socket, (idle, idle))
    assert client._kept_parent("mine") == (None, True)


def test_harness_stop_ends_this_checkouts_kept_parents_and_status_lists_what_is_up(
    servers, tmp_path, monkeypatch, capsys
):
    from harness import paths
    from harness.cli import main

    monkeypatch.setattr(paths, "ROOT", tmp_path)
    idle = servers("k", tmp_path, keep_s=600, after_its_command=True)
    running = servers("k", tmp_path, keep_s=600)  # its command runs: left to it
    assert main(["status"]) == 0
    listed = capsys.readouterr().out
    assert f"pid {idle}  kept, idle " in listed and f"checkout {tmp_path}  up " in listed
    assert f"pid {running}  serving command pid {os.getpid()}, kept 10 min idle after it" in listed
    assert main(["stop"]) == 0
    assert capsys.readouterr().out == f"stopped 1 kept parent(s): pid {idle}\n"
    assert _gone(idle) and not _gone(running)


def test_harness_releases_ends_a_release_environments_kept_parents_only(servers, tmp_path, monkeypatch):
    monkeypatch.setattr(client, "ROOT", tmp_path)
    release_python = tmp_path / "envs" / "verl-0.8.0" / "bin" / "python"
    release_python.parent.mkdir(parents=True)
    release_python.symlink_to(sys.executable)
    release = servers("r", tmp_path, keep_s=600, after_its_command=True, python=str(release_python))
    main = servers("m", tmp_path, keep_s=600, after_its_command=True)
    assert client.retire_kept(python=str(release_python)) == [release]
    assert _gone(release) and not _gone(main)
    assert client.retire_kept() == [main] and _gone(main)


def test_a_command_ends_saying_which_parent_stays_up_and_how_to_end_it(servers, tmp_path, monkeypatch):
    pid = servers("k", tmp_path, keep_s=600, after_its_command=True)
    monkeypatch.setattr(client, "_parent", client.Borrowed("k", _up(pid).socket, pid, keep_s=600))
    line = client._stays_up()
    assert line.startswith(f"harness: an earlier command's preloaded parent (pid {pid}, ") and " MB)" in line
    assert line.endswith("stays up until 10 min idle, for the next command; make stop ends it, make status lists it")
    monkeypatch.setattr(client, "_parent", client.Borrowed("k", _up(pid).socket, pid, keep_s=0))  # lent: not kept
    assert client._stays_up() is None


def test_the_code_stamp_changes_with_a_module_of_the_harness_or_a_model_config(tmp_path):
    for name in ("harness/rank/worker.py", "harness/inputs/scenario.py", "models/tiny.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    before = client._code_stamp(tmp_path)
    assert client._code_stamp(tmp_path) == before
    for name in ("harness/rank/worker.py", "models/tiny.json"):
        stat = (tmp_path / name).stat()
        os.utime(tmp_path / name, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        assert client._code_stamp(tmp_path) != before
        before = client._code_stamp(tmp_path)
    (tmp_path / "harness/rank" / "added.py").write_text("")
    assert client._code_stamp(tmp_path) != before


def test_a_keep_that_is_not_a_number_of_seconds_is_one_line_and_exit_2(monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setenv(client.KEEP, "ten")
    assert main(["list"]) == 2
    assert capsys.readouterr().err == f"error: {client.KEEP}='ten': not a number of seconds (0: no parent is kept)\n"


def test_a_parents_socket_fits_a_unix_socket_path_under_a_long_tmpdir(monkeypatch, tmp_path):
    """tempfile's directory where it is short, /tmp where it is not: a socket's path is at most 107 bytes."""
    monkeypatch.setattr(client.tempfile, "tempdir", "/tmp/short")
    assert client._socket_base() == "/tmp/short"
    long = tmp_path / ("t" * 60)  # tmp_path itself is pytest's /tmp/pytest-of-<user>/pytest-<n>/<test name>
    long.mkdir()
    monkeypatch.setattr(client.tempfile, "tempdir", str(long))
    assert client._socket_base() == "/tmp"
    socket = os.path.join(client.tempfile.mkdtemp(prefix="harness-preload-", dir="/tmp"), "s")
    os.rmdir(os.path.dirname(socket))
    assert len(os.fsencode("x" * client._SOCKET_BASE_MAX + socket.removeprefix("/tmp"))) <= 107
