"""How the driver starts torchrun and its ranks: one seam, two ways.

launch.py asks client.starter(env) once per cell and gets a Starter: the commands that start torchrun and each rank.
The plain way is a fresh interpreter (HARNESS_PRELOAD=0, a refusal, or a test that asks for it). The other is an
accelerator behind the same Starter: a preloaded parent that has imported what every rank imports forks the process
instead, and the record says which way a cell started (`rank_start`).

    client.py    the seam (starter, Starter) and the driver's handle on a parent: its key, lent, kept or its own
    server.py    the parent: preloads, then forks one child per request; the child becomes the requested __main__
    stand_in.py  what torchrun (and the driver) start in place of the real process, when a parent is up
    wire.py      what those three agree on: the environment variables, the request, the answers
    kept.py      parents as the process list shows them: status, stop, the line a command ends with
    tree.py      processes seen one way (psutil): alive, descendants, killing a run's tree
    bytecode.py  bytecode: the main venv's, written by importing what a run imports; a release environment's
    sandbox.py   the OS sandbox of a cell whose code is not the installed verl (docs/SANDBOX.md): its policy, the probe
    confine.py   entering it in this process (namespaces, a new root, rlimits, Landlock); kernel.py its system calls
    sandbox_exec.py  a fresh sandboxed torchrun (enter, exec); cell_parent.py: a sandboxed cell's own parent, which
                 the parent forks and which serves the cell's forks from inside its sandbox

Who starts whom, with a parent up:

    driver (launch.py)
     |-- Popen, once -----> parent (python -m harness.processes.server SOCKET --key K --checkout DIR --owner PID)
     '-- Popen, per cell -> stand-in --torchrun --request--> parent --fork--> torchrun (harness.rank.torchrun)
                            torchrun --Popen, per rank--> stand-in --request--> parent --fork--> rank (worker)

and without one: driver --Popen--> python -m harness.rank.torchrun --Popen per rank--> python -m harness.rank.worker.
A sandboxed cell's torchrun and ranks fork from its cell parent instead (cell_parent.py draws it), or start fresh
inside `python -m harness.processes.sandbox_exec POLICY --`.

Which side of the house: the driver's. Every module here imports the standard library (and psutil) only at module
load, so the user's process imports it without torch (tests/unit/test_layout.py). The parent imports the rank side's
stack by name once it is a process of its own, and never verl (the arm's copy is the child's).

The ideas, each with what it buys toward the goals (make repro warm <= 30 s, first run <= 40 s, verify <= 150 s,
fresh-clone CI <= 300 s); the figures behind them are in docs/TIME.md, "The process machinery":
1. One parent imports once, torchrun and every rank fork from it (server.py PRELOAD, the rank's own modules, and
   caches every child would fill): ~10 s of imports per rank on the direct path, ~14 s on the engine path, 2-4 s
   per torchrun; fsdp2-multigpu x upstream 18.7 s -> 10.3 s. Most of every goal.
2. The stand-in (stand_in.py, wire.py): stdlib only, passes its stdio as descriptors, relays SIGTERM/SIGINT/SIGHUP,
   exits as its child did, and is told at once (the parent wakes on SIGCHLD): torchrun's timeouts, logs and failure
   reports see the ranks they started, and a forked cell's record is a fresh one's but for times.
3. Fork only when it is safe: one thread (OMP_NUM_THREADS=1, pyarrow's jemalloc thread off), verl not imported;
   else the parent refuses and cells start fresh, saying why. An earlier attempt without this deadlocked.
4. The imports' objects frozen (gc off while importing, gc.freeze() after): 1.3-2.5 s of the preload, and a rank's
   collections no longer walk ~1M import-time objects (cells ~30 % faster: engine-sp2-dp2 10-11 s -> 7.7 s).
5. The key is an allowlist (client.key): the interpreter, the preload list, the code stamp, the user's part of
   PYTHONPATH and the variables that change what the parent's imports do (client.KEY_PREFIXES). Nothing else starts
   a second parent (the denylist it replaces grew to 37 names; with the test id in the key, one CI run started 126
   parents); a parent of other code is never used.
6. A parent lent to the processes this one starts (LENT): make test's workers borrow the controller's, a test's CLI
   the test's: 8-13 s of imports each; fresh-clone CI 750 s -> 680 s.
7. Kept for the next command of the same checkout and key (600 s idle; not in CI nor under pytest), found in the
   process list (kept.py): make repro warm 32-37 s -> 23-26 s on a slow host, a fresh clone's first make repro
   44.2 s -> 27.7-30.3 s (make venv's last step starts it). One per checkout; the command ends saying so; Ctrl-C ends
   a parent the command started; it ends itself once its checkout is gone; `make status` lists, `make stop` ends.
8. Bytecode written once (bytecode.py): the main venv's by importing what a run imports (make venv 56 s -> 35 s);
   a release environment's own PYTHONPYCACHEPREFIX, seeded from the main interpreter's (a first release run
   35 s -> 12 s).

Not here, and why: the standard library's forkserver (multiprocessing.set_forkserver_preload) forks only for Process
objects of the interpreter that started it, while torchrun starts each rank as a command line, so a stand-in would
be needed anyway, and its start is most of a request's cost (docs/TIME.md). `-X frozen_modules=off` and a warmed
inspect index, which made torchrun's rendezvous' inspect.stack() calls cheaper: harness/rank/torchrun.py's
method_name makes none.
"""
