"""Errors that reach the user as one sentence and exit code 2 (never a traceback)."""


class DiagnoseError(Exception):
    """Base class: the message is a complete sentence saying what is wrong and what to do."""


class InputError(DiagnoseError):
    """The profile given cannot be read as an Nsight Systems export."""


class SetupError(DiagnoseError):
    """The installation itself is broken (e.g. mismatched DuckDB extension)."""


class OutputError(DiagnoseError):
    """The report cannot go where -o says: it would overwrite an input, or the place cannot hold a file."""
