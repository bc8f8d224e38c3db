"""Errors the CLI turns into a one-line message and exit code 2 (usage or setup problems, not findings), and the
one way a validation error becomes such a line.

The exit codes, by name (EXIT_OK 0, EXIT_COUNTED 1: a finding, EXIT_NOT_JUDGED 2: usage, setup, nothing judged,
EXIT_CRASH 3: the harness itself crashed, EXIT_INTERRUPTED 130); `UsageError` (one line, exit 2); `HarnessFailure` (one
line, exit 3: a cached tree gone under a cell); `first_error_line`, how a validation error becomes that line."""

# The exit codes of every command (verify, pr, bisect, import, upstream, ...), one table (docs/PR.md "Exit codes"):
EXIT_OK = 0  # judged, and nothing counted against what was judged
EXIT_COUNTED = 1  # judged, and a failure counted (a patch fails, a PR breaks a scenario, a finding does not hold)
EXIT_NOT_JUDGED = 2  # usage or setup error, or nothing could be judged here
EXIT_CRASH = 3  # the harness itself crashed: says nothing about the code under test (never 1, "breaks")
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM


class UsageError(Exception):
    exit_code = EXIT_NOT_JUDGED


def first_error_line(where: str, exc: Exception, *, within: tuple = (), top: str = "(top level)") -> str:
    """ "WHERE: field 'a.b': MESSAGE" for the first error of a pydantic ValidationError (any other exception: its
    text, at `within`). within: the path of the validated mapping inside its file; top: the field named when the
    error is about the whole mapping."""
    errors = getattr(exc, "errors", None)
    first = errors()[0] if callable(errors) else {"loc": (), "msg": str(exc)}
    field = ".".join(str(part) for part in (*within, *first["loc"])) or top
    return f"{where}: field '{field}': {first['msg']}"


class HarnessFailure(UsageError):
    """One line, exit 3: the harness's own ground gave way mid-run (a cached tree deleted under a cell, say); the
    outcome of the cell it hit says nothing of the code under test, so nothing is judged (never 1, "breaks")."""

    exit_code = EXIT_CRASH
