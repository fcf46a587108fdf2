"""Command line: `diagnose PROFILE` (one export) or `diagnose RANK0 RANK1 ...` / `diagnose DIR` (a multi-rank
run). Parses arguments and calls the library; nothing else."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .interrupt import StopRequest

# Importing DuckDB, pydantic and Jinja takes a moment: Ctrl-C, SIGTERM or SIGHUP then is a stop, not a traceback.
_STARTING = StopRequest().__enter__()
try:
    from ..api import diagnose
    from ..diagnosis.config import Config, resolve_config
    from ..errors import InputError
    from .exits import EXIT_CODES_HELP, EXIT_FINDINGS, EXIT_OK, finish
    from ..diagnosis.multirank import diagnose_run
    from .output import check_output, emit
    from ..reports.render import FORMATS, render, wants_colour
    from ..reports.render_run import render_run
    from ..vocabulary import Severity
except (KeyboardInterrupt, ImportError) as exc:
    # A signal that lands while a C extension (DuckDB) initialises surfaces as "ImportError: initialization failed".
    if isinstance(exc, ImportError) and not _STARTING.requested:
        raise
    sys.stderr.write(f"\ndiagnose: {_STARTING.description}\n")
    sys.exit(_STARTING.exit_code)
finally:
    _STARTING.__exit__()

EXIT_ERROR = 2


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep its usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog="diagnose",
        description="Diagnose an Nsight Systems SQLite export of an LLM-inference run: names the bottleneck, "
                    "proves it with numbers and says what to do. Two or more exports (or a directory of them) "
                    "are the ranks of one distributed run: each rank is diagnosed, in parallel, and the ranks are "
                    "compared (straggler, imbalance, NCCL time per rank).",
        epilog="Rule tooling: `diagnose rules list|explain ID|check [PATHS]|test [PATHS]`. "
               "Before/after: `diagnose compare BEFORE AFTER [--fail-on-regression METRIC:N]`. "
               "Multi-rank: `diagnose rank0.sqlite rank1.sqlite ...` or `diagnose RUN_DIR`; --fail-on then "
               "counts every rank's findings and the cross-rank ones. " + EXIT_CODES_HELP)
    p.add_argument("profiles", nargs="+", metavar="PROFILE",
                   help="SQLite export written by `nsys export --type sqlite` (read-only); two or more, or a "
                        "directory of *.sqlite / *.nsys-rep exports, diagnose one multi-rank run (rank numbers from "
                        "names such as rank0, rank_3, -r2, .3.sqlite, else sorted order)")
    p.add_argument("-f", "--format", choices=FORMATS, default="terminal",
                   help="terminal summary (default), GitHub Markdown, self-contained HTML with charts, or JSON")
    p.add_argument("-o", "--output", type=Path, help="write the report to this file instead of standard output")
    p.add_argument("--fail-on", choices=Severity.names(), help="exit 1 when a finding has this severity or worse")
    p.add_argument("--tokens", type=_positive_int, metavar="N",
                   help="output tokens the profiled run generated: adds tokens/s and time per output token "
                        "(one profile only)")
    p.add_argument("--config", type=Path,
                   help="configuration file (default: ./diagnose.yaml when present)")
    p.add_argument("--rule-dir", dest="rule_dirs", action="append", type=Path, default=[],
                   help="extra directory of team rules and fact .sql files (repeatable)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="RULE.PARAM=VALUE",
                   help="override a rule param, e.g. launch-bound.max_overhead_ratio=0.2 "
                        "(also RULE.severity=, RULE.enabled=false, facts.PARAM=); repeatable")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour in the terminal summary (default: auto, when writing to a terminal)")
    add_cache_arguments(p)
    p.add_argument("-j", "--jobs", type=_positive_int_of("ranks"), metavar="N",
                   help="multi-rank runs: ranks read at once (default: one per CPU); the ranks read side by side "
                        "share the CPUs and DuckDB's memory limit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    add_debug_argument(p)
    return p


def add_cache_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="read the export afresh instead of reusing its cached canonical tables")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="keep the cache of canonical tables in DIR (e.g. beside the profile) instead of the private "
                        "$XDG_CACHE_HOME/nsys-diagnose; also NSYS_DIAGNOSE_CACHE_DIR")


def add_debug_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true",
                   help="on an internal error (exit 3), print the traceback to include in a bug report")


def _positive_int_of(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or int(text) <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number of {what}")
        return int(text)

    return parse


_positive_int = _positive_int_of("tokens")


def _config(args: argparse.Namespace) -> Config:
    return resolve_config(args.config, args.rule_dirs, args.sets)


def _progress(enabled: bool, stop: StopRequest) -> Callable[[str], None]:
    start = time.monotonic()

    def show(stage: str) -> None:
        stop.check()
        if enabled:
            sys.stderr.write(f"\r\x1b[2K[{time.monotonic() - start:5.1f}s] {stage}")
            sys.stderr.flush()

    return show


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "rules" and not Path("rules").is_file():
        from .rules import main as rules_main

        return rules_main(argv[1:])
    if argv and argv[0] == "compare" and not Path("compare").is_file():
        from .compare import main as compare_main

        return compare_main(argv[1:])
    args = _parser().parse_args(argv)
    with StopRequest() as stop:
        return _run(args, stop)


def _run(args: argparse.Namespace, stop: StopRequest) -> int:
    shown = not args.quiet and sys.stderr.isatty()

    def clear() -> None:
        if shown:
            sys.stderr.write("\r\x1b[2K")

    return finish("diagnose", lambda: _diagnose(args, stop, shown, clear), stop, debug=args.debug, clear=clear)


def _diagnose(args: argparse.Namespace, stop: StopRequest, shown: bool, clear: Callable[[], None]) -> int:
    progress = _progress(shown, stop)
    multi_rank = len(args.profiles) > 1 or (args.profiles[0] != "" and Path(args.profiles[0]).is_dir())
    check_output(args.output, args.profiles, args.cache_dir)  # fail fast: before any diagnosis work
    config = _config(args)
    colour = wants_colour(args.color, args.output) and args.format == "terminal"
    if multi_rank:
        if args.tokens:
            raise InputError("--tokens applies to one profile; the ranks of a run need not generate the same "
                             "tokens, so diagnose a rank alone to get its tokens/s.")
        run = diagnose_run(args.profiles, config, progress=progress, cache=args.cache, workers=args.jobs,
                           cache_dir=args.cache_dir)
        findings = [f for _, f in run.all_findings()]
        text = render_run(run, args.format, colour=colour)
    else:
        report = diagnose(args.profiles[0], config, tokens=args.tokens, progress=progress,
                          cache=args.cache, cache_dir=args.cache_dir)
        findings = report.findings
        text = render(report, args.format, colour=colour)
    stop.check()
    clear()
    emit(text, args.output, inputs=args.profiles, cache_dir=args.cache_dir)
    if args.fail_on:
        if any(f.severity.at_least(args.fail_on) for f in findings):
            return EXIT_FINDINGS
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
