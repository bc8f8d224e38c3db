"""The process machinery: how torchrun and its ranks start without paying their imports.

    server.py    the server (the preloaded parent): imports torch, transformers and verl's dependencies once, then
                 forks a child per request; the child becomes the requested module's __main__
    client.py    the client, in the driver: starts, reuses, lends, keeps for the next command and closes the server;
                 decides per launch whether its processes are forked or fresh (starter)
    stand_in.py  the stand-in: what torchrun (and the driver) starts in place of the real process; asks the server
                 for a fork, relays signals to it and exits as it did
    wire.py      what the three agree on: the environment variables, the request's header, the answers
    tree.py      processes seen one way (psutil): which are alive, which descend from which; killing a run's tree
    bytecode.py  bytecode: the main venv's compiled by importing what a run imports (outside CI by the parent make
                 venv leaves up for the first command); a release environment's

Who starts whom, with the server up (HARNESS_PRELOAD unset or 1):

    driver (the user's process; launch.py)
     |-- Popen, once per driver --> server  (python -X frozen_modules=off -m harness.processes.server SOCKET)
     |                                 ^  |
     |-- Popen, per run --> stand-in --'  '--fork--> torchrun (harness.rank.torchrun as __main__, the stand-in's
     |                      --torchrun                  |      stdio, environment, directory; pid -> torchrun.pid)
     |                                                  |
     |                        stand-in <--Popen, per rank
     |                        SPEC.json --request--> server --fork--> rank (harness.rank.worker as __main__)

and without it (off, or refused: the record's rank_start says which and why):

    driver --Popen--> python -X frozen_modules=off -m harness.rank.torchrun --Popen per rank--> python -m
    harness.rank.worker

Every arrow into the server is one request on its unix socket (wire.py: a length header, a JSON body with argv,
environment and directory, the requester's stdio as file descriptors); every answer is a JSON line: the child's pid,
then how it ended. torchrun remains the launcher: it sees each rank end as before (an exit code, or the signal that
killed it), because the stand-in ends the same way.

Which side of the house: the driver's. Every module here imports the standard library only at module load (tree.py
adds psutil), so the user's process imports the client without torch (tests/unit/test_layout.py); the driver starts,
keys, lends and closes the server, and decides fork or fresh. The server imports the rank side's stack, but by
name, inside a function, once it is a process of its own; it never imports verl (the arm's copy is the child's). So
it is neither in launch/ (it is not a stage of the flow) nor in rank/ (nothing here runs a rank's work).

The ideas, each with what it buys (measured on this project's 2-core host; docs/TIME.md has the table):
1. One server imports once, children fork: about 10 s of imports per rank on the direct path, 14 s on the engine
   path; fsdp2-multigpu x upstream 18.7 s fresh -> 10.3 s forked (setup 4.7 s -> 0.08 s).
2. torchrun forked too (stand-in --torchrun): the 2-4 s a fresh torchrun spends importing torch.
3. The stand-in, stdlib only, relays SIGTERM/SIGINT/SIGHUP and exits as its child did: torchrun, its timeouts and
   its failure reports see the ranks they started; its own start is a bare interpreter's (~0.1 s, idle).
4. The wire header and the stdio passed as descriptors: a forked rank writes to torchrun's per-rank log files as a
   fresh one would; the records are identical but for times (tests/distributed/test_forked_cells.py).
5. The thread refusal: fork copies one thread, and a lock another thread held stays held in the child (an earlier
   attempt deadlocked). The server runs with OMP_NUM_THREADS=1, imports pyarrow with jemalloc's background thread
   off (JE_ARROW_MALLOC_CONF), and refuses unless /proc/self/task shows one thread and verl is not imported; a
   refusal falls back to fresh interpreters, and the record says why.
6. pandas, pyarrow and datasets preloaded (safe with 5): about 2.5 s of an engine rank's verl import.
7. The collector off while importing and gc.freeze() before serving: 1.3-2.5 s of the server's 8-13 s of imports;
   in a child, json.load of a 6 MB profiler trace 2.4 s -> 0.3 s; cells engine-sp2-dp2 10-11 s -> 7.7 s,
   fsdp2-multigpu 5.2-5.8 s -> 3.7-4.2 s.
8. -X frozen_modules=off (server and fresh torchrun): torchrun's rendezvous scanned sys.modules ~270 times per run
   through inspect.stack(); 1.5 s of every forked torchrun (its ranks started 1.5 s -> 0.5 s after it).
9. The server's key leaves per-launch variables out (PYTHONPATH, the socket, PYTEST_CURRENT_TEST, the results
   dir): with the test id in the key, 126 servers in one CI run, each paying the imports.
10. A server lent to child processes (HARNESS_PRELOAD_SHARED: the key's digest, with the interpreter, and the
    socket): a test's CLI skips 8-13 s of imports; fresh-clone CI 750 s -> 680 s.
11. What the ranks import beside verl, preloaded: the engine's third-party modules (verl's imports in a fork
    0.33-0.48 s -> 0.25-0.35 s), AutoModelForImageTextToText's mapping (1.2 s per engine rank), what dynamo imports
    while tracing (~0.3 s per compile rank), inductor's compile_fx (~2 s per compile rank), the rank's own modules
    (0.07-0.09 s per rank where no bytecode is written).
12. The forked torchrun's pid in the run dir (torchrun.pid): a timeout or Ctrl-C kills torchrun, its stand-ins and
    the ranks, collected before any dies (tree.py; tests/distributed/test_robustness.py finds no orphans).
13. A release environment's PYTHONPYCACHEPREFIX (bytecode.py): verl 0.8.0 x direct-1gpu build + run 46 + 17 s with
    precompiled bytecode, 6 + 40 s for a first run without, 14 s for each later one.
14. Its .pycache seeded from the main interpreter's bytecode (seed_bytecode): that first run 35 s -> 12 s, for
    1.5 s of linking.
15. Two caches filled once in the server (_warm_caches): inspect's file -> module index, which torchrun's
    rendezvous rebuilt in every fork (its 9 inspect.stack() calls 0.41-0.55 s -> 0.18-0.21 s at load 9), and
    transformers' checkpoint conversion mapping (its first lookup 0.03-0.18 s -> 0, rank 0 and every engine rank).
16. The server's loop woken by a child's end (SIGCHLD through a wakeup fd) instead of a 0.05 s poll: a child's end
    reaches its stand-in 37-47 ms -> 2 ms later (tools/child_end_bench.py); a cell waits on two such ends.
17. What the server's own imports wrote into its environment (its ready line; torch's inductor sets
    TORCHINDUCTOR_CACHE_DIR in any process importing it) is no difference in a launch's key, nor in a lent
    server's (HARNESS_PRELOAD_SHARED_WROTE): a test process that imported a model class in-process had restarted its
    server, and with it every CLI its tests started (make test's servers 8-9 -> 6).
18. The main venv's bytecode compiled for what a run imports only (bytecode.py compile_by_importing, make venv's
    last step, and a .pth line that has the venv's processes write what else they compile): `make venv` on a fresh
    clone 56 s -> 35 s, the first `make repro` after it unchanged (23.4 s). What imports without torch is compiled
    at the same time by a second process (compile_without_torch): the import step 25-30 s -> 18-22 s.
19. One parent for all of make test's pytest workers, started by the controller before they start and collect
    (client.lend, conftest.py); a worker borrows it (expect_lent) where its key is the controller's, xdist's
    own variables aside. Each worker had started its own at its first launch, after collecting: the servers'
    own CPU in one make test 12.8 + 13.2 s -> 14.9 s (process accounting, acct(2)).
20. A command's server kept up after it (client.keep_s, server.py --keep; 600 s idle, HARNESS_PRELOAD_KEEP_S; not
    in CI nor under pytest) for the next command of the same checkout, key, python and code (the harness's modules,
    models/, site-packages; a server of other code is sent SIGTERM and ends once its children have): make repro's
    first cell starts 11-13 s -> 1.7-1.9 s after the command, the whole 32.4/36.2/37.2 s -> 23.1/25.2/26.2 s on a
    slow afternoon of the host (alternating). `harness stop` (make stop) ends it; idle, it holds ~575 MB.
21. make's own parameters (PATCH, ARGS, JOBS, ...) kept out of its recipes' environment (the Makefile's
    `unexport`), and MAKEOVERRIDES out of the key: `make verify PATCH=f.diff` had a key of its own, and started a
    parent beside the one `make repro` kept up (a one-scenario verify right after make repro 16.3 s -> 3.4 s).
    Nor is the terminal, pane or ssh session a command was typed in (TMUX_PANE, SSH_TTY, ...).
22. make venv's last step starts the parent the first command would start (client.parent_for, given
    rank/environment.py's rank_environment) and leaves it up, its preload writing the bytecode the step's own
    imports wrote (bytecode.py; not in CI, where no parent is kept): a fresh clone's first `make repro`
    44.2 s -> 27.7/30.3 s, `make venv` 46.1 -> 46.1/48.8 s (alternating, 12-02 evening's nested VM).

Why not the standard library's forkserver (multiprocessing.set_forkserver_preload): it forks only for Process
objects of the interpreter that started it, with that interpreter's environment and stdio, while torchrun starts each
rank as a command line in a process of its own; a stand-in would be needed anyway, and its start is most of a
request's cost. Measured back to back, same preload list, a child that exits at once, load 2.3-4.4, two rounds: a
request through a stand-in 163-209 ms, of which a bare interpreter's start is 114-150 ms; a forkserver child started
from its owner 49-79 ms (tools/forkserver_bench.py; docs/TIME.md).
"""
