"""Progress on stderr while a command reads an export: one line, rewritten in place, on a terminal only."""

from __future__ import annotations

import sys
import time

from .interrupt import StopRequest, reached


class Progress:
    """Call it with each stage; every call also checks for a stop request (Ctrl-C that DuckDB swallowed).
    `clear()` wipes the line before the command writes its result or its error."""

    def __init__(self, stop: StopRequest, *, quiet: bool = False) -> None:
        self.stop = stop
        self.shown = not quiet and sys.stderr.isatty()
        self._start = time.monotonic()

    def __call__(self, stage: str) -> None:
        self.stop.check()
        reached(stage)
        if self.shown:
            sys.stderr.write(f"\r\x1b[2K[{time.monotonic() - self._start:5.1f}s] {stage}")
            sys.stderr.flush()

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[2K")
