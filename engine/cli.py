"""Command line: `diagnose PROFILE`. Parses arguments and calls the library; nothing else."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .api import diagnose
from .config import Config, resolve_config
from .errors import DiagnoseError
from .evaluate import SEVERITY_RANK
from .report import FORMATS, emit, render, wants_colour

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep its usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog="diagnose",
        description="Diagnose an Nsight Systems SQLite export of an LLM-inference run: names the bottleneck, "
                    "proves it with numbers and says what to do.",
        epilog="Rule tooling: `diagnose rules list|explain ID|check [PATHS]|test [PATHS]`. "
               "Before/after: `diagnose compare BEFORE AFTER [--fail-on-regression METRIC:N]`. "
               "Exit codes: 0 success, 1 a finding at or above --fail-on, 2 usage, input or rule error.")
    p.add_argument("profile", help="SQLite export written by `nsys export --type sqlite` (read-only)")
    p.add_argument("-f", "--format", choices=FORMATS, default="terminal",
                   help="terminal summary (default), GitHub Markdown, self-contained HTML with charts, or JSON")
    p.add_argument("-o", "--output", type=Path, help="write the report to this file instead of standard output")
    p.add_argument("--fail-on", choices=tuple(SEVERITY_RANK), help="exit 1 when a finding has this severity or worse")
    p.add_argument("--tokens", type=_positive_int, metavar="N",
                   help="output tokens the profiled run generated: adds tokens/s and time per output token")
    p.add_argument("--config", type=Path,
                   help="configuration file (default: ./diagnose.yaml when present)")
    p.add_argument("--rule-dir", dest="rule_dirs", action="append", type=Path, default=[],
                   help="extra directory of team rules and fact .sql files (repeatable)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="RULE.PARAM=VALUE",
                   help="override a rule param, e.g. launch-bound.max_overhead_ratio=0.2 "
                        "(also RULE.severity=, RULE.enabled=false, facts.PARAM=); repeatable")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour in the terminal summary (default: auto, when writing to a terminal)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    return p


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number of tokens")
    return int(text)


def _config(args: argparse.Namespace) -> Config:
    return resolve_config(args.config, args.rule_dirs, args.sets)


def _progress(enabled: bool):
    if not enabled:
        return None
    start = time.monotonic()

    def show(stage: str) -> None:
        sys.stderr.write(f"\r\x1b[2K[{time.monotonic() - start:5.1f}s] {stage}")
        sys.stderr.flush()

    return show


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "rules" and not Path("rules").is_file():
        from .rulecli import main as rules_main

        return rules_main(argv[1:])
    if argv and argv[0] == "compare" and not Path("compare").is_file():
        from .comparecli import main as compare_main

        return compare_main(argv[1:])
    args = _parser().parse_args(argv)
    progress = _progress(not args.quiet and sys.stderr.isatty())
    try:
        config = _config(args)
        report = diagnose(args.profile, config, tokens=args.tokens, progress=progress)
        if progress:
            sys.stderr.write("\r\x1b[2K")
        colour = wants_colour(args.color, args.output) and args.format == "terminal"
        emit(render(report, args.format, colour=colour), args.output)
    except DiagnoseError as exc:
        if progress:
            sys.stderr.write("\r\x1b[2K")
        sys.stderr.write(f"diagnose: error: {exc}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("\ndiagnose: interrupted\n")
        return 130
    except OSError as exc:
        sys.stderr.write(f"diagnose: error: {exc.filename or ''}: {exc.strerror or exc}\n")
        return EXIT_ERROR
    if args.fail_on:
        limit = SEVERITY_RANK[args.fail_on]
        if any(SEVERITY_RANK[f.severity] >= limit for f in report.findings):
            return EXIT_FINDINGS
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
