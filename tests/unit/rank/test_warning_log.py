"""rank/warning_log.py: every warning a rank raises is kept once, with how often, where and of what kind."""

from __future__ import annotations

import warnings

from harness.rank.warning_log import WarningLog


def _warn_from_one_line(text, category=UserWarning):
    warnings.warn(text, category, stacklevel=1)


def test_warnings_are_kept_once_each_with_their_count_and_place(monkeypatch):
    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown.append(str(message)))
    log = WarningLog().start()
    for _ in range(3):
        _warn_from_one_line("returned a view tensor")
    _warn_from_one_line("an old API", DeprecationWarning)  # Python hides these by default; a rank keeps them
    entries = log.stop()
    assert [(e["category"], e["message"], e["count"]) for e in entries] == [
        ("UserWarning", "returned a view tensor", 3),
        ("DeprecationWarning", "an old API", 1),
    ]
    assert all(e["where"].startswith(__file__ + ":") for e in entries)
    assert shown == ["returned a view tensor", "an old API"]  # still shown as Python would, once each


def test_stop_gives_back_pythons_own_handling():
    before = warnings.showwarning
    WarningLog().start().stop()
    assert warnings.showwarning is before
