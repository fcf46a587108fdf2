"""The console script `diagnose` (and `python -m nsys_diagnose.cli`) starts here, in a module this small so that the
stop signals are caught a moment after Python hands over: Ctrl-C, SIGTERM or SIGHUP while the rest of the program is
imported is recorded and ends the run with 128 + N, never with a traceback (engine/cli/interrupt.py)."""

import _signal  # built into the interpreter: nothing to load before the handlers are in place

_EARLY: list[int] = []


def _record(signum: int, _frame: object) -> None:
    _EARLY.append(signum)


for _sig in (_signal.SIGINT, getattr(_signal, "SIGTERM", None), getattr(_signal, "SIGHUP", None)):
    if _sig is not None and _signal.getsignal(_sig) != _signal.SIG_IGN:
        _signal.signal(_sig, _record)

from .interrupt import starting  # noqa: E402

starting(_EARLY)  # takes over, counting a signal recorded so far

from .main import run  # noqa: E402  (most of the start-up time)

__all__ = ["run"]
