"""Exit codes and the last word of every command: what went wrong, as one line, and a code CI can act on.

    0  success
    1  a finding at or above --fail-on (diagnose), a crossed gate (compare), a failed rule test (rules test)
    2  usage, input, configuration or rule error: one sentence on stderr saying what to do
    3  internal error: a bug in nsys-diagnose, never a finding; the traceback is shown with --debug
    4  `diagnose profile`: the profiled program failed; its partial capture was still diagnosed and reported
  128+N stopped by signal N: 130 Ctrl-C (SIGINT), 143 SIGTERM, 129 SIGHUP; nothing is left behind;
        141 (SIGPIPE) quietly when the reader of standard output went away (`| head`)
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from ..errors import DiagnoseError
from .interrupt import StopRequest
from ..text import strip_controls

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERNAL, EXIT_PROGRAM_FAILED = 0, 1, 2, 3, 4
SIGPIPE = 13  # the signal number on every POSIX system; signal.SIGPIPE does not exist on Windows

EXIT_CODES_HELP = ("Exit codes: 0 success, 1 a finding at or above --fail-on, 2 usage, input or rule error, "
                   "3 internal error (a bug: rerun with --debug and report it), 128+N stopped by signal N "
                   "(130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).")


def one_line(text: object) -> str:
    """A message for the terminal: control characters, escape sequences and bidi overrides of file names and
    other untrusted text made inert (as in the reports), on one line."""
    return " ".join(strip_controls(text).split())


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
    except MemoryError:
        say("error: ran out of memory; close other programs, raise the memory limits of this shell (ulimit), "
            "or diagnose on a machine with more memory.")
        return EXIT_ERROR
    except OSError as exc:  # the environment, not the program: a disk, a permission, a vanished file
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        say(f"error: {one_line(where)}{one_line(exc.strerror or exc)}")
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a crash must never look like a finding
        if debug:
            traceback.print_exc()
        say(f"internal error: {type(exc).__name__}: {one_line(exc)[:300]}. This is a bug in nsys-diagnose, not "
            f"a finding about the profile; please report it with the output of the same command run with --debug.")
        return EXIT_INTERNAL
