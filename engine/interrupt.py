"""Ctrl-C for the command-line tools: a SIGINT handler that also remembers the request."""

from __future__ import annotations

import signal
import threading


class StopRequest:
    """Ctrl-C that lands just as a DuckDB query finishes can be consumed by DuckDB and lost; this handler
    also remembers it, and every progress step (and the end of the run) checks, so the run always stops."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: object = None

    def __enter__(self) -> "StopRequest":
        def handler(signum: int, frame: object) -> None:
            self.requested = True
            raise KeyboardInterrupt

        # A run started with Ctrl-C ignored (nohup, a background job of a script) keeps ignoring it.
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._previous = signal.signal(signal.SIGINT, handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt
