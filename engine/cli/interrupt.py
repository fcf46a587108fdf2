"""Stopping the command-line tools: Ctrl-C (SIGINT), SIGTERM (`kill`, `timeout`, a CI job cancelled) and SIGHUP
(the terminal went away) all stop a run the same way, so every temporary file and partial cache is removed."""

from __future__ import annotations

import signal
import threading

STOP_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
                     if s is not None)


class StopRequest:
    """A handler for the stop signals that also remembers the request. Ctrl-C that lands just as a DuckDB query
    finishes can be consumed by DuckDB and lost, so every progress step (and the end of the run) checks.

    The first signal raises KeyboardInterrupt where the program is; later ones are only recorded, so the clean-up
    that the first one started is not itself interrupted. `exit_code` is 128 + the signal number, as a shell
    reports a process killed by that signal (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP).

    With `defer`, no signal raises: the request is only recorded for `check`. That suits code that is short and
    must not be cut in the middle, such as importing C extensions, where an exception raised by a handler can be
    swallowed ("Exception ignored in ...") or turn into a misleading ImportError."""

    def __init__(self, *, defer: bool = False) -> None:
        self.signum: int | None = None
        self._defer = defer
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    @property
    def description(self) -> str:
        if self.signum in (None, signal.SIGINT):
            return "interrupted"
        return f"stopped by {signal.Signals(self.signum).name}"

    def __enter__(self) -> "StopRequest":
        def handler(signum: int, frame: object) -> None:
            first = self.signum is None
            self.signum = self.signum or signum
            if first and not self._defer:
                raise KeyboardInterrupt

        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                # A run started with a signal ignored (nohup, a background job of a script) keeps ignoring it.
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt
