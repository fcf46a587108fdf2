"""`diagnose batch PROFILE|DIR|GLOB... --out results.parquet`: diagnose many independent profiles in parallel and
write one row per profile (engine/runs/batch.py does the work in local processes, engine/runs/batch_dask.py on a Dask
cluster with --executor dask; --shard I/N keeps one shard of the profiles; its command line is parser(), beside
run()).

Exit codes: exits.EXIT_MEANINGS["batch"].
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ..runs.batch import check_config, diagnose_batch, worker_count
from ..runs.batch_profiles import Shard, find_profiles
from ..runs.batch_table import (STATUS_OK, TABLE_FORMATS, has_finding_at_least, output_mode, summary, table_format,
                                write_table)
from ..diagnosis.config import resolve_config
from ..base.errors import InputError, OutputError
from ..reading.cache import cache_problem
from ..base.text import printable
from ..base.units import fmt_ratio
from ..base.vocabulary import Severity
from .exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, exit_codes_help, one_line
from .interrupt import StopRequest
from .options import (CommandParser, add_cache, add_colour, add_config, add_debug, add_quiet, add_set, add_version,
                      positive_int_of)
from .output import check_output, current_umask

PROG = "diagnose batch"
_BAR_WIDTH = 24


class BatchProgress:
    """One line per finished profile on stderr (unless quiet), and below them a bar on a terminal."""

    def __init__(self, *, quiet: bool, stream: TextIO | None = None) -> None:
        self.stream, self.quiet = stream or sys.stderr, quiet
        self.bar = not quiet and self.stream.isatty()
        self.start = time.monotonic()
        self.finished = self.total = 0

    def begin(self, total: int) -> None:
        self.total = total
        self._draw()

    def tick(self) -> None:
        """Redraw the bar, so that its clock runs while long profiles are diagnosed."""
        self._draw()

    def done(self, row: dict[str, Any], finished: int, total: int) -> None:
        if self.quiet:
            return
        if row["status"] == STATUS_OK:
            cost = f" ({fmt_ratio(row['primary_cost'])})" if row["primary_cost"] is not None else ""
            outcome = f"{row['verdict']}{cost}"
        else:
            outcome = f"error: {row['error']}"
        seconds = f" {row['seconds']:.1f} s" if row["seconds"] is not None else ""
        self.finished, self.total = finished, total
        self.clear()
        self.stream.write(f"[{finished}/{total}] {one_line(row['path'])}: {one_line(outcome)}{seconds}\n")
        self._draw()

    def _draw(self) -> None:
        if not self.bar or self.total == 0:
            return
        filled = _BAR_WIDTH * self.finished // self.total
        self.stream.write(f"\r\x1b[2K[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {self.finished}/{self.total} "
                          f"profiles · {time.monotonic() - self.start:.0f} s")
        self.stream.flush()

    def clear(self) -> None:
        if self.bar:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()

    def say(self, text: str) -> None:
        if not self.quiet:
            self.clear()
            self.stream.write(f"{PROG}: {printable(text)}\n")


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--shard ")) from None


def parser() -> argparse.ArgumentParser:
    p = CommandParser(
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
    add_config(p)
    add_set(p, "override a rule param for every profile (as for diagnose); repeatable")
    add_cache(p)
    p.add_argument("-j", "--jobs", type=positive_int_of("processes"), metavar="N",
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
    add_colour(p, None)
    add_quiet(p, "no progress lines (errors and the exit code still tell what failed)")
    add_debug(p)
    add_version(p)
    return p


def run(args: argparse.Namespace, stop: StopRequest) -> int:
    progress = BatchProgress(quiet=args.quiet)
    try:
        return _run(args, stop, progress)
    finally:
        progress.clear()


def _run(args: argparse.Namespace, stop: StopRequest, progress: BatchProgress) -> int:
    output: Path = args.output
    if table_format(output) is None:
        raise OutputError(f"--out {output}: the results file must end in {', '.join(TABLE_FORMATS)} (the format "
                          f"follows the extension).")
    if args.scheduler is not None and args.executor != "dask":
        raise InputError("--scheduler names a Dask scheduler; add --executor dask to run the batch there.")
    if args.executor == "dask":
        from ..runs.batch_dask import require_dask

        require_dask()
    found = find_profiles(args.inputs)
    inputs = [p for p in found.profiles if not p.is_dir()]
    _check_results_path(output, inputs, args.cache_dir)  # fail fast: before any diagnosis work
    config = resolve_config(args.config, args.rule_dirs, args.sets)
    check_config(config)
    profiles = [p for p in found.profiles if args.shard.holds(p)] if args.shard else found.profiles
    if args.cache and profiles and (why_not := cache_problem(args.cache_dir)):
        progress.say(f"warning: reading the profiles without a cache: {why_not}.")  # the workers say nothing
    total = len(profiles)
    progress.begin(total)
    def check_stop() -> None:  # every fraction of a second while the workers run
        stop.check()
        progress.tick()

    where = f"with {worker_count(total, args.jobs)} worker processes"
    if args.executor == "dask" and total:
        from ..runs.batch_dask import diagnose_batch_dask

        def connected(cluster: Any) -> None:
            nonlocal where
            where = f"on {cluster.description}"

        rows = diagnose_batch_dask(profiles, config, scheduler=args.scheduler, jobs=args.jobs, cache=args.cache,
                                   cache_dir=args.cache_dir, on_done=progress.done, check_stop=check_stop,
                                   on_connect=connected)
    else:
        rows = diagnose_batch(profiles, config, jobs=args.jobs, cache=args.cache, cache_dir=args.cache_dir,
                              on_done=progress.done, check_stop=check_stop)
    stop.check()
    _check_results_path(output, inputs, args.cache_dir)  # again: the batch can take long enough for a change
    write_table(rows, output, mode=output_mode(output, current_umask()))
    counts = summary(rows)
    elapsed = time.monotonic() - progress.start
    extra = [text for n, text in (
        (found.skipped, f"skipped {found.skipped} non-export entr{'y' if found.skipped == 1 else 'ies'}"),
        (found.duplicates, f"{found.duplicates} file{'s' if found.duplicates > 1 else ''} reached twice, "
                           f"diagnosed once")) if n]
    if args.shard:
        extra.insert(0, f"shard {args.shard} of the {len(found.profiles)} profiles found")
    done = (f"{total} profiles: {counts['ok']} ok, {counts['errors']} failed, in {elapsed:.1f} s {where}" if total
            else "no profile to diagnose, an empty results file")
    progress.say(f"{done}{''.join('; ' + e for e in extra)}; wrote {output}")
    if counts["internal"]:
        _error(f"internal error: {counts['internal']} of {total} profiles hit a bug in nsys-diagnose (rows whose "
               f"error starts with \"internal error:\" in {output}); diagnose one of them alone with --debug and "
               f"report it.", progress)
        return EXIT_INTERNAL
    if counts["errors"]:
        _error(f"error: {counts['errors']} of {total} profiles could not be diagnosed; the error column of their "
               f"rows in {output} says why.", progress)
        return EXIT_ERROR
    if args.fail_on and has_finding_at_least(rows, args.fail_on):
        return EXIT_FINDINGS
    return EXIT_OK


def _check_results_path(output: Path, inputs: list[Path], cache_dir: Path | None) -> None:
    check_output(output, inputs, cache_dir)
    if os.path.exists(output) and not os.path.isfile(output):
        raise OutputError(f"--out {output} is not a regular file; give the path of a results file (it is written "
                          f"beside its final name and renamed into place).")


def _error(message: str, progress: BatchProgress) -> None:
    progress.clear()
    sys.stderr.write(f"{PROG}: {printable(message)}\n")
