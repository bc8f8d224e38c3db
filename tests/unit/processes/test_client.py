"""The driver's side of the preloaded parent (harness/processes/client.py), without starting a real one: its key
is an allowlist, fork or fresh is decided in one place, a parent is lent only for its key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from harness.paths import ROOT
from harness.processes import client, server, tree

pytestmark = pytest.mark.unit

BASE = {"OMP_NUM_THREADS": "1", "PATH": "/bin", "PYTHONPATH": f"/arm-a{os.pathsep}{ROOT}"}


def test_the_parents_key_reads_only_its_allowlist():
    same = [
        dict(BASE, PYTHONPATH=f"/arm-b{os.pathsep}{ROOT}", HARNESS_PRELOAD_SOCKET="/s"),  # another arm
        dict(BASE, PYTEST_CURRENT_TEST="tests/x.py::a (call)", HARNESS_RESULTS_DIR="/r"),  # another test
        dict(BASE, _="/usr/bin/make", MAKEFLAGS="s", MAKEOVERRIDES="PATCH=f.diff", SHLVL="2"),  # make's
        dict(BASE, TMUX_PANE="%3", SSH_TTY="/dev/pts/4", A_TERMINAL_NOBODY_LISTED="x"),  # anything not listed
        dict(BASE, CUDA_VISIBLE_DEVICES="1", CUDA_DEVICE_ORDER="PCI_BUS_ID"),  # each CUDA cell's own GPUs
        dict(BASE, TORCHINDUCTOR_CACHE_DIR="/tmp/torchinductor_u"),  # what inductor's import writes, anywhere
        dict(BASE, HARNESS_PRELOAD_LENT="k 1 /s", HARNESS_PRELOAD_KEEP_S="600", HARNESS_COMPILE_CACHE="/c"),
    ]
    assert {client.key(env) for env in same} == {client.key(BASE)}
    # What the parent's imports read, or a forked child inherits from it: another value is another parent.
    for changed in (
        dict(BASE, OMP_NUM_THREADS="2"),
        dict(BASE, TORCH_LOGS="dynamo"),
        dict(BASE, PYTHONHASHSEED="1"),
        dict(BASE, HF_HUB_OFFLINE="1"),
        dict(BASE, NCCL_DEBUG="INFO"),
        dict(BASE, LD_PRELOAD="/lib/x.so"),
        dict(BASE, PYTHONPATH=f"/arm-a{os.pathsep}{ROOT}{os.pathsep}/users/own"),  # the user's part of the path
    ):
        assert client.key(changed) != client.key(BASE), changed


def test_make_gives_every_target_the_same_key_whatever_parameters_it_is_given(tmp_path):
    """The README's first two commands, `make repro` then `make verify PATCH=f.diff`, run their CLI with the
    environment make gives a recipe: neither make's parameters nor its bookkeeping are in the key. The real
    Makefile, with one target added that prints the environment its recipes get."""
    printer = tmp_path / "printenv.mk"
    printer.write_text("printenv:\n\t@$(PYTHON) -c 'import json, os; print(json.dumps(dict(os.environ)))'\n")

    def recipe_env(*parameters):
        make = ["make", "--no-print-directory", "-f", "Makefile", "-f", str(printer), "printenv", *parameters]
        return json.loads(subprocess.run(make, cwd=ROOT, capture_output=True, text=True, check=True).stdout)

    plain = recipe_env()
    given = recipe_env("PATCH=patches/fsdp2-lmhead-forward.diff", "ARGS=--alone --scenario x", "JOBS=1", "DIR=/d")
    assert client.key(given) == client.key(plain)
    # A variable the user gives that the parent's imports read reaches the processes, and is another parent.
    assert client.key(recipe_env("OMP_NUM_THREADS=2")) != client.key(plain)


def _stub_server(monkeypatch, first_line: str = "ready", *, delay_s: float = 0.0) -> list:
    """client.Popen starts, in place of the server, a process that makes the socket file (its command line's, see
    server.command), prints `first_line` after delay_s, and waits for its stdin to close, as the server does
    (nothing connects to it here). The list: every command it was asked to start."""
    real_popen, started = client.subprocess.Popen, []
    script = (
        "import pathlib, sys, time\n"
        f"time.sleep({delay_s})\n"
        f"if {first_line!r} == 'ready': pathlib.Path(sys.argv[1]).touch()\n"
        f"print({first_line!r}, flush=True)\n"
        "sys.stdin.read()\n"
    )

    def popen(cmd, **kw):
        started.append(cmd)
        return real_popen([sys.executable, "-c", script, server.parse(cmd[3:]).socket], **kw)

    monkeypatch.setattr(client.subprocess, "Popen", popen)
    return started


@pytest.fixture
def no_parent(monkeypatch):
    """This test's parents only: none held, lent or kept; each closed at the end."""
    monkeypatch.setenv("HARNESS_PRELOAD", "1")
    monkeypatch.setenv(client.KEEP, "0")
    for name in ("_parent", "_lent", "_lending"):
        monkeypatch.setattr(client, name, None)
    monkeypatch.delenv(client.LENT, raising=False)
    yield
    for parent in (client._parent, client._lending):
        if parent is not None and parent.refused is None:
            parent.close()


def test_a_variable_outside_the_allowlist_does_not_start_a_second_parent(monkeypatch, no_parent):
    started = _stub_server(monkeypatch)
    first = client.parent_for(BASE)
    for env in (dict(BASE, A_VARIABLE_NOBODY_LISTED="1"), dict(BASE, PYTEST_CURRENT_TEST="t"), dict(BASE, COLUMNS="9")):
        assert client.parent_for(env) is first
    assert len(started) == 1 and first.alive()
    assert os.getpgid(first.pid) == os.getpgrp()  # in the command's group: a terminal's Ctrl-C reaches it too
    second = client.parent_for(dict(BASE, TORCH_LOGS="dynamo"))  # one that is in it: another parent, the first closed
    assert second is not first and len(started) == 2 and not first.alive() and first.proc.poll() is not None


def test_turned_off_means_no_parent(monkeypatch):
    monkeypatch.setenv("HARNESS_PRELOAD", "0")
    monkeypatch.setattr(client, "_parent", None)
    assert client.parent_for({"A": "1"}) is None and client._parent is None


def test_a_child_borrows_the_parent_lent_to_it_only_for_the_same_key_and_python(tmp_path, monkeypatch):
    socket = tmp_path / "s"
    socket.touch()  # a parent's socket is a file there; nothing connects to it here
    wanted = client.key(BASE)
    token = f"{wanted} {os.getpid()} {socket}"
    # A test's CLI: the owner's environment, another results dir, another arm.
    child = dict(BASE, PYTHONPATH=f"/arm-b{os.pathsep}{ROOT}", HARNESS_RESULTS_DIR=str(tmp_path / "r"))
    borrowed = client._lent_parent(dict(child, **{client.LENT: token}), client.key(child))
    assert borrowed is not None and borrowed.socket == str(socket) and borrowed.alive()
    # What a child imports with is part of the key: another value, no borrowing.
    assert (
        client._lent_parent(dict(child, **{client.LENT: token}), client.key(dict(child, OMP_NUM_THREADS="2"))) is None
    )
    # Nor for another environment's python (a release's), nor once the owner's socket is gone.
    monkeypatch.setattr(client.sys, "executable", "/releases/verl-0.8.0/bin/python")
    assert client.key(child) != wanted
    monkeypatch.undo()
    socket.unlink()
    assert not borrowed.alive()
    borrowed.close()  # not its own to close: nothing happens


def test_fork_or_fresh_is_decided_once_and_the_commands_follow_it(tmp_path, monkeypatch):
    """client.starter: the one place launch.py and the tests ask how a process starts."""
    monkeypatch.setenv("HARNESS_PRELOAD", "0")
    monkeypatch.setattr(client, "_parent", None)
    env = {"A": "1"}
    fresh = client.starter(env)
    assert (fresh.forked, fresh.rank_start, fresh.rank_entry) == (False, "fresh interpreter", client.WORKER)
    assert fresh.module("probe", "x") == [sys.executable, "-m", "probe", "x"]
    assert fresh.torchrun("/run/torchrun.pid", "f.json") == [sys.executable, "-m", client.TORCHRUN, "f.json"]
    assert client.wire.SOCKET not in env

    socket = tmp_path / "s"
    socket.touch()
    monkeypatch.setenv("HARNESS_PRELOAD", "1")
    monkeypatch.setattr(client, "_parent", client.Borrowed(client.key(env), str(socket), os.getpid()))
    forked = client.starter(env)
    assert (forked.forked, forked.rank_start, forked.rank_entry) == (True, "fork", client.STAND_IN)
    assert env[client.wire.SOCKET] == str(socket)  # for the stand-ins, which torchrun passes it on to
    assert forked.module("probe", "x") == [sys.executable, "-m", client.STAND_IN, "--module", "probe", "x"]
    assert forked.torchrun("/run/torchrun.pid", "f.json")[3:] == ["--torchrun", "/run/torchrun.pid", "f.json"]

    refused = client.Parent.__new__(client.Parent)
    refused.key, refused.refused = client.key(env), "2 threads after the preload imported torch"
    monkeypatch.setattr(client, "_parent", refused)
    why = client.starter(env)
    assert not why.forked and why.rank_start == "fresh interpreter (2 threads after the preload imported torch)"


def test_the_parent_answers_the_abc_checks_of_each_model_class_before_any_child_asks(tmp_path, monkeypatch):
    # verl's FSDP2 wrap asks isinstance(module, abc.ABC) of each module it shards: the first answer for a class walks
    # every subclass of ABC.
    import abc
    import collections.abc
    import json

    import torch
    import transformers

    from harness import paths
    from harness.processes.server import _answer_abc_checks

    (tmp_path / "tiny.json").write_text(json.dumps({"architectures": ["PreTrainedModel", "NoSuchModelForCausalLM"]}))
    monkeypatch.setattr(paths, "MODELS_DIR", tmp_path)
    abc._reset_caches(abc.ABC)
    abc._reset_caches(collections.abc.Iterable)

    _answer_abc_checks()  # a class this transformers lacks is passed over

    def cached(cls, which):  # abc._get_dump: (registry, cache, negative cache, token)
        return {ref() for ref in abc._get_dump(cls)[which]}

    assert {transformers.PreTrainedModel, torch.nn.Linear, torch.nn.Embedding} <= cached(abc.ABC, 2)  # "no", kept
    assert int in cached(collections.abc.Iterable, 2) and tuple in cached(collections.abc.Iterable, 1)


def test_a_worker_borrows_the_parent_its_controller_lent_once_it_is_ready(monkeypatch, no_parent):
    """client.lend (the pytest controller, before its workers start) does not wait for the preload; a worker
    (expect_lent) waits for it at its first launch and borrows it where its launch environment has the lender's
    key, xdist's own variables aside."""
    _stub_server(monkeypatch, delay_s=0.5)
    token = client.lend(BASE)
    wanted, pid, socket = token.split(" ")
    assert wanted == client.key(BASE) and int(pid) == client._lending.pid and not os.path.exists(socket)
    client.expect_lent(token)
    worker = dict(BASE, PYTEST_XDIST_WORKER="gw1", PYTEST_XDIST_WORKER_COUNT="2", COLUMNS="80", LINES="24")
    borrowed = client.parent_for(worker)
    assert isinstance(borrowed, client.Borrowed) and borrowed.socket == socket and borrowed.pid == int(pid)
    # Another key gets no loan, and the loan stays for the next launch.
    assert (
        client._lent_parent(dict(worker, TORCH_LOGS="dynamo"), client.key(dict(worker, TORCH_LOGS="+dynamo"))) is None
    )
    assert client._lent == token


def _running_answers(monkeypatch) -> list[bool]:
    """Every answer of client._running (is the parent still up?) while a borrower waits for its socket: the wait
    ended because the parent ended where the last is False, at its deadline (the start timeout) where it is True."""
    answers, real = [], client._running

    def running(pid: int) -> bool:
        answers.append(real(pid))
        return answers[-1]

    monkeypatch.setattr(client, "_running", running)
    return answers


def test_a_lent_parent_that_refused_leaves_each_worker_to_its_own_at_once(monkeypatch, no_parent):
    _stub_server(monkeypatch, "refused: 2 threads after the preload imported torch")
    client.expect_lent(client.lend(BASE))
    answers = _running_answers(monkeypatch)
    assert client._lent_parent(BASE, client.key(BASE)) is None and client._lent is None
    assert answers and answers[-1] is False  # the lender's parent has ended: no waiting out the start timeout


def test_a_lent_parent_that_ended_unreaped_is_not_waited_for(monkeypatch, no_parent, tmp_path):
    """The lender's parent ended (told to go by another test's cleanup, once) but the lender has not reaped it: a
    zombie, which os.kill(pid, 0) still finds. The borrower took it for a parent still preloading and waited out
    the start timeout, 180 s at each worker's next launch."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while tree.state(ended.pid) != "zombie" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tree.state(ended.pid) == "zombie"
    client.expect_lent(f"{client.key(BASE)} {ended.pid} {tmp_path / 's'}")
    answers = _running_answers(monkeypatch)
    assert client._lent_parent(BASE, client.key(BASE)) is None and client._lent is None
    assert answers == [False]  # the zombie counts as ended at the first look: not waited for at all
    ended.wait()


def test_the_parent_starts_with_no_secret_in_its_environment():
    """What the parent starts with stays in the memory of every process it forks, a sandboxed cell's too
    (client.server_environment): the key's variables and the few a process needs, never a secret by name."""
    env = dict(BASE, GITHUB_TOKEN="t", AWS_SECRET_ACCESS_KEY="s", HF_TOKEN="h", RUNNER_TEMP="/r", SSH_AUTH_SOCK="/a",
               HOME="/root", OMP_NUM_THREADS="1", TORCH_LOGS="dynamo", HARNESS_RESULTS_DIR="/r")  # fmt: skip
    env[client.LENT] = "k 1 /s"
    started = client.server_environment(env)
    assert not {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "RUNNER_TEMP", "SSH_AUTH_SOCK", client.LENT} & set(
        started
    )
    # The key's other variables, which change what its imports do (a token changes none).
    assert client.key_variables(started) == {k: v for k, v in client.key_variables(env).items() if k != "HF_TOKEN"}
    assert started["HOME"] == "/root" and started["HARNESS_RESULTS_DIR"] == "/r"
