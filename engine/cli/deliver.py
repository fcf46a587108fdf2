"""The last step of a diagnosis on the command line, shared by `diagnose PROFILE` and `diagnose profile -- CMD`:
render every requested format, write each where it goes, and the exit code --fail-on asks for."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ..reports.render import render
from .exits import EXIT_FINDINGS, EXIT_OK
from .interrupt import StopRequest
from .output import emit, wants_colour
from .progress import Progress


def deliver(args: argparse.Namespace, document, findings: Sequence, outputs: list[tuple[Path | None, str]],
            inputs: Sequence[str], stop: StopRequest, progress: Progress) -> int:
    texts = [(output, render(document, fmt, colour=fmt == "terminal" and wants_colour(args.color, output)))
             for output, fmt in outputs]
    stop.check()
    progress.clear()
    for output, text in texts:
        emit(text, output, inputs=inputs, cache_dir=args.cache_dir)
    if args.fail_on and any(f.severity.at_least(args.fail_on) for f in findings):
        return EXIT_FINDINGS
    return EXIT_OK
