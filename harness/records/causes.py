"""A failing record's cause in words shared by every cell it explains: what verify groups a patch's failures by
(judge/patch_verdict.py) and the pictures number them by (render/pictures.py). It reads the record alone, so every
room may call it."""

from __future__ import annotations

import re

from harness.records.results import Record

CAUSE_CHARS = 140  # a cause in verify's closing block, one line
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"


def cause_of(record: Record) -> str:
    """The cause of a failing record in words shared by every cell it explains: its why (judge/diagnosis.py,
    update_verdict.py) less the numbers that differ from cell to cell (W, errors, steps, source lines), or for a
    known failure its public reference and class; verify groups its failures by this."""
    diagnosis = record.verdict.diagnosis.error if record.verdict.diagnosis else None
    if record.outcome == "error" and diagnosis and diagnosis.reference:
        return f"{diagnosis.reference} ({diagnosis.error_class})" if diagnosis.error_class else diagnosis.reference
    if record.outcome == "error" and diagnosis and diagnosis.error_class and diagnosis.text:
        # A classed error: its words keep their numbers (the finding, e.g. 1 placement on a 2-D mesh), less where
        # it raised and the mesh's shape, cut to a line.
        text = re.sub(r"\s*\((?:in \w+, [\w.]+:\d+)\)|\s*\(\d+(?:, \d+)+\)", "", diagnosis.text.split("; ")[0])
        text = text.split(": a DTensor needs", 1)[0]
        return text if len(text) <= CAUSE_CHARS else text[: CAUSE_CHARS - 1] + "…"
    why = record.verdict.why or ""
    if not why and record.verdict.error:
        why = f"{record.verdict.error.type}: {record.verdict.error.message}"
    if not why:
        why = record.verdict.failures[0] if record.verdict.failures else record.outcome
    first = re.sub(r" \(\+\d+ more\)$", "", why.split("; ")[0])
    # an update's why (judge/update_verdict.py): what was wrong first, less its numbers
    first = re.sub(rf"^grad_norm: verl {_NUMBER}, oracle {_NUMBER}[^:]*\)", "verl's grad_norm", first)
    first = re.sub(r" \(verl's norm x[^)]*\)", "", first)
    # the samples wrong (judge/diagnosis.py row_diagnosis): which ones and their numbers differ from cell to cell
    first = re.sub(r"wrong in samples .*?\), right in .*?\(max diff [^)]*\)", "wrong in some samples", first)
    first = re.sub(r" \(response_mask dense \d+x\d+\)", "", first)
    first = re.sub(r"( wrong before the clip) \(rel\. [^)]*\)", r"\1", first)  # the gradients' errors and place
    first = re.sub(rf"\s*=\s*{_NUMBER}", "", first)  # "(x W = 8)" -> "(x W)"
    first = re.sub(r"\s*\((?:in \w+, [\w.]+:\d+|residual [^()]*)\)", "", first)  # where it raised; fit residuals
    first = re.sub(r",? at step \d+(?:, epoch \d+)?(?:, mini-batch \d+)?", "", first)
    first = re.sub(rf":? (?:relative error|error|differs? by) {_NUMBER} > {_NUMBER}", "", first)
    first = re.sub(rf"(?<![\w./]){_NUMBER}(?![\w./])", "N", first)
    return first.strip() or record.outcome
