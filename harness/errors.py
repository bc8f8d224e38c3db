"""Errors the CLI turns into a one-line message and exit code 2 (usage or setup problems, not findings)."""


class UsageError(Exception):
    exit_code = 2
