"""`diagnose compare BEFORE AFTER`: diagnose both exports, show the change, gate pull requests on it.

Exit codes: exits.EXIT_MEANINGS["compare"]. A gate that cannot be evaluated (its metric missing in a profile,
unless the gate is optional) is exit code 2: compare() raises that before anything is written, so it wins over a
crossed gate. Its command line is parser(), beside run().
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runs.api import diagnose
from ..diagnosis.config import resolve_config
from ..runs.compare import ACROSS_FORMATS, compare, formats_differ
from ..runs.gates import known_metrics, parse_gate
from ..reports.render import FORMATS, render
from .exits import EXIT_FINDINGS, EXIT_OK, exit_codes_help
from .interrupt import StopRequest
from .options import (CommandParser, add_cache, add_colour, add_config, add_debug, add_quiet, add_set, add_version,
                      positive_int_of)
from .output import check_output, emit, output_formats, wants_colour
from .progress import Progress

EXIT_GATE = EXIT_FINDINGS


def _tokens_per_run(text: str) -> int | tuple[int, int]:
    """compare's --tokens: N (each run generated N tokens) or BEFORE,AFTER (docs/compare-ci.md)."""
    parse = positive_int_of("tokens")
    parts = text.split(",")
    if len(parts) == 1:
        return parse(text)
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not N or BEFORE,AFTER (output tokens of each run)")
    return parse(parts[0].strip()), parse(parts[1].strip())


def parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="diagnose compare",
        description="Diagnose two Nsight Systems SQLite exports (before and after a change) and show what "
                    "changed: metrics with absolute and relative change, findings that appeared or disappeared, "
                    "and a verdict (improved, regressed, unchanged).",
        epilog="Gates: METRIC:+N fails when the metric rises by more than N in its own unit (a 0-1 ratio, ns, "
               "a count), METRIC:-N% when it falls by more than N % of its before value, METRIC:-Npt by more "
               "than N percentage points (0-1 metrics), METRIC:+2ms by more than a time (*_ns metrics); "
               "METRIC?:... passes when the metric is missing, which otherwise exits 2. Metrics: "
               + ", ".join(known_metrics()) + ", phase_<name>_ns. "
               + exit_codes_help("compare"))
    p.add_argument("before", help="SQLite export of the baseline run")
    p.add_argument("after", help="SQLite export of the changed run")
    p.add_argument("-f", "--format", choices=FORMATS, default=None,
                   help="terminal (default), GitHub Markdown, self-contained HTML with a chart, or JSON")
    p.add_argument("-o", "--output", dest="outputs", action="append", type=Path, default=[], metavar="FILE",
                   help="write the comparison to FILE instead of standard output; repeatable: without -f each "
                        "file's format follows its extension (.md, .html, .json; else plain terminal text)")
    p.add_argument("--fail-on-regression", dest="gates", action="append", default=[],
                   metavar="METRIC[?]:[+|-]N[UNIT]",
                   help="exit 1 when METRIC moves beyond N (- falls, + rises; no sign: its bad direction); "
                        "repeatable. UNIT: %% of the before value (gpu_utilization:-5%%), pt percentage points of "
                        "a 0-1 metric (gpu_utilization:-5pt), ns/us/ms/s for *_ns metrics (step_time_ns:+2ms); "
                        "none: absolute in the metric's unit (overhead_ratio:+0.05; ns for times). A metric "
                        "missing in either profile exits 2 unless marked optional: phase_decode_ns?:+5%%")
    p.add_argument("--tokens", type=_tokens_per_run, metavar="N|BEFORE,AFTER",
                   help="output tokens of each run (BEFORE,AFTER) or of both (N): adds tokens/s and time per "
                        "output token; one N for captures of different decode steps shows tokens/s unjudged")
    add_config(p)
    add_set(p, "override a rule param for both runs (as for diagnose); repeatable")
    add_cache(p)
    add_colour(p, "terminal output")
    add_quiet(p, "no warnings that the cache cannot be used (compare prints no progress messages)")
    add_debug(p)
    add_version(p)
    return p


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
