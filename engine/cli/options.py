"""The parts of the command line several commands share: the parser class (a usage error exits 2 with the usage
line), the options of a diagnosis and its report, and the options every command takes (--config, --rule-dir,
--set, the cache, --color, -q, --debug, --version). Each command's own parser is beside its handler."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from ..base.version import tool_version
from ..base.vocabulary import Severity
from ..diagnosis.whatif import MAX_BATCH
from ..reports.render import FORMATS
from .exits import EXIT_ERROR


class CommandParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 too; keep its usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def positive_int_of(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or int(text) <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number of {what}")
        return int(text)

    return parse


def _what_if(text: str) -> int:
    """`--what-if batch=N`: N requests per step, a whole number of at least 2."""
    key, _, value = text.partition("=")
    if key.strip() != "batch":
        raise argparse.ArgumentTypeError(f"{text!r} is not a what-if this tool projects; write batch=N, e.g. "
                                         f"batch=8")
    value = value.strip()
    if not value.isdigit() or int(value) < 2:
        raise argparse.ArgumentTypeError(f"batch={value} is not a batch to project; give a whole number of at least "
                                         f"2 requests per step, e.g. batch=8")
    if int(value) > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"batch={value} is beyond any step this tool can project from a profile; "
                                         f"give at most {MAX_BATCH} requests per step")
    return int(value)


# Options shared by several commands. Those of `rules` and `facts` may come before or after the subcommand
# word (`diagnose rules --rule-dir D check`, `diagnose rules check --rule-dir D`): after it, they use their
# own destination or no default, so they never reset what was given before it (see merge_after).

def add_config(p: argparse.ArgumentParser, *, after: bool = False) -> None:
    p.add_argument("--config", type=Path, default=argparse.SUPPRESS if after else None, metavar="FILE",
                   help="configuration file (default: ./diagnose.yaml when present)")
    p.add_argument("--rule-dir", dest="rule_dirs_after" if after else "rule_dirs", action="append", type=Path,
                   default=[], metavar="DIR", help="extra directory of team rules and fact .sql files (repeatable)")


def add_set(p: argparse.ArgumentParser, help_text: str, metavar: str = "RULE.PARAM=VALUE") -> None:
    p.add_argument("--set", dest="sets", action="append", default=[], metavar=metavar, help=help_text)


def add_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="read the export afresh instead of reusing its cached canonical tables")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="keep the cache of canonical tables, and the key that seals it, in DIR, an existing "
                        "directory (e.g. beside the profile), instead of the private $XDG_CACHE_HOME/nsys-diagnose; "
                        "also NSYS_DIAGNOSE_CACHE_DIR")


def add_debug(p: argparse.ArgumentParser, *, after: bool = False) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS if after else False,
                   help="on an internal error (exit 3), print the traceback to include in a bug report")


def add_colour(p: argparse.ArgumentParser, what: str | None, *, after: bool = False) -> None:
    """--color and --no-color. `what` None: the command prints no colour, and accepts both so that scripts can
    pass them to every command."""
    default = argparse.SUPPRESS if after else "auto"
    if what is None:
        p.add_argument("--color", choices=("auto", "always", "never"), default=default,
                       help="accepted for uniformity; this command prints no colour")
        p.add_argument("--no-color", dest="color", action="store_const", const="never", default=default,
                       help="accepted for uniformity; this command prints no colour")
        return
    p.add_argument("--color", choices=("auto", "always", "never"), default=default,
                   help=f"colour in the {what} (default: auto, when writing to a terminal; NO_COLOR turns it off)")
    p.add_argument("--no-color", dest="color", action="store_const", const="never", default=default,
                   help="no colour, as --color never")


def add_quiet(p: argparse.ArgumentParser, help_text: str = "no progress messages", *,
               after: bool = False) -> None:
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS if after else False,
                   help=help_text)


def add_version(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", action="version", version=f"nsys-diagnose {tool_version()}",
                   help="print the version and exit")


def merge_after(args: argparse.Namespace) -> argparse.Namespace:
    args.rule_dirs = [*getattr(args, "rule_dirs", []), *getattr(args, "rule_dirs_after", [])]
    return args


def add_report_options(p: argparse.ArgumentParser, *, jobs: bool = False) -> None:
    """The options of a diagnosis and its report: `diagnose PROFILE` and `diagnose profile -- CMD` share them."""
    p.add_argument("-f", "--format", choices=FORMATS, default=None,
                   help="terminal summary (default), GitHub Markdown, self-contained HTML with charts, or JSON")
    p.add_argument("-o", "--output", dest="outputs", action="append", type=Path, default=[], metavar="FILE",
                   help="write the report to FILE instead of standard output; repeatable, to write several formats "
                        "from one diagnosis: without -f each file's format follows its extension (.md, .html, "
                        ".json; anything else: the terminal summary as plain text)")
    p.add_argument("--fail-on", choices=Severity.names(), help="exit 1 when a finding has this severity or worse")
    p.add_argument("--tokens", type=positive_int_of("tokens"), metavar="N",
                   help="output tokens the profiled run generated: adds tokens/s and time per output token "
                        "(one profile only)")
    p.add_argument("--what-if", dest="what_if_batch", type=_what_if, metavar="batch=N",
                   help="project the step time and tokens/s at N requests per step (N x the current batch when "
                        "the profile does not record it); one profile only")
    add_config(p)
    add_set(p, "override a rule param, e.g. launch-bound.max_overhead_ratio=0.2 "
                "(also RULE.severity=, RULE.enabled=false, facts.PARAM=); repeatable")
    add_colour(p, "terminal summary")
    add_cache(p)
    if jobs:
        p.add_argument("-j", "--jobs", type=positive_int_of("ranks"), metavar="N",
                       help="multi-rank runs: ranks read at once (default: one per CPU); the ranks read side by side "
                            "share the CPUs and DuckDB's memory limit")
    add_quiet(p)
    p.add_argument("--timings", action="store_true",
                   help="after the report, print on standard error where the time went: each stage, and each fact "
                        "of the run and of each phase with its wall time, rows and DuckDB spill (one profile only)")
    add_debug(p)
    add_version(p)
