"""Progress on stderr while a command reads an export: one line, rewritten in place, on a terminal only; and the
warnings that a cache cannot be used (reading.messages.CacheWarning) and the notes about the profiles given
(reading.messages.Note), each once, as lasting lines, on a terminal or not."""

from __future__ import annotations

import sys
import threading
import time

from ..base.errors import full_stop, one_line
from ..reading.messages import CacheWarning, Note
from .interrupt import StopRequest, reached


class Progress:
    """Call it with each stage; every call also checks for a stop request (Ctrl-C that DuckDB swallowed).
    `clear()` wipes the line before the command writes its result or its error."""

    def __init__(self, stop: StopRequest, *, quiet: bool = False, prog: str = "diagnose", lines: bool = True) -> None:
        """`lines`: show the stages (on a terminal); without, only the warnings are written."""
        self.stop, self.quiet, self.prog = stop, quiet, prog
        self.shown = lines and not quiet and sys.stderr.isatty()
        self._start = time.monotonic()
        self._warned: set[str] = set()
        self._lock = threading.Lock()  # the ranks of a run report from threads of their own

    def __call__(self, stage: str) -> None:
        self.stop.check()
        if isinstance(stage, CacheWarning):
            self.warn(stage)
            return
        if isinstance(stage, Note):
            self.note(stage)
            return
        reached(stage)
        if self.shown:
            sys.stderr.write(f"\r\x1b[2K[{time.monotonic() - self._start:5.1f}s] {stage}")
            sys.stderr.flush()

    def warn(self, text: str) -> None:
        """`prog: warning: text.` on a line of its own that stays, once per text (the ranks of a run, or the two
        profiles of a comparison, share one cache directory); nothing with --quiet."""
        self._lasting("warning", text)

    def note(self, text: str) -> None:
        """`prog: note: text.`, as a warning is written: what the user should know about the profiles given (a
        trace left out of a run, one rank of a run diagnosed alone), which changes nothing in the report."""
        self._lasting("note", text)

    def _lasting(self, kind: str, text: str) -> None:
        with self._lock:
            if self.quiet or text in self._warned:
                return
            self._warned.add(text)
            self.clear()
            sys.stderr.write(f"{self.prog}: {kind}: {full_stop(one_line(text))}\n")
            sys.stderr.flush()

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[2K")
