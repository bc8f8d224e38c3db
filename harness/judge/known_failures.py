"""Known failure signatures and their public references: the one table. An error whose text contains a signature
is that known failure; its why line (judge/diagnosis.py error_diagnosis) then ends with the entry's `why`: the
public reference, the cause and what avoids it. Data only: a new entry goes here, not into the matching code."""

from __future__ import annotations

KNOWN_FAILURES = (
    {
        "class": "no-sync-post-backward-without-forward",
        "signature": "'FSDPParam' object has no attribute '_unsharded_param'",
        "reference": "verl issue #7520",
        "why": "verl issue #7520: the weight was read outside lm_head's FSDP forward, so under no-sync accumulation "
        "FSDP2's post-backward finds the unit never unsharded; what avoids it: running the head through FSDP's "
        "forward (lm_head's own forward, as patches/fsdp2-lmhead-forward.diff does)",
    },
)


def known_failure(text: str) -> dict | None:
    """The known failure whose signature the error text contains, if any."""
    return next((k for k in KNOWN_FAILURES if k["signature"] in text), None)
