"""What CI shows of a batch of records: a markdown summary (GitHub's step summary) and JUnit XML.

Pure functions over records; no torch import, so a runner whose venv failed half-way can still render them.
A record is judged against scenarios/expectations.yaml where that names its scenario x arm (the same drift
`make matrix` exits 1 on); a record without an expectation (a `run` or `verify` of a new patch) fails when its
outcome is neither pass nor skipped.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from harness.records.results import Record
from harness.render.tables import COLUMNS, markdown_table, row, summary_counts, versions_line
from harness.render.untrusted import markdown_code, markdown_text

_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _expectations(expectations):
    if expectations is not None:
        return expectations
    from harness.inputs.expectations import load_expectations

    return load_expectations()


def judge_against_expectations(records: list[Record], expectations=None) -> list[tuple[Record, list[str] | None]]:
    """(record, drift problems) per record; problems is None where no expectation names its scenario x arm."""
    from harness.inputs.expectations import drift

    expected = _expectations(expectations)
    out = []
    for r in records:
        exp = (expected.get(r.scenario) or {}).get(r.arm)
        out.append((r, None if exp is None else drift(r, exp)))
    return out


def _one_line(text: str, width: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _versions_lines(records: list[Record]) -> list[str]:
    """One line per distinct stack: several results files (two constraint sets) may be summarised at once."""
    lines = []
    for r in records:
        line = versions_line([r])
        if line and line not in lines:
            lines.append(line)
    return lines


def summary_markdown(records: list[Record], expectations=None, title: str | None = None) -> str:
    judged = judge_against_expectations(records, expectations)
    drifted = [(r, p) for r, p in judged if p]
    unexpected = [r for r, p in judged if p is None]
    checked = len(judged) - len(unexpected)
    out = [f"## {title or 'fsdp2-harness verdicts'}", ""]
    if drifted:
        out.append(
            f"**DRIFT** in {len(drifted)} of {checked} cell(s) with an expectation (scenarios/expectations.yaml)"
        )
    elif checked:
        out.append(f"**As expected:** all {checked} cell(s) with an expectation")
    out += [f"**Outcomes** ({len(records)} run(s)): {summary_counts(records)}", ""]
    out += [f"Versions: {markdown_text(line)}  " for line in _versions_lines(records)]
    # GitHub renders the summary: a rank's words (an error, a why) are inert there (render/untrusted.py).
    table = markdown_table(COLUMNS, [[markdown_text(cell, 1000) for cell in row(r)] for r in records])
    out += ["", table, "", "### Drift from scenarios/expectations.yaml", ""]
    if drifted:
        for r, problems in drifted:
            for problem in problems:
                out.append(f"- {_cell_name(r)}: {markdown_text(problem, 400)}")
    elif checked:
        out.append(f"None: all {checked} cell(s) with an expectation are as expected.")
    else:
        out.append("No record has an expectation.")
    if unexpected:
        names = ", ".join(_cell_name(r) for r in unexpected)
        out += ["", f"Without an expectation ({len(unexpected)}; judged by outcome alone): {names}"]
    return "\n".join(out) + "\n"


def _cell_name(record: Record) -> str:
    return f"{markdown_code(record.scenario)} x {markdown_code(record.arm)}"


def _xml(text) -> str:
    """Text XML 1.0 can hold: a traceback may carry ANSI colours or other control characters."""
    return _NOT_XML.sub("?", _ANSI.sub("", str(text)))


def _detail(record: Record) -> str:
    lines = [f"outcome: {record.outcome}"]
    err = record.verdict.error
    if err:
        lines.append(
            f"error: {err.type}: {err.full_message or err.message}"
            + (f" (phase {err.phase}, rank {err.rank})" if err.phase else "")
        )
        root = err.root_cause
        if root and root.type and root.type != err.type:
            lines.append(f"root cause: {root.type}: {root.message}")
    if record.verdict.skipped_reason:
        lines.append(f"skipped: {record.verdict.skipped_reason}")
    lines += [f"failure: {words}" for words in record.verdict.failure_words()]
    parity = record.measures.parity
    if parity and parity.grad_worst_rel is not None:
        lines.append(f"worst grad rel err: {parity.grad_worst_rel} ({parity.grad_worst_param})")
    if err and err.traceback_tail:
        lines += ["", err.traceback_tail]
    return "\n".join(lines)


def _add_properties(parent, pairs):
    props = ET.SubElement(parent, "properties")
    for name, value in pairs:
        ET.SubElement(props, "property", name=name, value=_xml(value))


def junit_xml(records: list[Record], expectations=None, title: str | None = None) -> str:
    judged = judge_against_expectations(records, expectations)
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=title or "fsdp2-harness")
    stacks = {}
    for r in records:
        for k, v in ((r.stamp.versions or {}) | {"host": r.stamp.host, "harness": r.stamp.harness_commit}).items():
            if v and str(v) not in stacks.setdefault(k, []):
                stacks[k].append(str(v))
    _add_properties(suite, [(k, ", ".join(v)) for k, v in stacks.items()])
    failures = skipped = 0
    total_time = 0.0
    for r, problems in judged:
        wall = r.wall_s if isinstance(r.wall_s, (int, float)) else 0.0
        total_time += wall
        case = ET.SubElement(suite, "testcase", classname=_xml(r.scenario), name=_xml(r.arm), time=f"{wall:.3f}")
        _add_properties(
            case,
            [
                ("outcome", r.outcome),
                ("world_size", r.world_size),
                ("device", f"{r.device}/{r.backend}"),
            ]
            + [(k, v) for k, v in (r.stamp.versions or {}).items() if v],
        )
        detail = _detail(r)
        outcome = r.outcome
        if problems:
            failures += 1
            node = ET.SubElement(case, "failure", type="drift", message=_xml(_one_line("; ".join(problems))))
            node.text = _xml("drift from scenarios/expectations.yaml:\n" + "\n".join(problems) + "\n\n" + detail)
        elif problems is None and outcome not in ("pass", "skipped"):
            failures += 1
            err = r.verdict.error
            message = (
                f"{outcome}: {err.type}: {err.message}"
                if err
                else f"{outcome}: {'; '.join(r.verdict.failure_words()[:3])}"
            )
            node = ET.SubElement(case, "failure", type=str(outcome), message=_xml(_one_line(message)))
            node.text = _xml(detail)
        elif outcome == "skipped":
            skipped += 1
            ET.SubElement(case, "skipped", message=_xml(_one_line(r.verdict.skipped_reason or "skipped")))
        else:
            first, _, rest = detail.partition("\n")
            note = " (as expected)" if problems is not None else ""
            ET.SubElement(case, "system-out").text = _xml(f"{first}{note}\n{rest}".rstrip("\n"))
    suite.set("tests", str(len(records)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    suite.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
