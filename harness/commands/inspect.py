"""list and report: what there is to run, and what ran."""
from __future__ import annotations

from pathlib import Path

from harness.spec.scenario import load_all


def cmd_list(args) -> int:
    if args.names:  # one scenario name a line: the nightly workflow's matrix is built from it
        print("\n".join(s.name for s in load_all()))
        return 0
    from harness.driver.arms import known_arms

    for s in load_all():
        extras = [k for k in ("compile", "cpu_offload", "forward_only") if getattr(s, k)]
        print(f"{s.name:<24} ranks={s.ranks} device={s.device} precision={s.precision} "
              f"{' '.join(extras)}  {s.description}".rstrip())
    print("arms: " + ", ".join(known_arms()))
    return 0


def cmd_report(args) -> int:
    """The records of one or more results files (JSON lines, or the JSON list of --json) as a table, a markdown
    summary with drift from scenarios/expectations.yaml (CI's step summary), or JUnit XML."""
    from harness.driver.records import load_records, newest_results_file
    from harness.render.ci import junit_xml, summary_markdown
    from harness.render.tables import summary_counts, verdict_table, versions_line

    paths = [Path(p) for p in args.results] or [newest_results_file()]
    records = [r for path in paths for r in load_records(path)]
    if args.format == "summary":
        print(summary_markdown(records, title=args.title), end="")
    elif args.format == "junit":
        print(junit_xml(records, title=args.title), end="")
    else:
        print(f"{verdict_table(records)}\n\n{summary_counts(records)}\n{versions_line(records)}")
    return 0
