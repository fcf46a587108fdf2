"""`diagnose compare BEFORE AFTER`: diagnose both exports, show the change, gate pull requests on it.

Exit codes: exits.EXIT_MEANINGS["compare"]. A gate that cannot be evaluated (its metric missing in a profile,
unless the gate is optional) is exit code 2: compare() raises that before anything is written, so it wins over a
crossed gate. The command line itself is defined in main.py.
"""

from __future__ import annotations

import argparse
import sys

from ..runs.api import diagnose
from ..diagnosis.config import resolve_config
from ..runs.compare import ACROSS_FORMATS, compare, formats_differ, known_metrics, parse_gate
from ..reports.render import render
from .exits import EXIT_FINDINGS, EXIT_OK
from .interrupt import StopRequest
from .output import check_output, emit, output_formats, wants_colour
from .progress import Progress

EXIT_GATE = EXIT_FINDINGS


def run(args: argparse.Namespace, stop: StopRequest) -> int:
    # no progress line, only the interrupt check and the warnings that the cache cannot be used (once for both)
    progress = Progress(stop, quiet=args.quiet, prog="diagnose compare", lines=False)
    inputs = [args.before, args.after]
    outputs = output_formats(args.outputs, args.format)
    for output, _ in outputs:
        check_output(output, inputs, args.cache_dir)
    for spec in args.gates:  # fail fast on syntax, metric and unit, before the (slower) diagnosis
        parse_gate(spec, known_metrics())
    config = resolve_config(args.config, args.rule_dirs, args.sets)  # diagnose() sets cross-rank rules aside
    before = diagnose(args.before, config, cache=args.cache, progress=progress, cache_dir=args.cache_dir)
    after = diagnose(args.after, config, cache=args.cache, progress=progress, cache_dir=args.cache_dir)
    stop.check()
    comparison = compare(before, after, tokens=args.tokens, gates=args.gates)  # GateError (exit 2) before any output
    if (kinds := formats_differ(before, after)) is not None:
        progress.note(f"{kinds}: the metrics that depend on what each profiler records "
                      f"({', '.join(ACROSS_FORMATS)}) are shown but not judged")
    texts = [(output, render(comparison, fmt, colour=fmt == "terminal" and wants_colour(args.color, output)))
             for output, fmt in outputs]
    for output, text in texts:
        emit(text, output, inputs=inputs, cache_dir=args.cache_dir)
    crossed = [g for g in comparison.gates if g.crossed]
    for g in crossed:
        sys.stderr.write(f"diagnose compare: regression gate crossed: {g.message}\n")
    return EXIT_GATE if crossed else EXIT_OK
