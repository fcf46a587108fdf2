"""Stopping the command-line tools: Ctrl-C (SIGINT), SIGTERM (`kill`, `timeout`, a CI job cancelled) and SIGHUP
(the terminal went away) all stop a run the same way, so every temporary file and partial cache is removed."""

from __future__ import annotations

# `_signal` is the C module inside `signal`, built into the interpreter: importing `signal` itself first builds its
# enums, a few milliseconds at start-up during which Ctrl-C would still raise a KeyboardInterrupt with a traceback.
import _signal
import os

STOP_SIGNALS = tuple(s for s in (_signal.SIGINT, getattr(_signal, "SIGTERM", None), getattr(_signal, "SIGHUP", None))
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
        return 128 + (self.signum or _signal.SIGINT)

    @property
    def description(self) -> str:
        if self.signum in (None, _signal.SIGINT):
            return "interrupted"
        import signal

        return f"stopped by {signal.Signals(self.signum).name}"

    def __enter__(self) -> "StopRequest":
        def handler(signum: int, frame: object) -> None:
            first = self.signum is None
            self.signum = self.signum or signum
            if first and not self._defer:
                raise KeyboardInterrupt

        for sig in STOP_SIGNALS:
            # A run started with a signal ignored (nohup, a background job of a script) keeps ignoring it.
            if _signal.getsignal(sig) != _signal.SIG_IGN:
                try:
                    self._previous[sig] = _signal.signal(sig, handler)
                except ValueError:  # not the main thread: only the main thread handles signals
                    break
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            _signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


# For tests that stop a run at a known point instead of after a guessed delay: when this names a file, every stage
# the command line reaches ("starting", as the stop handlers are in place and before the heavy imports; then each
# progress stage, such as "reading CUPTI_ACTIVITY_KIND_KERNEL") is appended to it as one line, so a test can wait for
# the stage it wants, then signal.
READY_FILE_ENV = "NSYS_DIAGNOSE_TEST_READY_FILE"


def reached(stage: str) -> None:
    path = os.environ.get(READY_FILE_ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            os.write(fd, (" ".join(stage.split()) + "\n").encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def exit_on_stop_signals() -> None:
    """Once a command has returned its exit code there is nothing left to clean up: a stop signal from then until
    the process is gone ends it at once with 128 + N, instead of Python printing a KeyboardInterrupt traceback."""
    for sig in STOP_SIGNALS:
        if _signal.getsignal(sig) != _signal.SIG_IGN:
            try:
                _signal.signal(sig, lambda signum, _frame: os._exit(128 + signum))
            except ValueError:  # not the main thread
                return


_STARTING: StopRequest | None = None


def starting(early: list[int] | None = None) -> StopRequest:
    """The stop request in charge while the command line starts (imports, argument parsing), until a command's
    own StopRequest takes over: deferred, so Ctrl-C, SIGTERM or SIGHUP during an import is only recorded, and
    main() stops with 128 + N as soon as it runs. Entered on the first call; the entry points call it before
    importing anything else. `early`: signals the entry point recorded before this module was loaded."""
    global _STARTING
    if _STARTING is None:
        _STARTING = StopRequest(defer=True).__enter__()
        reached("starting")
    if early and _STARTING.signum is None:
        _STARTING.signum = early[0]
    return _STARTING
