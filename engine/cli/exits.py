"""Exit codes and the last word of every command: what went wrong, as one line, and a code CI can act on.
EXIT_MEANINGS says what each code means to each command; 141 (SIGPIPE) comes quietly when the reader of
standard output went away (`| head`).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from ..base.errors import DiagnoseError, error_sentence, full_stop, one_line
from .interrupt import StopRequest

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERNAL, EXIT_PROGRAM_FAILED = 0, 1, 2, 3, 4
SIGPIPE = 13  # the signal number on every POSIX system; signal.SIGPIPE does not exist on Windows

_BUG = "internal error (a bug: rerun with --debug and report it)"
_SIGNALS = "stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)"
# What each exit code means to each command: the one table behind every `--help` (exit_codes_help) and the
# module docstrings; docs/usage.md explains the same codes at length.
EXIT_MEANINGS: dict[str, tuple[tuple[str, str], ...]] = {
    "diagnose": (("0", "success"), ("1", "a finding at or above --fail-on"), ("2", "usage, input or rule error"),
                 ("3", _BUG), ("128+N", _SIGNALS)),
    "profile": (("0", "success"), ("1", "a finding at or above --fail-on"), ("2", "usage, input or rule error"),
                ("3", _BUG), ("4", "the program failed (its partial capture is still diagnosed and reported)"),
                ("128+N", _SIGNALS.replace(")", "; after one Ctrl-C the partial capture is diagnosed and reported "
                                                 "first)"))),
    "compare": (("0", "success"), ("1", "a gate crossed"), ("2", "usage, input or rule error"), ("3", _BUG),
                ("128+N", _SIGNALS)),
    "batch": (("0", "success (every profile diagnosed)"), ("1", "a finding at or above --fail-on"),
              ("2", "usage, input or configuration error, or some profiles could not be diagnosed (the results "
                    "file is written, their rows say why)"),
              ("3", 'a bug hit some profile (rows marked "internal error:")'),
              ("128+N", f"{_SIGNALS}: no results file is written")),
    "rules": (("0", "success"), ("1", "a failed rule test"), ("2", "a broken rule or fact file, usage or input error"),
              ("3", _BUG), ("128+N", "stopped by signal N")),
    "facts": (("0", "success"), ("1", "a failed fact test"), ("2", "usage, input, configuration or fact error"),
              ("3", _BUG),
              ("128+N", "stopped by signal N")),
}


def exit_codes_help(command: str) -> str:
    """The "Exit codes: ..." sentence of a command's --help."""
    return "Exit codes: " + ", ".join(f"{code} {meaning}" for code, meaning in EXIT_MEANINGS[command]) + "."


def finish(prog: str, body: Callable[[], int], stop: StopRequest | None = None, *, debug: bool = False,
           clear: Callable[[], None] | None = None) -> int:
    """Run a command's `body` and turn whatever stops it into one line on stderr and an exit code."""
    def say(message: str) -> None:
        if clear is not None:
            clear()
        sys.stderr.write(f"{prog}: {message}\n")

    try:
        code = body()
        sys.stdout.flush()  # here, where a reader that went away or a full disk is still reported
        return code
    except DiagnoseError as exc:
        for problem in getattr(exc, "problems", None) or [exc]:  # a broken rule file lists each of its problems
            say(f"error: {one_line(problem)}")
        return EXIT_ERROR
    except BrokenPipeError:
        # Whoever read standard output stopped (`diagnose rules list | head`): nothing went wrong with the run, so
        # no message; exit as a process killed by SIGPIPE, and keep Python's final flush from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + SIGPIPE
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        say(stop.description if stop is not None else "interrupted")
        return stop.exit_code if stop is not None else 130
    except (MemoryError, OSError) as exc:  # the environment, not the program: memory, a disk, a permission
        say(f"error: {error_sentence(exc)}")
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a crash must never look like a finding
        if debug:
            traceback.print_exc()
        say(f"{full_stop(error_sentence(exc))} This is a bug in nsys-diagnose, not a finding about the profile; "
            f"please report it with the output of the same command run with --debug.")
        return EXIT_INTERNAL
