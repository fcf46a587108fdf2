"""The command line, all of it: every parser, option and help text, and the dispatch.

    diagnose PROFILE...                  one export, or the ranks of a run (no command word)
    diagnose compare BEFORE AFTER        compare.py
    diagnose batch PATHS... --out FILE   batch.py (many independent profiles, one row each)
    diagnose rules list|explain|check|test   rules.py, rules_check.py
    diagnose facts list|show|test        facts.py

The command modules receive the parsed arguments and never import this one; diagnosing profiles, the
default command, is implemented here.
"""

from __future__ import annotations

# The stop handlers come first, before every other import (even argparse): importing DuckDB, pydantic and Jinja takes
# a moment, and Ctrl-C, SIGTERM or SIGHUP then is only recorded, so main() stops as soon as the imports are done, with
# 128 + N and no traceback. The console script enters it even earlier, in console.py, before this module is loaded.
from .interrupt import StopRequest, exit_on_stop_signals, starting

_STARTING = starting()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import TYPE_CHECKING, NoReturn  # noqa: E402
from pathlib import Path  # noqa: E402

try:
    from ..runs.api import diagnose
    from ..diagnosis.config import resolve_config
    from ..diagnosis.whatif import MAX_BATCH
    from ..base.errors import InputError
    from ..reports.render import FORMATS
    from ..base.vocabulary import Severity
    from ..base.errors import DiagnoseError
    from .deliver import deliver
    from .exits import EXIT_ERROR, exit_codes_help, finish, one_line
    from .output import ClosedOutput, check_output, output_formats
    from .progress import Progress
    from .tables import ROW_FORMATS
    from ..base.version import tool_version
    from ..base.timings import Timings
except ImportError:
    if not _STARTING.requested:
        raise
    # An import interrupted at the C level (DuckDB initialising) can fail even though the handler raised nothing.
    _STARTING.__exit__()
    sys.stderr.write(f"\ndiagnose: {_STARTING.description}\n")
    sys.exit(_STARTING.exit_code)

if TYPE_CHECKING:
    from ..runs.batch import Shard
    from ..model.report import Report
    from ..model.runmodel import RunReport

Command = Callable[[argparse.Namespace, StopRequest], int]


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 too; keep its usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _positive_int_of(what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or int(text) <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number of {what}")
        return int(text)

    return parse


def _tokens_per_run(text: str) -> int | tuple[int, int]:
    """compare's --tokens: N (each run generated N tokens) or BEFORE,AFTER (docs/compare-ci.md)."""
    parse = _positive_int_of("tokens")
    parts = text.split(",")
    if len(parts) == 1:
        return parse(text)
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not N or BEFORE,AFTER (output tokens of each run)")
    return parse(parts[0].strip()), parse(parts[1].strip())


def _shard(text: str) -> "Shard":
    from ..runs.batch import Shard  # only `diagnose batch` needs it

    try:
        return Shard.parse(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--shard ")) from None


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
# own destination or no default, so they never reset what was given before it (see _merge_after).

def _add_config(p: argparse.ArgumentParser, *, after: bool = False) -> None:
    p.add_argument("--config", type=Path, default=argparse.SUPPRESS if after else None, metavar="FILE",
                   help="configuration file (default: ./diagnose.yaml when present)")
    p.add_argument("--rule-dir", dest="rule_dirs_after" if after else "rule_dirs", action="append", type=Path,
                   default=[], metavar="DIR", help="extra directory of team rules and fact .sql files (repeatable)")


def _add_set(p: argparse.ArgumentParser, help_text: str, metavar: str = "RULE.PARAM=VALUE") -> None:
    p.add_argument("--set", dest="sets", action="append", default=[], metavar=metavar, help=help_text)


def _add_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="read the export afresh instead of reusing its cached canonical tables")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="keep the cache of canonical tables, and the key that seals it, in DIR, an existing "
                        "directory (e.g. beside the profile), instead of the private $XDG_CACHE_HOME/nsys-diagnose; "
                        "also NSYS_DIAGNOSE_CACHE_DIR")


def _add_debug(p: argparse.ArgumentParser, *, after: bool = False) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS if after else False,
                   help="on an internal error (exit 3), print the traceback to include in a bug report")


def _add_colour(p: argparse.ArgumentParser, what: str | None, *, after: bool = False) -> None:
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


def _add_quiet(p: argparse.ArgumentParser, help_text: str = "no progress messages", *,
               after: bool = False) -> None:
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS if after else False,
                   help=help_text)


def _add_version(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", action="version", version=f"nsys-diagnose {tool_version()}",
                   help="print the version and exit")


def _merge_after(args: argparse.Namespace) -> argparse.Namespace:
    args.rule_dirs = [*getattr(args, "rule_dirs", []), *getattr(args, "rule_dirs_after", [])]
    return args


def _add_report_options(p: argparse.ArgumentParser, *, jobs: bool = False) -> None:
    """The options of a diagnosis and its report: `diagnose PROFILE` and `diagnose profile -- CMD` share them."""
    p.add_argument("-f", "--format", choices=FORMATS, default=None,
                   help="terminal summary (default), GitHub Markdown, self-contained HTML with charts, or JSON")
    p.add_argument("-o", "--output", dest="outputs", action="append", type=Path, default=[], metavar="FILE",
                   help="write the report to FILE instead of standard output; repeatable, to write several formats "
                        "from one diagnosis: without -f each file's format follows its extension (.md, .html, "
                        ".json; anything else: the terminal summary as plain text)")
    p.add_argument("--fail-on", choices=Severity.names(), help="exit 1 when a finding has this severity or worse")
    p.add_argument("--tokens", type=_positive_int_of("tokens"), metavar="N",
                   help="output tokens the profiled run generated: adds tokens/s and time per output token "
                        "(one profile only)")
    p.add_argument("--what-if", dest="what_if_batch", type=_what_if, metavar="batch=N",
                   help="project the step time and tokens/s at N requests per step (N x the current batch when "
                        "the profile does not record it); one profile only")
    _add_config(p)
    _add_set(p, "override a rule param, e.g. launch-bound.max_overhead_ratio=0.2 "
                "(also RULE.severity=, RULE.enabled=false, facts.PARAM=); repeatable")
    _add_colour(p, "terminal summary")
    _add_cache(p)
    if jobs:
        p.add_argument("-j", "--jobs", type=_positive_int_of("ranks"), metavar="N",
                       help="multi-rank runs: ranks read at once (default: one per CPU); the ranks read side by side "
                            "share the CPUs and DuckDB's memory limit")
    _add_quiet(p)
    p.add_argument("--timings", action="store_true",
                   help="after the report, print on standard error where the time went: each stage, and each fact "
                        "of the run and of each phase with its wall time, rows and DuckDB spill (one profile only)")
    _add_debug(p)
    _add_version(p)


def profile_parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog="diagnose",
        description="Diagnose an Nsight Systems SQLite export, or a PyTorch-profiler trace (.pt.trace.json(.gz)), "
                    "of an LLM-inference run: names the bottleneck, "
                    "proves it with numbers and says what to do. Two or more exports (or a directory of them) "
                    "are the ranks of one distributed run: each rank is diagnosed, in parallel, and the ranks are "
                    "compared (straggler, imbalance, NCCL time per rank); exports that are not one run's ranks "
                    "(other nsys versions, sessions started more than 5 minutes apart) are refused: `diagnose "
                    "batch` takes independent profiles.",
        epilog="Commands (`diagnose COMMAND --help` describes each): "
               + "; ".join(f"`{usage}`: {what}" for usage, what in (entry[3] for entry in COMMANDS.values()))
               + ". Multi-rank: `diagnose rank0.sqlite rank1.sqlite ...` or `diagnose RUN_DIR`; --fail-on then "
               "counts every rank's findings and the cross-rank ones. A file named "
               + " or ".join(COMMANDS) + " in the working directory is a profile, not a command. "
               + exit_codes_help("diagnose"))
    p.add_argument("profiles", nargs="+", metavar="PROFILE",
                   help="SQLite export written by `nsys export --type sqlite`, or a PyTorch-profiler trace "
                        "(*.pt.trace.json or .json.gz, from torch.profiler, vLLM or SGLang), read-only; two or "
                        "more, or a "
                        "directory of *.sqlite / *.nsys-rep exports or of PyTorch-profiler traces "
                        "(*.pt.trace.json.gz), diagnose one multi-rank run (rank numbers from the traces' "
                        "distributedInfo, else from names such as rank0, rank_3, -r2, .3.sqlite, else sorted order)")
    _add_report_options(p, jobs=True)
    return p


def _known_metrics() -> list[str]:
    from ..runs.compare import known_metrics  # only `compare` needs it (see COMMANDS)

    return known_metrics()


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _nsys_switch(text: str) -> str:
    from ..capture.flags import own_switch_problem

    if not text.startswith("--") or len(text.split("=", 1)[0]) < 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not an nsys switch; write it whole, e.g. "
                                         f"--nsys-arg=--cuda-graph-trace=node")
    problem = own_switch_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def capture_parser() -> argparse.ArgumentParser:
    from ..capture.flags import RANGE_CHOICES
    from ..pack.presets import preset_names

    p = _ArgumentParser(
        prog="diagnose profile",
        usage="diagnose profile [--preset NAME] [options] -- CMD [ARGS ...]",
        description="Capture CMD with Nsight Systems the way its stack needs (flags, environment), export the "
                    "capture to SQLite and diagnose it, in one command. The preset is guessed from the command "
                    "(vllm, sglang, trtllm-*, python ...) and printed; --preset overrides it. The flags are spelled "
                    "for the installed nsys; a flag it lacks is dropped with a warning saying what is lost. The "
                    "program's output goes to standard error; standard output carries only the report.",
        epilog="Outputs go to --out-dir (default: a new ./nsys-diagnose-<timestamp>-<pid>/): profile.nsys-rep, "
               "profile.sqlite, report.md, capture.log and capture.json; nothing is overwritten without --force. "
               "Ctrl-C stops the program and lets nsys write what it captured, which is then diagnosed; a second "
               "Ctrl-C aborts. " + exit_codes_help("profile"))
    p.add_argument("command", nargs="*", metavar="CMD", help="the program to profile and its arguments, after --")
    p.add_argument("--preset", choices=preset_names(),
                   help="the capture preset (default: guessed from CMD); `--dry-run` prints what it sets and why")
    p.add_argument("--duration", dest="duration_s", type=_seconds, metavar="S",
                   help="stop capturing after S seconds (a server that never exits needs it, or --range)")
    p.add_argument("--delay", dest="delay_s", type=_seconds, metavar="S",
                   help="start capturing S seconds after the program starts (skip loading and warm-up)")
    p.add_argument("--range", dest="capture_range", choices=RANGE_CHOICES,
                   help="capture only between the program's cudaProfilerStart and cudaProfilerStop; the preset's "
                        "note says how its stack brackets them")
    p.add_argument("--gpu-metrics", action="store_true",
                   help="sample GPU metrics (SM activity, tensor cores, DRAM) where the installed nsys supports it")
    p.add_argument("--nsys-arg", dest="nsys_args", action="append", default=[], type=_nsys_switch,
                   metavar="--SWITCH=VALUE", help="pass this switch to `nsys profile` as well (replacing the "
                                                  "preset's value of the same switch); repeatable, e.g. "
                                                  "--nsys-arg=--cuda-graph-trace=node")
    p.add_argument("--out-dir", type=Path, metavar="DIR",
                   help="directory for the report, the .nsys-rep and the .sqlite (default: a new "
                        "./nsys-diagnose-<timestamp>-<pid>/)")
    p.add_argument("--force", action="store_true", help="replace an earlier capture in --out-dir")
    p.add_argument("--dry-run", action="store_true",
                   help="print the nsys and export command lines and the environment, and run nothing")
    p.add_argument("--nsys", metavar="PATH", help="the nsys executable (default: NSYS_DIAGNOSE_NSYS, else nsys on "
                                                   "PATH)")
    p.add_argument("--expect-gpus", type=_positive_int_of("GPUs"), metavar="N",
                   help="GPUs the run should use (default: the product of the parallel sizes in CMD, e.g. "
                        "--tensor-parallel-size); fewer in the capture is reported as a capture problem")
    p.add_argument("--expect-ranks", type=_positive_int_of("processes"), metavar="N",
                   help="processes that should run GPU work (default: as --expect-gpus); fewer is reported")
    _add_report_options(p)
    return p


def compare_parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog="diagnose compare",
        description="Diagnose two Nsight Systems SQLite exports (before and after a change) and show what "
                    "changed: metrics with absolute and relative change, findings that appeared or disappeared, "
                    "and a verdict (improved, regressed, unchanged).",
        epilog="Gates: METRIC:+N fails when the metric rises by more than N in its own unit (a 0-1 ratio, ns, "
               "a count), METRIC:-N% when it falls by more than N % of its before value, METRIC:-Npt by more "
               "than N percentage points (0-1 metrics), METRIC:+2ms by more than a time (*_ns metrics); "
               "METRIC?:... passes when the metric is missing, which otherwise exits 2. Metrics: "
               + ", ".join(_known_metrics()) + ", phase_<name>_ns. "
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
    _add_config(p)
    _add_set(p, "override a rule param for both runs (as for diagnose); repeatable")
    _add_cache(p)
    _add_colour(p, "terminal output")
    _add_quiet(p, "no warnings that the cache cannot be used (compare prints no progress messages)")
    _add_debug(p)
    _add_version(p)
    return p


def batch_parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog="diagnose batch",
        description="Diagnose many independent profiles (nightly runs, a sweep of models and batch sizes) in "
                    "parallel worker processes and write one row per profile (verdict, its cost, key metrics, "
                    "findings) to a Parquet, CSV or JSON Lines file.",
        epilog="A profile that cannot be diagnosed is a row with its error, never the end of the batch. "
               + exit_codes_help("batch"))
    p.add_argument("inputs", nargs="+", metavar="PROFILE|DIR|GLOB",
                   help="SQLite exports (or .nsys-rep reports) and PyTorch-profiler traces (*.pt.trace.json.gz), "
                        "directories of them (not their subdirectories; other files are skipped and counted) and "
                        "glob patterns, expanded here so quoted globs work ('runs/**/*.sqlite' descends)")
    p.add_argument("-o", "--out", dest="output", type=Path, required=True, metavar="FILE",
                   help="results file; the format follows the extension: .parquet, .csv (findings as a JSON string) "
                        "or .jsonl; written atomically, never over an input")
    p.add_argument("--fail-on", choices=Severity.names(), help="exit 1 when a finding of any profile has this "
                                                               "severity or worse")
    _add_config(p)
    _add_set(p, "override a rule param for every profile (as for diagnose); repeatable")
    _add_cache(p)
    p.add_argument("-j", "--jobs", type=_positive_int_of("processes"), metavar="N",
                   help="worker processes (default: one per usable CPU); each gets an equal share of the CPUs and "
                        "of DuckDB's memory limit; with --executor dask and no scheduler, the local cluster's workers")
    p.add_argument("--executor", choices=("local", "dask"), default="local",
                   help="where the profiles are diagnosed: local worker processes (default), or a Dask distributed "
                        "cluster (pip install 'nsys-diagnose[dask]')")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="--executor dask: the scheduler of an existing cluster (tcp://HOST:8786, or the scheduler "
                        "file `dask scheduler --scheduler-file` wrote); without it, Dask's scheduler-address setting "
                        "(DASK_SCHEDULER_ADDRESS), else a local cluster of -j worker processes started for the batch")
    p.add_argument("--shard", type=_shard, metavar="I/N",
                   help="diagnose only shard I of N (1 <= I <= N) of the profiles found, for the jobs of a CI matrix "
                        "or a Slurm array; a profile's shard follows from its path alone, the same on every machine")
    _add_colour(p, None)
    _add_quiet(p, "no progress lines (errors and the exit code still tell what failed)")
    _add_debug(p)
    _add_version(p)
    return p


def rules_parser() -> argparse.ArgumentParser:
    epilog = exit_codes_help("rules")  # on `diagnose rules` and on each of its commands
    p = _ArgumentParser(prog="diagnose rules", description="List, explain, check and test diagnosis rules.",
                        epilog=epilog)
    _add_config(p)
    _add_quiet(p, "rules test: print only the failed cases and the count")
    _add_colour(p, None)
    _add_debug(p)
    _add_version(p)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    commands = [
        sub.add_parser("list", help="every rule: id, category, severity, scope (profile or multi-rank run), source"),
        explain := sub.add_parser("explain", help="what a rule detects, why, its params, remediation and an example"),
        check := sub.add_parser("check", help="validate rule files and compile every fact's SQL; every error as "
                                              "file:line:col"),
        test := sub.add_parser("test", help="run <id>.test.yaml cases"),
    ]
    explain.add_argument("rule_id")
    _add_set(explain, "show the rule with a param, severity or enabled set, e.g. launch-bound.max_overhead_ratio=0.2 "
                      "(as for diagnose); repeatable")
    check.add_argument("paths", nargs="*", type=Path, help="rule directories or files (default: all loaded)")
    test.add_argument("paths", nargs="*", type=Path, help="directories or .test.yaml files (default: all loaded)")
    for command in commands:
        command.epilog = epilog
        _add_config(command, after=True)
        _add_quiet(command, "rules test: print only the failed cases and the count", after=True)
        _add_colour(command, None, after=True)
        _add_debug(command, after=True)
    return p


def facts_parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(prog="diagnose facts",
                        description="The facts rules read: documented SQL over the canonical views of an export, "
                                    "bundled and from team rule directories.",
                        epilog=(epilog := exit_codes_help("facts")))
    _add_config(p)
    _add_quiet(p)
    _add_colour(p, None)
    _add_debug(p)
    _add_version(p)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    listing = sub.add_parser("list", help="every fact: name, what it holds, columns, params; helpers and team facts "
                                          "marked")
    listing.add_argument("-f", "--format", choices=("terminal", "json"), default="terminal",
                         help="readable blocks (default), or JSON with every doc, column and @check")
    show = sub.add_parser("show", help="compute one fact (and the facts it needs) on an export and print its rows",
                          description="Compute one fact, and the facts it needs, on an export and print its rows. "
                                      "A cross-rank fact (rank_balance) reads the exports of a multi-rank run: give "
                                      "two or more, or their directory.")
    show.add_argument("fact", metavar="FACT", help="a fact name, as `diagnose facts list` shows it")
    show.add_argument("profiles", nargs="+", metavar="PROFILE", help="SQLite export written by `nsys export --type "
                                                                     "sqlite`, or PyTorch-profiler trace "
                                                                     "(*.pt.trace.json.gz); read-only")
    show.add_argument("-f", "--format", choices=ROW_FORMATS, default="terminal",
                      help="aligned table (default), JSON ({fact, columns, row_count, rows, skipped}) or CSV")
    show.add_argument("-o", "--output", type=Path, help="write the rows to this file instead of standard output")
    show.add_argument("--limit", type=_positive_int_of("rows"), metavar="N", help="print the first N rows only")
    _add_set(show, "set a fact param, e.g. facts.gap_threshold_ns=5000 (rule settings are checked as for "
                   "diagnose); repeatable", "facts.PARAM=VALUE")
    _add_cache(show)
    test = sub.add_parser("test", help="run the NAME.test.yaml cases beside the facts: canonical rows in, the "
                                       "fact's rows out",
                          description="Run fact tests: each NAME.test.yaml beside a fact's NAME.sql gives canonical "
                                      "rows and the rows the fact must compute from them. Exit 1 when a case fails.")
    test.add_argument("targets", nargs="*", metavar="FACT|PATH",
                      help="fact names, fact test files or directories of them (default: the tests of every "
                           "bundled fact and of the facts in the loaded rule directories)")
    for command in (listing, show, test):
        command.epilog = epilog
        _add_config(command, after=True)
        _add_quiet(command, after=True)
        _add_colour(command, None, after=True)
        _add_debug(command, after=True)
    return p


# Each command module is imported when its command runs: every CLI process starts by importing this file, and
# diagnosing a profile needs none of them.
def _capture(args: argparse.Namespace, stop: StopRequest) -> int:
    from . import capture

    return capture.run(args, stop)


def _compare(args: argparse.Namespace, stop: StopRequest) -> int:
    from . import compare

    return compare.run(args, stop)


def _batch(args: argparse.Namespace, stop: StopRequest) -> int:
    from . import batch

    return batch.run(args, stop)


def _rules(args: argparse.Namespace, stop: StopRequest) -> int:
    from . import rules

    return rules.run(args, stop)


def _facts(args: argparse.Namespace, stop: StopRequest) -> int:
    from . import facts

    return facts.run(args, stop)


# command word -> (its parser, its implementation, the name its error messages start with, its synopsis and what
# it does for `diagnose --help`). Every command is listed here and nowhere else, so the help cannot leave one out.
COMMANDS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Command, str, tuple[str, str]]] = {
    "profile": (capture_parser, _capture, "diagnose profile",
                ("diagnose profile [--preset vllm|sglang|trtllm|pytorch|cuda] -- CMD ARGS",
                 "capture CMD with nsys the right way for its stack, export and diagnose it")),
    "compare": (compare_parser, _compare, "diagnose compare",
                ("diagnose compare BEFORE AFTER [--fail-on-regression METRIC:-5pt]", "before/after a change")),
    "batch": (batch_parser, _batch, "diagnose batch",
              ("diagnose batch PATHS... --out FILE", "many independent profiles, one row each (Parquet, CSV, JSONL)")),
    "rules": (rules_parser, _rules, "diagnose",
              ("diagnose rules list|explain ID|check [PATHS]|test [PATHS]", "rule tooling")),
    "facts": (facts_parser, _facts, "diagnose",
              ("diagnose facts list|show FACT PROFILE|test [FACTS]",
               "the facts rules read, their rows on an export, and their tests")),
}


def main(argv: list[str] | None = None) -> int:
    try:
        _STARTING.check()
        _guard_standard_streams()
        # The first tempfile.gettempdir() probes the temporary directory with a file of a random name it then
        # removes: made while a stop signal is only recorded, so no signal can interrupt it and leave the file.
        tempfile.gettempdir()
        return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:  # a signal while importing (deferred until now) or before a command's own handler
        sys.stderr.write(f"\ndiagnose: {_STARTING.description}\n")
        return _STARTING.exit_code
    except DiagnoseError as exc:  # `diagnose --help` with standard output closed: the help cannot be written
        sys.stderr.write(f"diagnose: error: {one_line(exc)}\n")
        return EXIT_ERROR
    finally:
        _STARTING.__exit__()


def run() -> int:
    """main() for a process of its own (the console script `diagnose`, `python -m nsys_diagnose.cli`): then a
    stop signal that lands while the process exits ends it with 128 + N, never with a traceback."""
    code = main()
    exit_on_stop_signals()
    return code


def _guard_standard_streams() -> None:
    """A standard stream closed by the caller (`diagnose run.sqlite >&-`): /dev/null takes its descriptor, so no
    file opened later (the profile, a database, a report) gets number 1 and receives what is meant for standard
    output. Writing to a closed standard output then fails with one sentence (exit 2), as there is nowhere for the
    report to go; a closed standard error only loses the messages, the exit code still tells."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the life of the process
    if sys.stdout is None:
        sys.stdout = ClosedOutput()


def _main(argv: list[str]) -> int:
    # A file named like a command in the working directory is a profile: `diagnose rules` diagnoses ./rules.
    word = argv[0] if argv and argv[0] in COMMANDS and not Path(argv[0]).is_file() else None
    if word is None:
        args = profile_parser().parse_args(argv)
        with StopRequest() as stop:
            _STARTING.check()  # a signal recorded before this command's own handler was in place
            progress = Progress(stop, quiet=args.quiet)
            return finish("diagnose", lambda: _diagnose(args, stop, progress), stop, debug=args.debug,
                          clear=progress.clear)
    build, command, prog, _ = COMMANDS[word]
    args = _merge_after(build().parse_args(argv[1:]))
    with StopRequest() as stop:
        _STARTING.check()
        return finish(prog, lambda: command(args, stop), stop, debug=args.debug)


def _diagnose(args: argparse.Namespace, stop: StopRequest, progress: Progress) -> int:
    begin = time.perf_counter()
    timings = Timings() if args.timings else None
    multi_rank = len(args.profiles) > 1 or (args.profiles[0] != "" and Path(args.profiles[0]).is_dir())
    outputs = output_formats(args.outputs, args.format)
    for output, _ in outputs:
        check_output(output, args.profiles, args.cache_dir)  # fail fast: before any diagnosis work
    config = resolve_config(args.config, args.rule_dirs, args.sets)
    if multi_rank:
        if args.tokens:
            raise InputError("--tokens applies to one profile; the ranks of a run need not generate the same "
                             "tokens, so diagnose a rank alone to get its tokens/s.")
        if args.what_if_batch:
            raise InputError("--what-if applies to one profile; diagnose a rank alone to project its batch.")
        if args.timings:
            raise InputError("--timings applies to one profile; diagnose a rank alone to see where its time goes.")
        from ..runs.multirank import diagnose_run  # only multi-rank runs need it

        run = diagnose_run(args.profiles, config, progress=progress, cache=args.cache, workers=args.jobs,
                           cache_dir=args.cache_dir)
        findings = [f for _, f in run.all_findings()]
        document: Report | RunReport = run
    else:
        report = diagnose(args.profiles[0], config, tokens=args.tokens, progress=progress,
                          cache=args.cache, cache_dir=args.cache_dir, what_if_batch=args.what_if_batch,
                          timings=timings)
        rank, size = report.profile.rank, report.profile.world_size
        if rank is not None and size is not None and 0 <= rank < size and size > 1:
            progress.note(f"{args.profiles[0]} is rank {rank} of a run of {size} ranks (its trace's "
                          f"distributedInfo), and this report is that rank alone; give every rank's trace "
                          f"(`diagnose DIR` or `diagnose RANK0 RANK1 ...`) to see the balance across the ranks")
        findings = report.findings
        document = report
    return deliver(args, document, findings, outputs, args.profiles, stop, progress, timings, begin)


if __name__ == "__main__":
    sys.exit(run())
