"""Python source parsed by the driver one thread at a time. CPython 3.11 keeps the AST converter's recursion counter
in interpreter-wide state, so two threads in ast.parse at once can fail one of them with a spurious "SystemError: AST
constructor recursion depth mismatch" (the error CPython's gh-106905 is about). The driver has two such threads:
verify's background matplotlib import (its rcParams validation parses colour and cycler strings) and the main
thread, which parses verl sources while it plans arms and judges the fused head's memory; make test met it at
3.11.7 as a crashed verify (exit 3). Every ast.parse of the driver, coverage.py's parser of a changed file, and the
background import hold PARSE_LOCK."""

from __future__ import annotations

import threading

PARSE_LOCK = threading.Lock()  # not reentrant: nothing parses while holding it through this module again


def parse(text: str, mode: str = "exec"):
    """ast.parse(text, mode=mode) while no other thread of the driver parses."""
    import ast

    with PARSE_LOCK:
        return ast.parse(text, mode=mode)
