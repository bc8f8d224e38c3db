"""Errors the CLI turns into a one-line message and exit code 2 (usage or setup problems, not findings), and the
one way a validation error becomes such a line."""


class UsageError(Exception):
    exit_code = 2


def first_error_line(where: str, exc: Exception, *, within: tuple = (), top: str = "(top level)") -> str:
    """ "WHERE: field 'a.b': MESSAGE" for the first error of a pydantic ValidationError (any other exception: its
    text, at `within`). within: the path of the validated mapping inside its file; top: the field named when the
    error is about the whole mapping."""
    errors = getattr(exc, "errors", None)
    first = errors()[0] if callable(errors) else {"loc": (), "msg": str(exc)}
    field = ".".join(str(part) for part in (*within, *first["loc"])) or top
    return f"{where}: field '{field}': {first['msg']}"
