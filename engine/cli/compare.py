"""`diagnose compare BEFORE AFTER`: diagnose both exports, show the change, gate pull requests on it.

Exit codes: 0 success, 1 a --fail-on-regression gate crossed, 2 usage, input or rule error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..api import diagnose
from ..reports.compare import FORMATS, compare, known_metrics, parse_gate, render_compare
from ..diagnosis.config import resolve_config
from .exits import EXIT_CODES_HELP, finish
from .interrupt import StopRequest
from .output import check_output, emit
from ..reports.render import wants_colour

EXIT_OK, EXIT_GATE = 0, 1


def _parser() -> argparse.ArgumentParser:
    from .main import _ArgumentParser, _positive_int, add_cache_arguments, add_debug_argument

    p = _ArgumentParser(
        prog="diagnose compare",
        description="Diagnose two Nsight Systems SQLite exports (before and after a change) and show what "
                    "changed: metrics with absolute and relative change, findings that appeared or disappeared, "
                    "and a verdict (improved, regressed, unchanged).",
        epilog="Gates: METRIC:+N fails when the metric rises by more than N (absolute, in its unit: a 0-1 "
               "ratio, ns, a count), METRIC:-N%% when it falls by more than N %% of its before value. Metrics: "
               + ", ".join(known_metrics()) + ", phase_<name>_ns. "
               + EXIT_CODES_HELP.replace("a finding at or above --fail-on", "a gate crossed"))
    p.add_argument("before", help="SQLite export of the baseline run")
    p.add_argument("after", help="SQLite export of the changed run")
    p.add_argument("-f", "--format", choices=FORMATS, default="terminal",
                   help="terminal (default), GitHub Markdown, self-contained HTML with a chart, or JSON")
    p.add_argument("-o", "--output", type=Path, help="write the comparison to this file instead of standard output")
    p.add_argument("--fail-on-regression", dest="gates", action="append", default=[], metavar="METRIC:[+|-]N[%]",
                   help="exit 1 when METRIC moves beyond the threshold, e.g. gpu_utilization:-5%% or "
                        "overhead_ratio:+0.05; repeatable")
    p.add_argument("--tokens", type=_positive_int, metavar="N",
                   help="output tokens generated in each run: adds tokens/s and time per output token")
    p.add_argument("--config", type=Path, help="configuration file (default: ./diagnose.yaml when present)")
    p.add_argument("--rule-dir", dest="rule_dirs", action="append", type=Path, default=[],
                   help="extra directory of team rules and fact .sql files (repeatable)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="RULE.PARAM=VALUE",
                   help="override a rule param for both runs (as for diagnose); repeatable")
    add_cache_arguments(p)
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour in the terminal output (default: auto)")
    add_debug_argument(p)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    with StopRequest() as stop:
        return _run(args, stop)


def _run(args: argparse.Namespace, stop: StopRequest) -> int:
    return finish("diagnose compare", lambda: _compare(args, stop), stop, debug=args.debug)


def _compare(args: argparse.Namespace, stop: StopRequest) -> int:
    progress = lambda _stage: stop.check()  # noqa: E731 - no display, only the interrupt check
    inputs = [args.before, args.after]
    check_output(args.output, inputs, args.cache_dir)
    for spec in args.gates:  # fail fast, before the (slower) diagnosis
        parse_gate(spec, known_metrics())
    config = resolve_config(args.config, args.rule_dirs, args.sets)  # diagnose() sets cross-rank rules aside
    before = diagnose(args.before, config, cache=args.cache, progress=progress, cache_dir=args.cache_dir)
    after = diagnose(args.after, config, cache=args.cache, progress=progress, cache_dir=args.cache_dir)
    stop.check()
    comparison = compare(before, after, tokens=args.tokens, gates=args.gates)
    colour = wants_colour(args.color, args.output) and args.format == "terminal"
    emit(render_compare(comparison, args.format, colour=colour), args.output, inputs=inputs,
         cache_dir=args.cache_dir)
    crossed = [g for g in comparison.gates if g.crossed]
    for g in crossed:
        sys.stderr.write(f"diagnose compare: regression gate crossed: {g.message}\n")
    return EXIT_GATE if crossed else EXIT_OK
