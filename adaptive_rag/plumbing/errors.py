"""The user's mistakes, as exception types: every command ends on one of them in one line and exit status 2
(:func:`adaptive_rag.plumbing.cli.run_cli`), never in a traceback."""

from __future__ import annotations

from typing import Any


class DataError(ValueError):
    """Bad input data. The message names the file, the line or record, and the field."""

    def __init__(self, message: str, *, source: str | None = None, record: Any = None, field: str | None = None):
        where = []
        if source is not None:
            where.append(str(source))
        if record is not None:
            where.append(f"record {record}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)
        self.source, self.record, self.field = source, record, field


class ConfigError(ValueError):
    """A configuration file or override that names a field wrongly or has a bad value."""


class ModelNotFoundError(OSError):
    """A model name that is neither embedded, nor a local folder, nor reachable on the hub."""


# Path mistakes (a file where a folder belongs, a folder without write permission) are the user's, like a missing
# file; other OSErrors stay tracebacks.
PATH_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that are a user's mistake (``DataError`` includes FolderInUseError: a locked or mismatched
    folder)."""
    return (ConfigError, DataError, ModelNotFoundError, *PATH_ERRORS)
