"""python -m harness COMMAND: the one entry point (the Makefile's targets call it). Arguments and the command
table only; each command lives in harness/commands/. Exit codes: 0 done/passes, 1 a finding (fails, drift,
hang), 2 usage or setup error (one line naming the file and field, or the diff and hunk)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from harness.commands.bench import DEFAULT_BANDWIDTH_GBPS
from harness.driver_guard import VerlImportRefused, lift_refusal, refuse_verl
from harness.errors import EXIT_CRASH, EXIT_INTERRUPTED, EXIT_NOT_JUDGED, UsageError
from harness.paths import VERL_SPEC_ENV, VERL_TREE_ENV

# pr's default reach budget (commands/reach.py): seconds spent looking for scenarios that run its unrun code
PR_REACH_SECONDS = 300.0

# command -> (module under harness.commands, function, help)
COMMANDS = {
    "repro": (
        "run",
        "cmd_repro",
        "the scenarios tagged repro with arms none (before verl #6659), upstream and the "
        "candidate fix, against scenarios/expectations.yaml",
    ),
    "verify": ("run", "cmd_verify", "the verdict for one patch (default: upstream verl)"),
    "run": ("run", "cmd_run", "chosen scenarios x chosen arms"),
    "matrix": ("run", "cmd_matrix", "every scenario x arm of scenarios/expectations.yaml; exit 1 on drift"),
    "stop": ("stop", "cmd_stop", "end the preloaded parents earlier commands left up for the next one (10 min idle)"),
    "status": ("stop", "cmd_status", "the preloaded parents up: pid, what it serves, checkout, age, memory"),
    "rerun": ("rerun", "cmd_rerun", "run a record again (FILE or FILE:LINE) and compare its outcome"),
    "sweep": (
        "sweep",
        "cmd_sweep",
        "the lm_head bug class across verl's fused-head model families "
        "(scenarios/sweep/ x the arms of its expectations.yaml); exit 1 on drift",
    ),
    "releases": (
        "releases",
        "cmd_releases",
        "the repro scenarios on each verl release of scenarios/releases.yaml, "
        "as released and with the candidate patch, one environment each",
    ),
    "bench": ("bench", "cmd_bench", "lm_head collective cost per arm: measured, and projected to real sizes"),
    "noise-floor": ("noise_floor", "cmd_noise_floor", "largest errors of a correct arm over several seeds"),
    "upstream": (
        "upstream",
        "cmd_upstream",
        "a verl-style regression test, fix.diff and issue-ready reports in "
        "one directory (default results/upstream), checked by running them",
    ),
    "patch": (
        "patch",
        "cmd_patch",
        "start DIR: a copy of the installed verl to edit; diff DIR: the patch of the edits (a/verl, b/verl paths)",
    ),
    "import": (
        "import_survey",
        "cmd_import_or_survey",
        "a verl run script or file of key=value overrides as a scenario with a verl: block, scaled to the tiny "
        "model and this host",
    ),
    "sensitivity": (
        "sensitivity",
        "cmd_sensitivity",
        "for each update scenario, how far each setting back at its default and each loss term off moves the "
        "verdict's numbers, in tolerances (the oracle alone); exit 1 where one it cannot see is not declared",
    ),
    "pr": (
        "pr",
        "cmd_pr",
        "a pull request as its author wrote it: PATH BASE..HEAD of a verl checkout, judged as verify judges a patch, "
        "on the verl at BASE (BASE...HEAD: from their merge base)",
    ),
    "bisect": (
        "bisect",
        "cmd_bisect",
        "the first commit of a verl checkout's GOOD..BAD where one cell's outcome changes (outcome, root error, "
        "failing parameters), as git bisect finds it; only commits that touch verl/ are run",
    ),
    "list": ("inspect", "cmd_list", "scenarios and arms"),
    "report": (
        "inspect",
        "cmd_report",
        "the records of results files (default: the newest) as a table, "
        "summary or JUnit; --full FILE[:LINE]: one record in full",
    ),
}


def _shared_flags() -> dict[str, argparse.ArgumentParser]:
    """Parent parsers: the flags several commands share, declared once."""
    jobs = argparse.ArgumentParser(add_help=False)
    jobs.add_argument(
        "--jobs",
        type=int,
        help="runs at once (each run starts ranks processes); default: what fits, 1 on CPU, on CUDA the visible "
        "GPUs // the largest cell's ranks (each CUDA run holds GPUs of its own)",
    )
    jobs.add_argument(
        "--unsandboxed",
        action="store_true",
        help="run code from outside the installed verl (a patch, a PR, a verl tree) without the OS sandbox, where "
        "this host cannot make one (docs/SANDBOX.md); HARNESS_UNSANDBOXED=1 says the same",
    )
    runs = argparse.ArgumentParser(add_help=False, parents=[jobs])
    runs.add_argument("--scenario", action="append", help="only this scenario (repeatable)")
    runs.add_argument("--json", help="also write the records as one JSON list to this file")
    runs.add_argument("--keep-traces", action="store_true", help="keep each rank's profiler trace")
    return {"jobs": jobs, "runs": runs}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    shared = _shared_flags()
    parents = {
        "repro": "runs",
        "verify": "runs",
        "run": "runs",
        "matrix": "runs",
        "sweep": "runs",
        "bench": "jobs",
        "noise-floor": "runs",
        "releases": "jobs",
        "upstream": "jobs",
        "pr": "runs",
    }
    p = {
        name: sub.add_parser(name, help=help_, parents=[shared[parents[name]]] if name in parents else [])
        for name, (_, _, help_) in COMMANDS.items()
    }
    for name in ("repro", "verify", "matrix"):
        p[name].add_argument(
            "--ray",
            metavar="ADDRESS",
            help="run every cell as a task of this Ray cluster (`auto`: the one RAY_ADDRESS or this host names); "
            "--jobs is then Ray's to decide (docs/RAY.md)",
        )
    p["releases"].add_argument(
        "--ray", metavar="ADDRESS", help="refused: release environments are built on this host and do not travel"
    )
    _verl_tree_flags(p)
    _command_flags(p)
    return parser


def _verl_tree_flags(p: dict):
    """--verl on every command but pr (whose verl is its range's base) and bisect (whose verls are its range's
    commits), and their own arguments."""
    for parser in (parser for name, parser in p.items() if name not in ("pr", "bisect")):
        parser.add_argument(
            "--verl",
            metavar="PATH[@REF]",
            help="run on the verl of this source tree (a checkout's root; @REF: a commit, branch or tag in it) instead "
            "of the installed one, in an environment of its own (plan/verl_trees.py); the Makefile's VERL=",
        )
    p["pr"].add_argument("--nightly", action="store_true", help="the scenarios tagged nightly too")
    p["pr"].add_argument(
        "--fresh",
        action="store_true",
        help="run the base's cells again, not reused from an earlier run (verify's --fresh)",
    )
    _reach_flag(p["pr"], PR_REACH_SECONDS)
    p["pr"].add_argument("checkout", help="a verl checkout (a git repository)")
    p["pr"].add_argument(
        "range", help="BASE..HEAD (the diff between them, on BASE) or BASE...HEAD (from the merge base)"
    )
    p["bisect"].add_argument("checkout", help="a verl checkout (a git repository)")
    p["bisect"].add_argument("range", help="GOOD..BAD: GOOD an ancestor of BAD, their outcomes different")
    p["bisect"].add_argument("--scenario", action="append", help="the one scenario whose cell is searched")
    p["bisect"].add_argument("--arm", help="the arm (default upstream): its diffs on every commit's verl")


def _reach_flag(p, default: float):
    """--reach-seconds of pr and verify (commands/reach.py): the time to look for scenarios that run changed code."""
    p.add_argument(
        "--reach-seconds",
        type=float,
        default=default,
        help="where changed lines or branches ran in no default scenario, look this long for scenarios that run "
        f"them (the nightly ones, variants of the nearest) and judge the change there too (default {default:.0f}; "
        "0: no reach)",
    )


def _command_flags(p: dict):
    """Each command's own flags (p: command name -> its subparser)."""
    p["verify"].add_argument("--patch", help="unified diff against verl; its arm is named after the file stem")
    p["verify"].add_argument("--alone", action="store_true", help="do not run arms none and upstream beside it")
    p["verify"].add_argument(
        "--fresh",
        action="store_true",
        help="run none and upstream again even where an earlier run on this host had the same inputs "
        "(by default their records are reused: docs/TIME.md)",
    )
    p["verify"].add_argument(
        "--nightly",
        action="store_true",
        help="also the scenarios tagged nightly (minutes a cell; make test leaves them out)",
    )
    _reach_flag(p["verify"], 0.0)
    _verdict_flags(p)
    p["run"].add_argument("--arm", action="append", help="arm name or diff path, a+b joins (default upstream)")
    p["rerun"].add_argument("record")
    p["sweep"].add_argument("--family", action="append", help="only this model_type (e.g. qwen2_5_vl)")
    p["sweep"].add_argument("--arm", action="append", help="only this arm of the expectations (repeatable)")
    p["releases"].add_argument("--release", action="append", help="only this verl version (repeatable)")
    p["releases"].add_argument("--scenario", action="append", help="only this scenario (repeatable)")
    p["releases"].add_argument(
        "--compile",
        action="store_true",
        help="resolve each release's constraints/verl-<version>.txt again (needs the registry)",
    )
    _bench_flags(p["bench"])
    p["noise-floor"].add_argument("--arm", default="fsdp2-lmhead-forward")
    p["noise-floor"].add_argument("--seeds", type=int, default=3)
    _upstream_flags(p["upstream"])
    p["stop"].add_argument("--all", action="store_true", help="every checkout's kept parents, not this one's only")
    p["patch"].add_argument("action", choices=("start", "diff"))
    p["patch"].add_argument("dir", help="the copy's directory (start: must not exist yet)")
    _import_flags(p["import"])
    p["sensitivity"].add_argument("scenario", nargs="*", help="update scenarios (default: every one with steps > 0)")
    p["list"].add_argument("--names", action="store_true", help="only the scenario names, one a line")
    p["report"].add_argument("results", nargs="*", help="results files: JSON lines, or the JSON list of --json")
    p["report"].add_argument(
        "--format",
        choices=("table", "wide", "summary", "junit"),
        default="table",
        help="table: 120 columns, and the pictures next to results/latest.md; wide: every "
        "number; summary: markdown with drift from scenarios/expectations.yaml; junit",
    )
    p["report"].add_argument("--title", help="heading of the summary, name of the JUnit test suite")
    p["report"].add_argument(
        "--full",
        action="store_true",
        help="one record (FILE or FILE:LINE): the whole error, the root rank's traceback tail, "
        "the diagnosis and the rank logs' paths",
    )


def _import_flags(p):
    """harness import's flags (commands/importer.py, commands/import_survey.py)."""
    p.add_argument(
        "file", nargs="?", help="a verl run script (python3 -m verl.trainer.main_ppo ...) or key=value lines"
    )
    p.add_argument("--examples", metavar="DIR", help="verl's examples/: every FSDP script answered, a table")
    p.add_argument("--out", help="the scenario file to write (default scenarios/<file stem>.yaml)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument(
        "--model", help="the tiny model to run (models/NAME.json), where the script's model path names no family"
    )
    p.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help="a variable the environment gives the script (DEVICE=gpu); none by default (repeatable)",
    )


def _verdict_flags(p: dict):
    """How verify judges and writes its verdict: --differential (against the base, harness pr's), pr's own --pr,
    --comment on verify and pr."""
    p["verify"].add_argument(
        "--differential",
        action="store_true",
        help="judge what the patch changes against upstream run beside it (harness pr's verdict): exit 1 only "
        "where it fails anew, not for the failures it leaves as upstream has them (docs/PR.md)",
    )
    p["verify"].add_argument(
        "--absolute",
        action="store_true",
        help="the absolute verdict: every failure counts but a known verl defect's, upstream's own failures in code "
        "the patch does not touch too (the default leads with what the patch changes against upstream beside it)",
    )
    # harness pr's own: the checkout and range it judges (implies --differential; the comment's reproduce line)
    p["verify"].add_argument("--pr", nargs=2, metavar=("CHECKOUT", "RANGE"), help=argparse.SUPPRESS)
    for name in ("verify", "pr"):
        p[name].add_argument(
            "--comment",
            metavar="FILE",
            help="also write the verdict as a markdown pull request comment body to FILE (docs/PR.md)",
        )


def _bench_flags(bench):
    """bench's flags: the tiny model's cells and projection, and the lm_head unit alone (--real-size, --head-*)."""
    bench.add_argument("--repeat", type=int, default=5, help="timed steps per run after one warm-up")
    bench.add_argument(
        "--bandwidth", type=float, default=DEFAULT_BANDWIDTH_GBPS, help="bus bandwidth in GB/s for the projection"
    )
    bench.add_argument("--world", type=int, nargs="+", default=[8, 64], help="world sizes to project to")
    bench.add_argument(
        "--real-size",
        action="store_true",
        help="also measure the lm_head unit alone at Qwen3-VL-8B's and 32B's sizes (many GB: each cell checks first)",
    )
    bench.add_argument(
        "--head-size", action="append", help="also measure the lm_head unit alone at HIDDENxVOCAB (repeatable)"
    )
    bench.add_argument("--head-world", type=int, nargs="+", help="world sizes of the head cells (default 2 4)")
    bench.add_argument("--head-tokens", type=int, help="tokens per rank of the head cells (default 256)")
    bench.add_argument(
        "--head-precision",
        nargs="+",
        choices=("fp32", "bf16-mixed"),
        help="precisions of the head cells (default fp32 bf16-mixed)",
    )
    bench.add_argument("--head-only", action="store_true", help="only the head cells, not the tiny model's")
    bench.add_argument(
        "--head-timeout-s",
        type=float,
        default=7200.0,
        help="wall-clock limit of one path's launch in a head cell (default 7200)",
    )


def main(argv=None) -> int:
    from harness.render.untrusted import TerminalStream

    # Every line the command prints may carry text from a pull request or a rank: shown escaped, never as control
    # sequences (render/untrusted.py terminal_text), and a lone surrogate in it never fails the print.
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalStream(sys.stdout), TerminalStream(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from harness.processes import client

    keep = os.environ.setdefault(client.KEEP, client.keep_default())
    try:
        client.keep_s()
    except ValueError:
        print(f"error: {client.KEEP}={keep!r}: not a number of seconds (0: no parent is kept)", file=sys.stderr)
        return EXIT_NOT_JUDGED
    if getattr(args, "unsandboxed", False):
        os.environ["HARNESS_UNSANDBOXED"] = "1"  # launch/sandboxing.py; a verl tree's command inherits it
    from harness.run.interrupt import Interrupted

    guard = None
    try:
        _on_verl_tree(args, argv)  # a verl tree of its own: this command runs again there (exec), or goes on here
        if os.environ.get(VERL_TREE_ENV):  # the tree's verl is importable here: the driver never imports it
            guard = refuse_verl()
        module, function, _ = COMMANDS[args.command]
        return getattr(importlib.import_module(f"harness.commands.{module}"), function)(args)
    except VerlImportRefused as exc:  # the driver reached for the tree's code (harness/driver_guard.py)
        traceback.print_exc()
        print(f"error: {exc} (exit {EXIT_CRASH})", file=sys.stderr)
        return EXIT_CRASH
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Interrupted as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:  # before any run was launched (arms being materialised, say): nothing to keep
        print("interrupted: no run was started", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:  # a defect of the harness (or its host), never a verdict on the code under test
        traceback.print_exc()
        print(f"error: the harness itself failed (exit {EXIT_CRASH}): nothing was judged", file=sys.stderr)
        return EXIT_CRASH
    finally:
        if guard is not None:
            lift_refusal(guard)


def _on_verl_tree(args, argv: list[str]):
    """--verl PATH[@REF] (or the Makefile's VERL=): the command runs on that verl tree (plan/verl_trees.py enter),
    unless it already does (HARNESS_VERL_TREE set, by enter itself)."""
    tree = getattr(args, "verl", None) or os.environ.get(VERL_SPEC_ENV)
    if tree and not os.environ.get(VERL_TREE_ENV):
        from harness.plan.verl_trees import enter

        enter(tree, without_verl_flag(argv))


def _upstream_flags(p):
    """harness upstream's flags (commands/upstream.py)."""
    p.add_argument("names", nargs="*", help="findings of findings/findings.yaml (default: every one)")
    p.add_argument("--out", help="the directory to write (default results/upstream)")
    p.add_argument(
        "--verl-repo", help="verl's git repository, for refs git:REF and pr-base:REF (default $HARNESS_VERL_REPO)"
    )
    p.add_argument("--no-cells", action="store_true", help="no harness cells in the reports")
    p.add_argument(
        "--test-timeout-s", type=float, default=1200, help="per pytest run of a package's test (default 1200)"
    )
    p.add_argument(
        "--timeout-s", type=float, help="per-cell timeout in place of the scenarios' own, for a loaded host (recorded)"
    )
    p.add_argument(
        "--no-report",
        action="store_true",
        help="write and check each package's test and fix.diff only: no runs, no reports",
    )


def without_verl_flag(argv: list[str]) -> list[str]:
    """The command line less its --verl PATH (or --verl=PATH): the command as it runs again in the tree's env."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--verl":
            skip = True
        elif not word.startswith("--verl="):
            out.append(word)
    return out
