"""Errors that reach the user as one sentence and exit code 2 (never a traceback), and that sentence."""

from __future__ import annotations

from .text import strip_controls

# The start of the sentence for a bug in nsys-diagnose (exit code 3, a batch row's error), never a finding.
INTERNAL = "internal error: "
OUT_OF_MEMORY = ("ran out of memory; close other programs, raise the memory limits of this shell (ulimit), or "
                 "diagnose on a machine with more memory.")


class DiagnoseError(Exception):
    """Base class: the message is a complete sentence saying what is wrong and what to do."""


class InputError(DiagnoseError):
    """The profile given cannot be read as an Nsight Systems export."""


class SetupError(DiagnoseError):
    """The installation itself is broken (e.g. mismatched DuckDB extension)."""


class OutputError(DiagnoseError):
    """The report cannot go where -o says: it would overwrite an input, or the place cannot hold a file."""


def one_line(text: object) -> str:
    """Text for the terminal or a results row: control characters, escape sequences and bidi overrides of file
    names and other untrusted text made inert (as in the reports), on one line."""
    return " ".join(strip_controls(text).split())


def full_stop(text: str) -> str:
    """`text` ending in one full stop, for a sentence that goes on after it: a message that already ends in `.`,
    `!` or `?` keeps its own mark instead of gaining a second one ("empty.." never)."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else f"{text}."


def error_sentence(exc: BaseException, *, bug: bool = False) -> str:
    """What went wrong, as the one line a command prints after "error: " (engine/cli/exits.py) and a batch row
    holds (engine/runs/batch.py): a DiagnoseError's own sentence, running out of memory, "FILE: reason" of an OSError,
    else "internal error: TYPE: message", a bug and never a finding. With `bug`, whatever `exc` is, the sentence
    starts "internal error: " (a worker that could not send its row back)."""
    if isinstance(exc, DiagnoseError):
        text = one_line(exc)
    elif isinstance(exc, MemoryError):
        text = OUT_OF_MEMORY
    elif isinstance(exc, OSError):
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        text = one_line(f"{where}{exc.strerror or exc}")
    else:
        text = f"{INTERNAL}{type(exc).__name__}: {one_line(exc)[:300]}"
    return f"{INTERNAL}{text.removeprefix(INTERNAL)}" if bug else text


class PackError(DiagnoseError):
    """A knowledge pack, bundled or a team's, is broken: a rule, a fact, or a vocabulary file (categories,
    headlines, operation classes, stacks, API names, metrics). The message starts with FILE:LINE:COL where the file
    says where, and tells what to change. Every pack loader raises a subclass of it, so a caller that loads a pack
    catches this one type."""
