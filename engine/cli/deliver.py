"""The last step of a diagnosis on the command line, shared by `diagnose PROFILE` and `diagnose profile -- CMD`:
render every requested format, write each where it goes, and the exit code --fail-on asks for."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..reports.render import render
from .exits import EXIT_FINDINGS, EXIT_OK
from .interrupt import StopRequest
from .output import emit, wants_colour
from .progress import Progress


def deliver(args: argparse.Namespace, document, findings: Sequence, outputs: list[tuple[Path | None, str]],
            inputs: Sequence[str], stop: StopRequest, progress: Progress, timings=None,
            begin: float | None = None) -> int:
    """`timings` (engine/base/timings.py), when --timings asked for it: the rendering is timed, and the table goes to
    stderr after the report, with the whole run's wall time from `begin`."""
    with timings.stage("render") if timings else contextlib.nullcontext():
        texts = [(output, render(document, fmt, colour=fmt == "terminal" and wants_colour(args.color, output)))
                 for output, fmt in outputs]
    stop.check()
    progress.clear()
    for output, text in texts:
        emit(text, output, inputs=inputs, cache_dir=args.cache_dir)
    if timings:
        from ..base.timings import render_timings

        sys.stderr.write(render_timings(timings, time.perf_counter() - (begin or time.perf_counter())) + "\n")
    if args.fail_on and any(f.severity.at_least(args.fail_on) for f in findings):
        return EXIT_FINDINGS
    return EXIT_OK
