"""The server (the preloaded parent): imports torch, transformers and verl's third-party dependencies once, then forks
torchrun for each run the driver launches and one child per rank that torchrun starts (both asked for by a stand-in,
stand_in.py), so neither pays imports (about 10 s per rank and 2-4 s for torchrun on a 2-core host, most of a small
run).

Started by the driver's client (client.py) as `python -m harness.processes.server SOCKET --key KEY --checkout DIR
--owner PID [--keep S]` (command): the process list is its registry, kept.py reads it there. It prints `ready` or
`refused: <why>` on stdout, serves until its stdin closes, and never imports verl itself: verl comes from the arm's
copy, which only the child puts on sys.path. With `--keep S` it serves on after its stdin closes, for other commands
of the same checkout and key, until it has been idle (no child, no request) for S seconds. SIGTERM and SIGINT (a
terminal's Ctrl-C reaches it in the command's process group) stop new requests; it ends once its children have, as
it does when its checkout's directory is gone. It removes its directory at its end.

Why fork is safe here, and what made an earlier attempt deadlock: a fork copies one thread only, and a lock another
thread held at that moment stays locked in the child forever. Importing torch with OMP_NUM_THREADS unset starts an
OpenMP worker thread, and importing pyarrow (pulled in by pandas and datasets, which verl imports) starts jemalloc's
background thread. The parent runs with OMP_NUM_THREADS=1, imports pyarrow with jemalloc's background thread turned
off (JE_ARROW_MALLOC_CONF, in its own environment only), runs no tensor op, and refuses to serve unless it is the
only thread of its process (/proc/self/task) and verl is not imported.

Each child starts from the same untouched parent, so a cell cannot see what an earlier cell did: the isolation is
that of a fresh interpreter with the same imports done (tests/distributed/test_forked_cells.py compares the numbers).
"""

from __future__ import annotations

import gc
import importlib
import os
import pkgutil
import runpy
import select
import signal
import socket
import sys
import threading
import time
from typing import NamedTuple

from harness.processes import wire

# What a rank (and torchrun) imports before its work, slowest first; not verl (the arm's copy), not pyarrow/pandas
# (a thread).
PRELOAD = (
    "torch",
    "torch.distributed.run",  # what torchrun's wrapper (harness/rank/torchrun.py) runs
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "torch.distributed.checkpoint",
    "torch._dynamo",
    "torch._functorch.aot_autograd",
    "torch._inductor.compile_fx",  # what a compile rank's first torch.compile imports
    "transformers",
    "transformers.masking_utils",
    "transformers.models.qwen3_vl.modeling_qwen3_vl",
    "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe",
    "transformers.models.qwen3.modeling_qwen3",
    "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
    "transformers.models.llama.modeling_llama",
    "transformers.models.glm4v.modeling_glm4v",
    "transformers.models.qwen3_5.modeling_qwen3_5",
    # What verl's engine modules import beside verl itself (listed from a rank's new sys.modules): about 0.1-0.15 s
    # per engine rank. Not ray.experimental.state, which warns on import: that warning belongs in the rank's record.
    "transformers.models.mistral.modeling_mistral",
    "transformers.trainer_pt_utils",
    "ray",
    "ray.util.state",
    "ray.util.collective",
    # What a rank's step imports on first use (verl's no-padding layout is a jagged nested tensor; the engine's load
    # of rank 0's weights; the oracle's torch.save): 10-20 ms per engine rank, 0.01 s here.
    "torch.nested._internal.ops",
    "torch.distributed.checkpoint.state_dict",
    "torch.utils.serialization",
    # What dynamo imports while it traces (a compile rank): about 0.3 s per rank.
    "torch.distributed.tensor.experimental",
    "torch.export._trace",
    "torch.fx.experimental.validator",
    "sympy.combinatorics",
    "tensordict",
    "omegaconf",
    "hydra",
    "fastapi",
    "uvicorn",
    "peft",
    "accelerate",
    "codetiming",
    "yaml",
    "pydantic",
    "coverage",  # a patched arm's rank measures its lines with it (rank/measures/line_watch.py)
    # verl's engine imports datasets (verl.utils.dataset), which imports pandas and pyarrow: about 2.5 s per engine
    # rank on a 2-core host. pyarrow's jemalloc starts a background thread unless told not to (see below).
    "pandas",
    "pyarrow",
    "datasets",
)
# The rank's own modules are imported too (they import verl only inside functions): about 0.08 s per rank, compiled
# from source where PYTHONDONTWRITEBYTECODE holds. Not these, which a child runs as __main__ (runpy warns about a
# module imported already). They read no environment at import (harness.paths reads the results directory at each
# call), so what a launch sets differently reaches them.
ENTRY_POINTS = ("worker", "torchrun", "head_bench")
NEVER = ("verl",)
# jemalloc reads its options when pyarrow first allocates: set before the preload imports pyarrow, in this process
# only (a child takes its client's environment). Without it the thread check below refuses, as it should.
ARROW_JEMALLOC_CONF = ("JE_ARROW_MALLOC_CONF", "background_thread:false")


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _rank_modules() -> list[str]:
    import harness.rank

    # Every module of the rank package and its rooms (oracle/, verl_side/, measures/), not the entry points.
    found = pkgutil.walk_packages(harness.rank.__path__, prefix="harness.rank.")
    return sorted(m.name for m in found if not m.ispkg and m.name.rsplit(".", 1)[-1] not in ENTRY_POINTS)


def preload() -> str | None:
    """Import PRELOAD and the rank's own modules; the reason fork would be unsafe or wrong, or None."""
    os.environ.setdefault(*ARROW_JEMALLOC_CONF)
    for name in (*PRELOAD, *_rank_modules()):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # a family this transformers lacks: its child imports what it needs
        if threads() != 1:  # refused at once: the imports after this one would be paid for nothing
            return _thread_refusal(f"the preload imported {name}")
    try:
        # verl's engine (utils/model.py get_hf_auto_model_class) lists AutoModelForImageTextToText's config
        # classes, which imports every family's configuration module: about 1.2 s per engine rank, paid here once.
        from transformers import AutoModelForImageTextToText

        AutoModelForImageTextToText._model_mapping.keys()
    except (ImportError, AttributeError):
        pass  # another transformers: the child pays it
    _warm_caches()
    present = [name for name in NEVER if name in sys.modules]
    if present:
        return f"the preload imported {', '.join(present)}"
    if threads() != 1:
        return _thread_refusal("the preload")
    return None


def _warm_caches():
    """Caches every child would otherwise fill for itself, filled once here (plain Python data, no thread, no tensor):
    transformers' checkpoint conversion mapping (conversion_mapping.py, built on first use, ~480 weight renamings
    with their regexes), read by save_pretrained (rank 0 writes the tiny model for verl) and from_pretrained (every
    engine rank loads it): the first lookup 0.12-0.18 s (load 2: 0.033-0.046 s) -> 0.000 s; once here, 0.03 s. And
    the ABCs' answers (_answer_abc_checks)."""
    try:
        from transformers import conversion_mapping

        conversion_mapping.get_checkpoint_conversion_mapping("llama")
    except (ImportError, AttributeError):
        pass  # a transformers without it (4.x): nothing to fill
    _answer_abc_checks()


def _answer_abc_checks():
    """Two isinstance checks against abstract base classes every engine rank makes, answered here once: an ABC keeps
    each class's answer (a cache in the ABC, valid until any ABC's register() is called), and the first answer for a
    class walks every subclass of the ABC and theirs.

    verl's FSDP2 wrap (fsdp_utils.maybe_patch_fsdp_module) asks isinstance(module, abc.ABC) of each module it shards
    (the model's layer classes, its `_no_split_modules`, the embedding and lm_head, then the model): ~140 subclasses
    of ABC after the preload. torch's Conv layers (the vision tower's patch embedding) ask isinstance(int or tuple,
    collections.abc.Iterable). In a child forked from a preloaded parent, verl's engine modules imported first, as a
    rank does (three children each, 2-core host, idle): the model's ABC check 14-18 ms -> 0, the Iterable check
    3-4 ms -> 0. verl's import registers no ABC (the caches' token is the same after it), so the answers hold."""
    import collections.abc
    import json
    from abc import ABC

    import torch
    import transformers

    from harness.paths import MODELS_DIR

    sharded = [torch.nn.Embedding, torch.nn.Linear]
    for config in sorted(MODELS_DIR.glob("*.json")):
        for name in json.loads(config.read_text()).get("architectures", []):
            try:
                model_class = getattr(transformers, name)
            except (ImportError, AttributeError):
                continue  # a family this transformers lacks: its rank asks for itself
            family = sys.modules[model_class.__module__]
            layers = [getattr(family, layer, None) for layer in model_class._no_split_modules or []]
            sharded += [model_class, *(layer for layer in layers if isinstance(layer, type))]
    for module_class in sharded:
        issubclass(module_class, ABC)
    for value in (0, (0,), [0]):
        isinstance(value, collections.abc.Iterable)


def _thread_refusal(after: str) -> str:
    names = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
    return f"{threads()} threads after {after} ({', '.join(names)}): forking could deadlock"


def _become_child(conn: socket.socket, request: wire.Request, fds: list[int], closing: list):
    """In the child: take the client's stdio, environment and directory, then run what it asked for (the worker, as
    torchrun would start it, or torchrun itself) as __main__."""
    signal.set_wakeup_fd(-1)  # the server's, as its SIGCHLD handler: a fresh interpreter has neither
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for obj in closing:
        obj.close()
    gc.enable()  # as in a fresh interpreter (the parent collects nothing, see main)
    os.setsid()  # a group of its own, as torchrun gives each rank, so the launcher's killpg reaches it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # Line-buffered as a fresh interpreter's stderr is; flushed before the child's os._exit (which flushes nothing).
    sys.stdin, sys.stdout, sys.stderr = (
        open(0, closefd=False),
        open(1, "w", buffering=1, closefd=False),
        open(2, "w", buffering=1, closefd=False),
    )
    os.environ.clear()
    os.environ.update(request.env)
    os.chdir(request.cwd)
    # PYTHONPATH as a fresh interpreter would read it: the arm's verl first.
    front = [p for p in request.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = front + [p for p in sys.path if p not in front]
    importlib.invalidate_caches()
    wire.send_message(conn, {"pid": os.getpid()})

    def watch_client():
        # The client relays its starter's signals; when it is gone (SIGKILLed), so is this process.
        while True:
            data = conn.recv(1)
            if not data:
                os.kill(os.getpid(), signal.SIGKILL)
            os.kill(os.getpid(), data[0])

    threading.Thread(target=watch_client, daemon=True).start()
    sys.argv = [request.argv[0]] + request.argv[1:]
    try:
        runpy.run_module(request.module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:  # as the interpreter reads sys.exit's argument: None is 0, a message is 1
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the worker records its own errors; this is one it could not (torchrun
        import traceback  # ends this way when a rank failed: its failure summary is this traceback)

        traceback.print_exc()
        code = 1
    else:
        code = 0
    # Loggers set up in the parent hold the interpreter's own stream objects, which write to the same fds.
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


# How long the loop sleeps when nothing happens: a request or a child's end wakes it at once (_wake_on_child_end).
_IDLE_S = 1.0


def _wake_on_child_end() -> tuple[socket.socket, socket.socket]:
    """What wakes the loop when a child ends: the end of a rank, then of its torchrun, is told to the stand-ins that
    wait for it (and through them to torchrun's monitor, then to the driver) at once. With a 0.05 s poll instead,
    each of those two ends waited up to 0.05 s for the loop: a child's end to its stand-in's exit, median 37-47 ms
    -> 1.8-2.2 ms (tools/child_end_bench.py, N=40, three rounds back to back, load 5.7-6.5), ~70 ms of every cell."""
    wake, wakeup = socket.socketpair()
    wakeup.setblocking(False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the signal writes to the wakeup fd
    signal.set_wakeup_fd(wakeup.fileno(), warn_on_full_buffer=False)  # a full buffer still wakes the loop
    wake.setblocking(False)
    return wake, wakeup


def _drain(sock: socket.socket):
    try:
        while sock.recv(4096):
            pass
    except BlockingIOError:
        pass


def _reap(children: dict[int, socket.socket]) -> bool:
    """Tells the client of each child that has ended how it ended (its exit code or signal) and forgets it; True
    where one had."""
    reaped = False
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        conn = children.pop(pid, None)
        if conn is None:
            continue
        ended = (
            {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.waitstatus_to_exitcode(status)}
        )
        try:
            wire.send_message(conn, ended)
        except OSError:
            pass  # the client is gone already
        conn.close()
        reaped = True
    return reaped


def serve(path: str, keep_s: float = 0.0, checkout: str | None = None):
    """Forks a child per request on the socket at path until stdin closes. keep_s > 0: after stdin closes, on until
    idle for keep_s seconds; each fork and each child's end touches the socket, which tells a borrower how long it has
    been idle. SIGTERM, SIGINT or SIGHUP, or checkout's directory gone: no new request, out once the children have
    ended."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    children: dict[int, socket.socket] = {}
    stdin = sys.stdin.buffer
    woken, wakeup = _wake_on_child_end()
    watched = [listener, stdin, woken]
    retiring: list = []
    # SIGHUP: the terminal of the command that started it has closed while that command ran.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: retiring.append(True))
    print("ready", flush=True)  # after the handlers: a client may signal
    last_active = time.monotonic()
    while True:
        readable, _, _ = select.select(watched, [], [], _IDLE_S)
        if stdin in readable and not os.read(stdin.fileno(), 1):
            if keep_s <= 0:
                break  # the driver is gone
            watched.remove(stdin)  # the command that started it has ended: on for the next one
        if woken in readable:
            _drain(woken)
        if listener in readable and not retiring:
            conn, _ = listener.accept()
            try:
                request, fds = wire.receive_request(conn)
            except (ConnectionError, OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                _become_child(conn, request, fds, [listener, stdin, woken, wakeup, *children.values()])
            for fd in fds:
                os.close(fd)
            children[pid] = conn
            last_active = _touch(path)
        if checkout and not os.path.isdir(checkout):
            retiring.append(True)  # nothing of that checkout is left to run
        if retiring and listener in watched:
            watched.remove(listener)
            os.unlink(path)
            listener.close()
        if _reap(children):
            last_active = _touch(path)
        idle_out = stdin not in watched and time.monotonic() - last_active > keep_s
        if not children and (retiring or idle_out):
            break
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if listener in watched:
        os.unlink(path)
    _remove_own_directory(path)


DIRECTORY_PREFIX = "harness-preload-"  # what client.Parent names the directory it makes for a parent


def _remove_own_directory(socket_path: str):
    """The directory client.Parent made for this parent (its name says so), once empty of what the parent put
    there: never anything else. A socket given in a shared directory (/tmp itself, say) leaves that directory be."""
    directory = os.path.dirname(socket_path)
    if not os.path.basename(directory).startswith(DIRECTORY_PREFIX):
        return
    for name in ("parent.log",):
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass
    try:
        os.rmdir(directory)
    except OSError:
        pass  # not empty: not only this parent's


def _touch(path: str) -> float:
    try:
        os.utime(path)
    except OSError:
        pass  # retiring: the socket is gone
    return time.monotonic()


MODULE = "harness.processes.server"


def command(socket_path: str, key: str, checkout: str, owner: int, keep_s: float) -> list[str]:
    """The server's command line: what kept.py reads back from the process list (parse)."""
    keep = ["--keep", str(keep_s)] if keep_s else []
    return [
        sys.executable,
        "-m",
        MODULE,
        socket_path,
        "--key",
        key,
        "--checkout",
        checkout,
        "--owner",
        str(owner),
        *keep,
    ]


class Args(NamedTuple):
    socket: str
    key: str
    checkout: str
    owner: int
    keep: float


def parse(argv: list[str]) -> Args:
    """command's arguments (after the module's name); ValueError or IndexError for a command line it did not write."""
    flags = dict(zip(argv[1::2], argv[2::2], strict=True))
    if set(flags) - {"--key", "--checkout", "--owner", "--keep"}:
        raise ValueError(flags)
    get = flags.get
    return Args(argv[0], get("--key", ""), get("--checkout", ""), int(get("--owner", 0)), float(get("--keep", 0)))


def main():
    args = parse(sys.argv[1:])
    # What the imports allocate lives as long as this process: collecting among it is time lost (1.3-2.5 s of the
    # preload's 8-13 s). Frozen after, so that a child's collector walks only what the child allocates: with the
    # ~1M import-time objects in the oldest generation, each full collection in a rank walked them all (json.load
    # of a 6 MB profiler trace took 2.4 s in a rank, 0.3 s alone; cells were ~30 % slower). The frozen objects are
    # the imports, never freed anyway; gc.get_objects() leaves them out (harness/rank/measures/residency.py says why
    # its scan may).
    gc.disable()
    try:
        refused = preload()
    except KeyboardInterrupt:  # Ctrl-C while it imports: the command that started it is ending
        refused = "interrupted while preloading"
    if refused:
        print(f"refused: {refused}", flush=True)
        _remove_own_directory(args.socket)
        return
    gc.freeze()
    serve(args.socket, args.keep, args.checkout or None)
    # Its children are killed and its socket gone; a normal interpreter exit would now tear down thousands of
    # modules (about 3 s, which the driver's exit waits for). Nothing is left to flush but the streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
