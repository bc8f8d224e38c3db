"""The driver's side of the preloaded parent (harness/processes/client.py), without starting one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from harness.processes import client
from harness.processes import client as preloaded

pytestmark = pytest.mark.unit


def test_the_parents_key_is_the_environment_less_what_changes_per_launch_or_test():
    base = {"OMP_NUM_THREADS": "1", "PATH": "/bin"}
    same = [
        dict(base, PYTHONPATH="/arm-a"),
        dict(base, PYTHONPATH="/arm-b", HARNESS_PRELOAD_SOCKET="/s"),
        dict(base, PYTEST_CURRENT_TEST="tests/x.py::a (call)"),
        dict(base, PYTEST_CURRENT_TEST="b (setup)"),
        dict(base, _="/usr/bin/make", MAKEFLAGS="s", MFLAGS="-s", MAKELEVEL="1", SHLVL="2"),  # make repro's
        # the same command typed in another tmux pane, over another ssh session
        dict(
            base,
            TMUX_PANE="%3",
            SSH_TTY="/dev/pts/4",
            SSH_CONNECTION="10.0.0.2 50522 10.0.0.1 22",
            GPG_TTY="/dev/pts/4",
        ),
    ]
    assert {preloaded._key(env) for env in same} == {preloaded._key(base)}
    # Anything read at import time may matter: another value is another parent.
    assert preloaded._key(dict(base, OMP_NUM_THREADS="2")) != preloaded._key(base)
    assert preloaded._key(dict(base, TORCH_LOGS="dynamo")) != preloaded._key(base)


def test_make_gives_every_target_the_same_key_whatever_parameters_it_is_given(tmp_path):
    """The README's first two commands, `make repro` then `make verify PATCH=f.diff`, run their CLI with the
    environment make gives a recipe: make's own parameters on its command line must not make the second command's
    parent key differ from the first's, or the parent the first kept up is never the second's. The real Makefile,
    with one target added that prints the environment its recipes get."""
    from harness.paths import ROOT

    printer = tmp_path / "printenv.mk"
    printer.write_text("printenv:\n\t@$(PYTHON) -c 'import json, os; print(json.dumps(dict(os.environ)))'\n")

    def recipe_env(*parameters):
        make = ["make", "--no-print-directory", "-f", "Makefile", "-f", str(printer), "printenv", *parameters]
        return json.loads(subprocess.run(make, cwd=ROOT, capture_output=True, text=True, check=True).stdout)

    plain = recipe_env()
    given = recipe_env("PATCH=patches/fsdp2-lmhead-forward.diff", "ARGS=--alone --scenario x", "JOBS=1", "DIR=/d")
    assert "PATCH" not in given and "MAKEOVERRIDES" in given  # make's bookkeeping, left to the key to ignore
    assert preloaded._key(given) == preloaded._key(plain)
    # A variable the user gives that is not one of the Makefile's reaches the processes, and is another parent.
    assert preloaded._key(recipe_env("OMP_NUM_THREADS=2")) != preloaded._key(plain)


def test_turned_off_means_no_parent(monkeypatch):
    monkeypatch.setenv("HARNESS_PRELOAD", "0")
    monkeypatch.setattr(preloaded, "_parent", None)
    assert preloaded.parent_for({"A": "1"}) is None and preloaded._parent is None


def test_a_process_started_as_the_parent_is_has_no_frame_inspect_must_scan_every_module_for(tmp_path):
    # Each such frame cost torchrun's rendezvous a scan of sys.modules per inspect.stack() (harness/processes/wire.py).
    (tmp_path / "probe.py").write_text(
        "import inspect, json\n"
        "stack = inspect.stack()  # as torchrun calls it: resolves each frame's module, filling inspect's cache\n"
        "files = [inspect.getabsfile(frame.f_code) for frame, *_ in stack]\n"
        "print(json.dumps({'files': files, 'unresolved': [f for f in files if f not in inspect.modulesbyfile]}))\n"
    )
    run = [sys.executable, *preloaded.UNFROZEN, "-m", "probe"]
    probe = json.loads(subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, check=True).stdout)
    assert any(f.endswith("runpy.py") for f in probe["files"])
    assert probe["unresolved"] == []
    # Without the flag, runpy's frames are "<frozen runpy>", which no module's file matches.
    plain = [sys.executable, "-m", "probe"]
    probe = json.loads(subprocess.run(plain, cwd=tmp_path, capture_output=True, text=True, check=True).stdout)
    assert any(f.endswith("<frozen runpy>") for f in probe["unresolved"])


def test_a_child_borrows_the_parent_named_to_it_only_for_the_same_key_and_python(tmp_path, monkeypatch):
    socket = tmp_path / "s"
    socket.touch()  # a parent's socket is a file there; nothing connects to it here
    owner = {"OMP_NUM_THREADS": "1", "PATH": "/bin", "PYTHONPATH": "/arm-a"}
    key = preloaded._key(owner)
    shared = {preloaded.SHARED: f"{preloaded._digest(key)} {socket}"}
    # A test's CLI: the owner's environment, another results dir, another arm.
    child = dict(owner, PYTHONPATH="/arm-b", HARNESS_RESULTS_DIR=str(tmp_path / "results"), **shared)
    borrowed = preloaded._borrowed(child)
    assert borrowed is not None and borrowed.socket == str(socket) and borrowed.alive()
    # What a child imports with is part of the key: another value, no borrowing.
    assert preloaded._borrowed(dict(child, OMP_NUM_THREADS="2")) is None
    # Nor for another environment's python (a release's), nor once the owner's socket is gone.
    monkeypatch.setattr(preloaded.sys, "executable", "/releases/verl-0.8.0/bin/python")
    assert preloaded._borrowed(child) is None
    monkeypatch.undo()
    socket.unlink()
    assert preloaded._borrowed(child) is None and not borrowed.alive()
    borrowed.close()  # not its own to close: nothing happens


def test_fork_or_fresh_is_decided_once_and_the_commands_follow_it(tmp_path, monkeypatch):
    """client.starter: the one place launch.py and the tests ask how a process starts."""
    monkeypatch.setenv("HARNESS_PRELOAD", "0")
    monkeypatch.setattr(client, "_parent", None)
    env = {"A": "1"}
    fresh = client.starter(env)
    assert (fresh.forked, fresh.rank_start, fresh.rank_entry) == (False, "fresh interpreter", client.WORKER)
    assert fresh.module("probe", "x") == [sys.executable, "-m", "probe", "x"]
    assert fresh.torchrun("/run/torchrun.pid", "f.json") == [
        sys.executable,
        *client.UNFROZEN,
        "-m",
        client.TORCHRUN,
        "f.json",
    ]
    assert client.wire.SOCKET not in env

    socket = tmp_path / "s"
    socket.touch()
    monkeypatch.setenv("HARNESS_PRELOAD", "1")
    monkeypatch.setattr(client, "_parent", client.Borrowed(client._key(env), str(socket)))
    forked = client.starter(env)
    assert (forked.forked, forked.rank_start, forked.rank_entry) == (True, "fork", client.STAND_IN)
    assert env[client.wire.SOCKET] == str(socket)  # for the stand-ins, which torchrun passes it on to
    assert forked.module("probe", "x") == [sys.executable, "-m", client.STAND_IN, "--module", "probe", "x"]
    assert forked.torchrun("/run/torchrun.pid", "f.json")[3:] == ["--torchrun", "/run/torchrun.pid", "f.json"]

    refused = client.Parent.__new__(client.Parent)
    refused.key, refused.refused = client._key(env), "2 threads after the preload imported torch"
    refused.wrote = {}  # as Parent.__init__ leaves it when the answer is a refusal
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


def test_what_the_parents_own_imports_wrote_into_its_environment_does_not_restart_it():
    """A test process that imports torch's inductor in-process (a model class, the profiler's export) gets
    TORCHINDUCTOR_CACHE_DIR set to torch's default, as the parent's preload did to itself: the same parent serves it."""
    started = {"OMP_NUM_THREADS": "1", "PATH": "/bin"}
    parent = client.Parent.__new__(client.Parent)
    parent.key, parent.refused = client._key(started), None
    parent.wrote = {
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u",
        "JE_ARROW_MALLOC_CONF": "background_thread:false",
    }
    assert client._serves(parent, started)
    assert client._serves(parent, dict(started, TORCHINDUCTOR_CACHE_DIR="/tmp/torchinductor_u"))
    assert client._serves(parent, dict(started, PYTHONPATH="/arm", **parent.wrote))
    # Another value than the preload's, a variable it did not write, or one of its start changed: another parent.
    assert not client._serves(parent, dict(started, TORCHINDUCTOR_CACHE_DIR="/elsewhere"))
    assert not client._serves(parent, dict(started, TORCH_LOGS="dynamo"))
    assert not client._serves(parent, dict(started, OMP_NUM_THREADS="2"))
    assert not client._serves(parent, {"PATH": "/bin"})
    # A parent started with the variable already set is held to that value as to any other.
    held = client.Parent.__new__(client.Parent)
    held.key, held.refused, held.wrote = client._key(dict(started, TORCHINDUCTOR_CACHE_DIR="/mine")), None, {}
    assert not client._serves(held, started) and client._serves(held, dict(started, TORCHINDUCTOR_CACHE_DIR="/mine"))


def _stub_server(monkeypatch, first_line: str, *, delay_s: float = 0.0):
    """client.Popen starts, in place of the server, a process that makes the socket file, prints `first_line` after
    delay_s, and waits for its stdin to close, as the server does (nothing connects to it here)."""
    real_popen = client.subprocess.Popen
    script = (
        "import pathlib, sys, time\n"
        f"time.sleep({delay_s})\n"
        f"if {first_line!r}.startswith('ready'): pathlib.Path(sys.argv[1]).touch()\n"
        f"print({first_line!r}, flush=True)\n"
        "sys.stdin.read()\n"
    )
    monkeypatch.setattr(
        client.subprocess, "Popen", lambda cmd, **kw: real_popen([sys.executable, "-c", script, cmd[-1]], **kw)
    )


def test_the_client_reads_what_the_parents_imports_wrote_from_its_ready_line(monkeypatch):
    """Parent.wrote is the JSON after `ready` (server.py serve): here from a stand-in for the server that prints the
    line and waits for its stdin to close, as the server does."""
    _stub_server(monkeypatch, 'ready {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u"}')
    parent = client.Parent({"PATH": "/bin"})
    try:
        assert parent.refused is None and parent.wrote == {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u"}
        assert client._serves(parent, {"PATH": "/bin", "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u"})
    finally:
        parent.close()


def test_a_cli_a_test_starts_borrows_the_parent_whose_imports_wrote_what_the_test_process_now_has(
    tmp_path, monkeypatch
):
    socket = tmp_path / "s"
    socket.touch()
    started = {"OMP_NUM_THREADS": "1", "PATH": "/bin"}
    wrote = {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u"}
    monkeypatch.setenv("HARNESS_PRELOAD", "1")
    monkeypatch.setattr(client, "_parent", client.Borrowed(client._key(started), str(socket), wrote))
    leaked = dict(started, **wrote)  # the test process after an in-process import of a model class
    shared = client.shared_with_children(leaked)
    assert client._parent.socket == str(socket)  # still the same parent
    child = dict(leaked, HARNESS_RESULTS_DIR=str(tmp_path / "results"), **shared)
    borrowed = client._borrowed(child)
    assert borrowed is not None and borrowed.socket == str(socket) and borrowed.wrote == wrote
    assert client._borrowed(dict(child, TORCHINDUCTOR_CACHE_DIR="/elsewhere")) is None


def test_a_worker_borrows_the_parent_its_controller_lent_once_it_is_ready(monkeypatch):
    """client.lend (the pytest controller, before its workers start) does not wait for the preload; a worker
    (expect_lent) waits for it at its first launch and borrows it where its launch environment has the lender's
    key, xdist's own variables aside."""
    _stub_server(monkeypatch, 'ready {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u"}', delay_s=0.5)
    monkeypatch.setattr(client, "_lending", None)
    controller = {"OMP_NUM_THREADS": "1", "PATH": "/bin"}
    token = client.lend(controller)
    try:
        digest, directory = token.split(" ")
        assert digest == client._digest(client._key(controller)) and not os.path.exists(
            os.path.join(directory, "state.json")
        )
        monkeypatch.setattr(client, "_lent", None)
        client.expect_lent(token)
        worker = dict(controller, PYTEST_XDIST_WORKER="gw1", PYTEST_XDIST_WORKER_COUNT="2", COLUMNS="80", LINES="24")
        borrowed = client._lent_parent(dict(worker, PYTHONPATH="/arm-a"))
        assert isinstance(borrowed, client.Borrowed) and borrowed.socket == os.path.join(directory, "s")
        assert borrowed.wrote == {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_u"}
        # Another key (a test's own marker variable) gets no loan, and the loan stays for the next launch.
        assert client._lent_parent(dict(worker, HARNESS_TEST_MARKER="1")) is None and client._lent == token
    finally:
        client._lending.close()


def test_a_lent_parent_that_refused_leaves_each_worker_to_its_own_at_once(monkeypatch):
    _stub_server(monkeypatch, "refused: 2 threads after the preload imported torch")
    monkeypatch.setattr(client, "_lending", None)
    monkeypatch.setattr(client, "_lent", None)
    client.expect_lent(client.lend({"PATH": "/bin"}))
    started = time.monotonic()
    assert client._lent_parent({"PATH": "/bin"}) is None and client._lent is None
    assert time.monotonic() - started < 30  # the lender's directory is gone: no waiting out the start timeout
