#!/usr/bin/env python3
"""Benchmark `diagnose` on large synthetic exports against the floor and against NVIDIA's own tools.

usage: python tools/benchmark.py [--kernels 1000000 2000000 5000000 20000000] [--workdir DIR] [--repeat N]
                                 [--json OUT.json] [--no-nsys] [--no-phased] [--no-timings]
                                 [--small EXPORT ...] [--timeout S] [--keep]
                                 [--kineto [--kineto-gzip] [--kineto-writer stream|convert]]

For every size N (kernels) an eager-decode-like export is generated with
`nsys_diagnose.fixtures.generator.generate_large` (one correlated cudaLaunchKernel per kernel, one NVTX range and
one cudaStreamSynchronize per 203-kernel decode step) and kept as WORKDIR/large-N.sqlite, so a later run with the
same --workdir reuses it (after checking its kernel count). Then each of these commands runs --repeat times, each
time in a fresh child process:

  diagnose (cold)          `diagnose FILE --format json -o ... -q --no-cache`: the whole tool, reading the export
                           afresh (without --no-cache when this diagnose does not have it; the row is then just
                           "diagnose").
  diagnose (first run, builds cache) / diagnose (cache reused)
                           only when diagnose has --no-cache: the cache of canonical tables is built by one run and
                           reused by the next (NSYS_DIAGNOSE_CACHE_DIR points into the work directory).
  diagnose (cold, phased) the cold run on the same export with its NVTX step ranges named 'prefill' (every 16th
                           step) and 'decode' (`generate_large(phased=True)`, WORKDIR/large-N-phased.sqlite): the
                           rules then also judge each phase on its own; "phase cost" in the report is this row
                           over the plain cold row, minus one (--no-phased leaves it out).
  floor (gaps)             the least a tool that finds idle gaps must do: start Python, import duckdb, attach the
                           export with the SQLite scanner, copy the needed columns of the four big tables (kernels,
                           CUDA runtime calls, NVTX events, synchronisations) into DuckDB tables once, then compute
                           each device's gaps between kernels with one window (latest earlier end per device) and
                           sum them. "x floor" in the table is wall time divided by this row's.
  floor (copy)             the same without the gaps: the copy alone.
  floor (scan)             the same, but only reading those columns (count(col) per column): the pure cost of
                           getting the rows out of SQLite, without materialising them.
  nsys stats / nsys analyze
                           NVIDIA's default report set / default expert-system rules on the same file (run on a
                           hard link in a scratch directory, since nsys may write beside its input), when `nsys`
                           is on PATH and --no-nsys is not given.

  diagnose (small export)  with --small: a cold run on each given (small, real) export, whose wall time is the
                           fixed cost of one diagnosis.
  diagnose trace (cold) / diagnose trace.gz (cold)
                           with --kineto (--kineto-gzip): the same run as a PyTorch-profiler trace,
                           WORKDIR/large-N.pt.trace.json(.gz), diagnosed cold like the export; "x export" is its wall
                           time over the export's cold row (tools/benchmark_kineto.py writes and caches the trace).

Wall time is time.perf_counter() around the child (median over --repeat runs); peak RSS is the child's own
ru_maxrss from os.wait4 (which on Linux also covers the grandchildren it waited for, e.g. nsys's report scripts),
the maximum over the runs; CPU % is the child's user + system time from the same os.wait4 over its wall time
(100 % = one core busy for the whole run, 200 % = two). A command that exits non-zero is reported as failed with
the tail of its stderr, never timed as if it had worked; one that runs past --timeout is killed (with its process
group) and reported as "> timeout". The export is read once before timing, so every command finds it in the OS
page cache: the numbers are CPU and memory cost, not disk speed. MB means 10^6 bytes throughout.

The report is a Markdown table on standard output; per command, a least-squares fit of wall time and peak RSS
over the sizes (a fixed part plus a part per kernel); the cost of judging phases; a check against the targets
(the cold phased run <= 2.0x the gaps floor, faster than `nsys stats` and >= 5x faster than `nsys analyze` at 2 M
and 5 M kernels; peak RSS <= 800 MB at 2 M, <= 1200 MB at 5 M and <= 2000 MB at 20 M; the cached re-run <= 0.5x the
floor; the fixed cost of a small export <= 0.5 s); where the time went in the largest size's cold run
(`diagnose --timings` on its phased export, or the plain one with --no-phased, run once more after the timed runs:
each stage and each fact of the run and of each phase, with its rows and DuckDB spill; --no-timings leaves it out);
and a description of the machine; --json writes every number. With --kineto, the trace rows beside the export's
cold row, their targets (the cold run on the trace <= 2.0x the one on the export, peak RSS within the export's
limits) and `diagnose --timings` on the largest trace.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ is no package: its sibling module
import benchmark_kineto as kineto  # noqa: E402

DEFAULT_SIZES = (1_000_000, 2_000_000, 5_000_000, 20_000_000)
DEFAULT_TIMEOUT_S = 900.0
FLOOR_CHILD = "_floor-child"  # hidden first argument: run one floor measurement in this (child) process

# The columns of the big tables that a diagnosis needs; only those present in the export are read.
NEEDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start", "end", "deviceId", "streamId", "globalPid", "correlationId", "contextId", "shortName",
        "demangledName", "graphNodeId", "graphId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
        "registersPerThread"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId", "nameId", "returnValue"),
    "NVTX_EVENTS": ("start", "end", "eventType", "globalTid", "text", "textId", "domainId"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        "start", "end", "deviceId", "streamId", "globalPid", "correlationId", "syncType"),
}

DIAGNOSE_COLD = "diagnose (cold)"
DIAGNOSE_PLAIN = "diagnose"
DIAGNOSE_BUILD = "diagnose (first run, builds cache)"
DIAGNOSE_CACHED = "diagnose (cache reused)"
DIAGNOSE_PHASED = "diagnose (cold, phased)"
DIAGNOSE_SMALL = "diagnose (small export)"
FLOOR_GAPS = "floor (gaps)"
FLOOR_COPY = "floor (copy)"
FLOOR_SCAN = "floor (scan)"
NSYS_STATS = "nsys stats"
NSYS_ANALYZE = "nsys analyze"
DIAGNOSE_ROWS = (DIAGNOSE_COLD, DIAGNOSE_PLAIN, DIAGNOSE_BUILD, DIAGNOSE_CACHED, DIAGNOSE_PHASED, DIAGNOSE_SMALL,
                 *kineto.KINETO_ROWS)


# ----------------------------------------------------------------------------------------------------------------
# Results


@dataclass
class Run:
    """One execution of one command in a child process."""

    wall_s: float
    rss_kib: int
    returncode: int | None
    cpu_s: float = 0.0  # user + system time of the child (and the grandchildren it waited for)
    timed_out: bool = False
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0


@dataclass
class Row:
    """One (size, command) line of the report."""

    kernels: int
    file_mb: float
    command: str
    status: str  # "ok", "failed", "timeout", "skipped"
    argv: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    wall_s: float | None = None
    peak_rss_mb: float | None = None
    cpu_pct: float | None = None
    x_floor: float | None = None
    speedup_vs_nsys_stats: float | None = None
    speedup_vs_nsys_analyze: float | None = None
    x_export: float | None = None  # a trace row (--kineto): wall time over the export's cold row at this size
    note: str = ""


@dataclass
class Size:
    """A generated (or reused) export."""

    kernels: int
    path: str
    file_mb: float
    generated_s: float | None  # None when an existing file was reused


# ----------------------------------------------------------------------------------------------------------------
# Running a child and measuring it


def measure(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout_s: float,
            stdout_path: Path) -> Run:
    """Run `argv` in a fresh process (its own process group); wall time and the child's peak RSS."""
    stderr_path = stdout_path.with_suffix(stdout_path.suffix + ".stderr")
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        begin = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        timed_out = threading.Event()
        timer = threading.Timer(timeout_s, _kill_group, (proc.pid, timed_out))
        timer.start()
        try:
            _, status, usage = _wait4(proc.pid)
        except BaseException:  # Ctrl-C: leave no orphan behind
            _kill_group(proc.pid, timed_out)
            proc.wait()
            raise
        finally:
            timer.cancel()
        wall = time.perf_counter() - begin
    proc.returncode = os.waitstatus_to_exitcode(status)  # we reaped it; keep Popen from trying again
    return Run(wall_s=wall, rss_kib=usage.ru_maxrss, returncode=proc.returncode, timed_out=timed_out.is_set(),
               stderr_tail=_tail(stderr_path), cpu_s=usage.ru_utime + usage.ru_stime)


def _wait4(pid: int) -> tuple[int, int, Any]:
    while True:
        try:
            return os.wait4(pid, 0)
        except InterruptedError:  # pragma: no cover - PEP 475 retries already
            continue


def _kill_group(pid: int, flag: threading.Event) -> None:
    flag.set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _tail(path: Path, lines: int = 12, chars: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


def summarise(row: Row, runs: list[Run]) -> Row:
    """Fill status, median wall time and max RSS of `row` from its runs."""
    row.runs = runs
    bad = next((r for r in runs if not r.ok), None)
    if bad is None:
        row.status = "ok"
        row.wall_s = statistics.median(r.wall_s for r in runs)
        row.peak_rss_mb = max(r.rss_kib for r in runs) * 1024 / 1e6
        row.cpu_pct = statistics.median(r.cpu_s / r.wall_s * 100 for r in runs if r.wall_s > 0)
    elif bad.timed_out:
        row.status = "timeout"
        row.wall_s = bad.wall_s
        row.note = f"killed after {bad.wall_s:.0f} s (--timeout)"
    else:
        row.status = "failed"
        row.note = f"exit status {bad.returncode}: " + (bad.stderr_tail or "(no stderr)")
    return row


# ----------------------------------------------------------------------------------------------------------------
# The exports


def export_path(workdir: Path, kernels: int, phased: bool = False) -> Path:
    return workdir / f"large-{kernels}{'-phased' if phased else ''}.sqlite"


def kernel_count(path: Path) -> int | None:
    """Rows in the kernel table, or None when `path` is no readable export."""
    try:
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return None


def ensure_export(workdir: Path, kernels: int, phased: bool = False) -> Size:
    """Reuse WORKDIR/large-N[-phased].sqlite when it holds N kernels, else generate it (atomically, via a temp
    name)."""
    path = export_path(workdir, kernels, phased)
    generated: float | None = None
    if not (path.is_file() and kernel_count(path) == kernels):
        from nsys_diagnose.fixtures.generator import generate_large

        partial = path.with_name(path.name + ".partial")
        partial.unlink(missing_ok=True)
        begin = time.perf_counter()
        generate_large(partial, kernels=kernels, phased=phased)
        generated = time.perf_counter() - begin
        partial.replace(path)
    warm_page_cache(path)
    return Size(kernels=kernels, path=str(path), file_mb=path.stat().st_size / 1e6, generated_s=generated)


def ensure_trace(workdir: Path, export: Size, gz: bool, writer: str) -> Size:
    """The PyTorch-profiler trace of `export`'s run (tools/benchmark_kineto.py), reused when its sidecar matches."""
    path = kineto.trace_path(workdir, export.kernels, gz)
    written = kineto.ensure_trace(Path(export.path), export.kernels, path, writer)
    warm_page_cache(path)
    return Size(kernels=export.kernels, path=str(path), file_mb=path.stat().st_size / 1e6, generated_s=written)


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def present_columns(path: Path) -> dict[str, list[str]]:
    """NEEDED_COLUMNS restricted to the tables and columns this export has."""
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        found: dict[str, list[str]] = {}
        for table, wanted in NEEDED_COLUMNS.items():
            have = {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}
            cols = [c for c in wanted if c in have]
            if cols:
                found[table] = cols
        return found
    finally:
        con.close()


# ----------------------------------------------------------------------------------------------------------------
# The floor (runs in the child process)


def floor_child(mode: str, profile: str, columns_json: str) -> None:
    """Attach `profile` with DuckDB's SQLite scanner and copy ("copy") or read ("scan") the given columns once;
    "gaps" copies, then sums each device's idle gaps between kernels with one window."""
    from nsys_diagnose.base.duck import load_sqlite_scanner, sqlite_reader_connection, sql_literal

    columns: dict[str, list[str]] = json.loads(columns_json)
    con = sqlite_reader_connection(threads=os.cpu_count())
    con.execute("SET preserve_insertion_order=false")
    load_sqlite_scanner(con)
    con.execute(f"ATTACH {sql_literal(profile)} AS src (TYPE sqlite, READ_ONLY)")
    for table, cols in columns.items():
        if mode in ("copy", "gaps"):
            select = ", ".join(_quote(c) for c in cols)
            con.execute(f"CREATE TABLE {_quote(table)} AS SELECT {select} FROM src.{_quote(table)}")
        else:
            select = ", ".join(f"count({_quote(c)})" for c in cols)
            con.execute(f"SELECT {select} FROM src.{_quote(table)}").fetchall()
    if mode == "gaps" and "CUPTI_ACTIVITY_KIND_KERNEL" in columns:
        con.execute(GAPS_SQL).fetchall()
    con.close()


# Each device's idle gaps between kernels: the latest end among its earlier kernels, one window, one sum.
GAPS_SQL = """
    SELECT "deviceId", sum(greatest("start" - prev_end, 0)), count(*)
    FROM (SELECT "deviceId", "start", max("end") OVER (PARTITION BY "deviceId" ORDER BY "start", "end"
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
          FROM "CUPTI_ACTIVITY_KIND_KERNEL")
    GROUP BY "deviceId"
"""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ----------------------------------------------------------------------------------------------------------------
# The commands


@dataclass
class Tools:
    """What is installed: the diagnose command line, whether it has --no-cache, and nsys."""

    diagnose: list[str]
    has_no_cache: bool
    nsys: str | None
    nsys_version: str | None
    has_timings: bool = False  # whether this diagnose has --timings


def find_tools(use_nsys: bool) -> Tools:
    script = Path(sys.executable).parent / "diagnose"
    diagnose = [str(script)] if script.is_file() else [sys.executable, "-m", "nsys_diagnose.cli.main"]
    done = subprocess.run([*diagnose, "--help"], check=False, capture_output=True, text=True, errors="replace")
    help_text = done.stdout
    nsys = shutil.which("nsys") if use_nsys else None
    version = None
    if nsys:
        done = subprocess.run([nsys, "--version"], check=False, capture_output=True, text=True, errors="replace")
        version = done.stdout.strip() or None
    return Tools(diagnose=diagnose, has_no_cache="--no-cache" in help_text, nsys=nsys, nsys_version=version,
                 has_timings="--timings" in help_text)


@dataclass
class Context:
    """Everything a command needs for one size."""

    size: Size
    tools: Tools
    scratch: Path  # per-size scratch directory inside the work directory
    cache_dir: Path
    repeat: int
    timeout_s: float


def run_repeated(ctx: Context, command: str, argv: list[str], *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, before_each: Callable[[], None] | None = None) -> Row:
    runs = []
    for i in range(ctx.repeat):
        if before_each:
            before_each()
        slug = command.replace(" ", "_").replace("(", "").replace(")", "").replace(",", "")
        runs.append(measure(argv, cwd=cwd or ctx.scratch, env=env, timeout_s=ctx.timeout_s,
                            stdout_path=ctx.scratch / f"{slug}.{i}.out"))
        if not runs[-1].ok:
            break
    row = Row(kernels=ctx.size.kernels, file_mb=ctx.size.file_mb, command=command, status="", argv=argv)
    return summarise(row, runs)


def skipped(ctx: Context, command: str, why: str) -> Row:
    return Row(kernels=ctx.size.kernels, file_mb=ctx.size.file_mb, command=command, status="skipped", note=why)


def floor_rows(ctx: Context) -> list[Row]:
    columns = json.dumps(present_columns(Path(ctx.size.path)))
    rows = []
    for command, mode in ((FLOOR_GAPS, "gaps"), (FLOOR_COPY, "copy"), (FLOOR_SCAN, "scan")):
        argv = [sys.executable, str(Path(__file__).resolve()), FLOOR_CHILD, mode, ctx.size.path, columns]
        rows.append(run_repeated(ctx, command, argv))
    return rows


def diagnose_env(cache_dir: Path) -> dict[str, str]:
    return {**os.environ, "NSYS_DIAGNOSE_CACHE_DIR": str(cache_dir)}


def diagnose_rows(ctx: Context) -> list[Row]:
    report = ctx.scratch / "report.json"
    base = [*ctx.tools.diagnose, ctx.size.path, "--format", "json", "-o", str(report), "-q"]
    cold_cache = ctx.scratch / "cache-cold"  # should stay empty with --no-cache; fresh for every run regardless
    reset_cold = functools.partial(_reset_dir, cold_cache)
    if not ctx.tools.has_no_cache:
        row = run_repeated(ctx, DIAGNOSE_PLAIN, base, env=diagnose_env(cold_cache), before_each=reset_cold)
        row.note = row.note or "this diagnose has no --no-cache option"
        return [row]
    rows = [run_repeated(ctx, DIAGNOSE_COLD, [*base, "--no-cache"], env=diagnose_env(cold_cache),
                         before_each=reset_cold)]
    env = diagnose_env(ctx.cache_dir)
    reset_cache = functools.partial(_reset_dir, ctx.cache_dir)
    rows.append(run_repeated(ctx, DIAGNOSE_BUILD, base, env=env, before_each=reset_cache))
    if rows[-1].status == "ok":
        rows.append(run_repeated(ctx, DIAGNOSE_CACHED, base, env=env))
    else:
        rows.append(skipped(ctx, DIAGNOSE_CACHED, "building the cache failed"))
    return rows


def _reset_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def nsys_rows(ctx: Context, use_nsys: bool) -> list[Row]:
    commands = ((NSYS_STATS, "stats"), (NSYS_ANALYZE, "analyze"))
    if not ctx.tools.nsys:
        why = "--no-nsys" if not use_nsys else "nsys not installed"
        return [skipped(ctx, command, why) for command, _ in commands]
    rows = []
    for command, sub in commands:
        where = ctx.scratch / f"nsys-{sub}"
        _reset_dir(where)
        linked = _link_or_copy(Path(ctx.size.path), where / Path(ctx.size.path).name)
        rows.append(run_repeated(ctx, command, [ctx.tools.nsys, sub, str(linked)], cwd=where))
    return rows


def _link_or_copy(source: Path, target: Path) -> Path:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return target


def phased_row(ctx: Context, phased: Size) -> Row:
    """The cold run on the phased twin of this size's export (same kernels, NVTX prefill/decode ranges)."""
    report = ctx.scratch / "report-phased.json"
    cold_cache = ctx.scratch / "cache-cold"
    argv = [*ctx.tools.diagnose, phased.path, "--format", "json", "-o", str(report), "-q"]
    if ctx.tools.has_no_cache:
        argv.append("--no-cache")
    return run_repeated(ctx, DIAGNOSE_PHASED, argv, env=diagnose_env(cold_cache),
                        before_each=functools.partial(_reset_dir, cold_cache))


def trace_rows(ctx: Context, traces: list[Size]) -> list[Row]:
    """The cold run on each PyTorch-profiler trace of this size's export (--kineto), as the export's cold row."""
    rows = []
    cold_cache = ctx.scratch / "cache-cold"
    for trace in traces:
        command = kineto.KINETO_COLD_GZ if trace.path.endswith(".gz") else kineto.KINETO_COLD
        argv = [*ctx.tools.diagnose, trace.path, "--format", "json", "-o", str(ctx.scratch / "report-trace.json"),
                "-q", "--no-cache"]
        rows.append(run_repeated(dataclasses.replace(ctx, size=trace), command, argv, env=diagnose_env(cold_cache),
                                 before_each=functools.partial(_reset_dir, cold_cache)))
    return rows


def measure_size(ctx: Context, use_nsys: bool, phased: Size | None = None,
                 traces: list[Size] | None = None) -> list[Row]:
    rows = [*floor_rows(ctx), *diagnose_rows(ctx)]
    if phased is not None:
        rows.append(phased_row(ctx, phased))
    rows += trace_rows(ctx, traces or [])
    rows += nsys_rows(ctx, use_nsys)
    add_ratios(rows)
    kineto.export_ratios(rows, DIAGNOSE_COLD)
    return rows


def small_rows(paths: list[Path], tools: Tools, scratch: Path, repeat: int, timeout_s: float) -> list[Row]:
    """A cold diagnosis of each small export: its wall time is the fixed cost of one diagnosis."""
    rows = []
    for path in paths:
        size = Size(kernels=kernel_count(path) or 0, path=str(path.resolve()), file_mb=path.stat().st_size / 1e6,
                    generated_s=None)
        warm_page_cache(path)
        ctx = Context(size=size, tools=tools, scratch=scratch, cache_dir=scratch / "cache", repeat=repeat,
                      timeout_s=timeout_s)
        cold_cache = scratch / "cache-cold"
        argv = [*tools.diagnose, size.path, "--format", "json", "-o", str(scratch / "report-small.json"), "-q"]
        if tools.has_no_cache:
            argv.append("--no-cache")
        row = run_repeated(ctx, DIAGNOSE_SMALL, argv, env=diagnose_env(cold_cache),
                           before_each=functools.partial(_reset_dir, cold_cache))
        row.note = path.name
        rows.append(row)
    return rows


@dataclass
class TimingsReport:
    """`diagnose --timings` on one export: where a cold run spends its time."""

    kernels: int
    path: str
    status: str  # "ok", "failed", "timeout"
    table: str


def timings_report(ctx: Context, export: Size) -> TimingsReport:
    """One more cold run of `export` with --timings, untimed: its table of stages and facts (standard error)."""
    cold_cache = ctx.scratch / "cache-cold"
    _reset_dir(cold_cache)
    argv = [*ctx.tools.diagnose, export.path, "--format", "json", "-o", str(ctx.scratch / "report-timings.json"),
            "-q", "--no-cache", "--timings"]
    out = ctx.scratch / "timings.out"
    run = measure(argv, cwd=ctx.scratch, env=diagnose_env(cold_cache), timeout_s=ctx.timeout_s, stdout_path=out)
    text = out.with_suffix(out.suffix + ".stderr").read_text(errors="replace").strip()
    status = "ok" if run.ok else "timeout" if run.timed_out else "failed"
    return TimingsReport(kernels=export.kernels, path=export.path, status=status, table=text)


def add_ratios(rows: list[Row]) -> None:
    """x floor for every row; speed-up against nsys for the diagnose rows (all rows of one size)."""
    by_command = {r.command: r for r in rows if r.status == "ok"}
    floor = by_command.get(FLOOR_GAPS)
    stats, analyze = by_command.get(NSYS_STATS), by_command.get(NSYS_ANALYZE)
    for row in rows:
        if row.status != "ok" or row.wall_s is None:
            continue
        if floor and floor.wall_s:
            row.x_floor = row.wall_s / floor.wall_s
        if row.command in DIAGNOSE_ROWS and row.wall_s > 0:
            row.speedup_vs_nsys_stats = stats.wall_s / row.wall_s if stats and stats.wall_s else None
            row.speedup_vs_nsys_analyze = analyze.wall_s / row.wall_s if analyze and analyze.wall_s else None


# ----------------------------------------------------------------------------------------------------------------
# The machine


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "ram_gb": _ram_gb(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "duckdb": _version("duckdb"),
        "nsys_diagnose": _version("nsys-diagnose"),
        "platform": platform.platform(),
        "git": _git_state(),
    }


def _git_state() -> str | None:
    """Commit of the measured checkout, with "+dirty" when engine/ has uncommitted changes."""
    repo = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, cwd=repo,
                              capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "engine"], check=False, cwd=repo,
                               capture_output=True, text=True)
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _ram_gb() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) * 1024 / 1e9, 1)
    return None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------------------------------------------
# The report

TABLE_HEADER = ("| kernels | file MB | command | wall s | peak RSS MB | CPU % | x floor (gaps) "
                "| x faster than nsys stats | x faster than nsys analyze |")


def markdown_table(rows: list[Row]) -> str:
    lines = [TABLE_HEADER, "|" + "---:|" * 2 + ":---|" + "---:|" * 6]
    for r in rows:
        lines.append("| " + " | ".join([
            _kernels(r.kernels), f"{r.file_mb:.0f}" if r.file_mb >= 10 else f"{r.file_mb:.2f}", r.command,
            _wall(r), _num(r.peak_rss_mb, "{:.0f}"), _num(r.cpu_pct, "{:.0f}"), _num(r.x_floor, "{:.2f}"),
            _num(r.speedup_vs_nsys_stats, "{:.1f}"), _num(r.speedup_vs_nsys_analyze, "{:.1f}")]) + " |")
    return "\n".join(lines)


def _kernels(n: int) -> str:
    if n >= 1_000_000 and n % 100_000 == 0:
        return f"{n / 1e6:g} M"
    if n >= 1000 and n % 100 == 0:
        return f"{n / 1e3:g} k"
    return str(n)


def _wall(r: Row) -> str:
    if r.status == "ok" and r.wall_s is not None:
        return f"{r.wall_s:.2f}"
    if r.status == "timeout" and r.wall_s is not None:
        return f"> {r.wall_s:.0f} (timeout)"
    return "not installed" if r.note == "nsys not installed" else r.status


def _num(value: float | None, fmt: str) -> str:
    return fmt.format(value) if value is not None else ""


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - slope * mx, slope


def scaling(rows: list[Row]) -> list[dict[str, Any]]:
    """Per command measured at two sizes or more: wall time and peak RSS fitted as a fixed part plus a part per
    kernel (least squares over the sizes), and how they grow from the smallest to the largest size."""
    out = []
    for command in dict.fromkeys(r.command for r in rows if r.command != DIAGNOSE_SMALL):
        ok = sorted((r for r in rows if r.command == command and r.status == "ok" and r.wall_s and r.peak_rss_mb),
                    key=lambda r: r.kernels)
        if len({r.kernels for r in ok}) < 2:
            continue
        a, b = ok[0], ok[-1]
        fixed_s, per_kernel_s = fit_line([(r.kernels, r.wall_s) for r in ok])
        fixed_mb, per_kernel_mb = fit_line([(r.kernels, r.peak_rss_mb) for r in ok])
        out.append({"command": command, "from_kernels": a.kernels, "to_kernels": b.kernels,
                    "kernels_ratio": b.kernels / a.kernels, "time_ratio": b.wall_s / a.wall_s,
                    "rss_ratio": b.peak_rss_mb / a.peak_rss_mb,
                    "us_per_kernel": [a.wall_s / a.kernels * 1e6, b.wall_s / b.kernels * 1e6],
                    "fit_fixed_s": fixed_s, "fit_us_per_kernel": per_kernel_s * 1e6,
                    "fit_fixed_mb": fixed_mb, "fit_bytes_per_kernel": per_kernel_mb * 1e6, "sizes": len(ok)})
    return out


def scaling_lines(items: list[dict[str, Any]]) -> list[str]:
    return [f"- {s['command']}: {s['fit_fixed_s']:.2f} s + {s['fit_us_per_kernel']:.2f} us per kernel, "
            f"{s['fit_fixed_mb']:.0f} MB + {s['fit_bytes_per_kernel']:.0f} B per kernel (fit over {s['sizes']} "
            f"sizes); {_kernels(s['from_kernels'])} -> {_kernels(s['to_kernels'])} kernels "
            f"(x{s['kernels_ratio']:g}): time x{s['time_ratio']:.2f}, peak RSS x{s['rss_ratio']:.2f}"
            for s in items]


def phase_cost(rows: list[Row]) -> list[dict[str, Any]]:
    """Per size: what judging each phase on its own adds to the cold run (phased export over plain)."""
    out = []
    for kernels in sorted({r.kernels for r in rows}):
        plain = next((r for r in rows if r.kernels == kernels and r.command == DIAGNOSE_COLD and r.status == "ok"),
                     None)
        phased = next((r for r in rows if r.kernels == kernels and r.command == DIAGNOSE_PHASED
                       and r.status == "ok"), None)
        if plain and phased and plain.wall_s:
            out.append({"kernels": kernels, "plain_s": plain.wall_s, "phased_s": phased.wall_s,
                        "added": phased.wall_s / plain.wall_s - 1})
    return out


def _row(rows: list[Row], kernels: int, *commands: str) -> Row | None:
    return next((r for r in rows if r.kernels == kernels and r.command in commands and r.status == "ok"
                 and r.wall_s is not None), None)


# The targets (Performance v3): the cold phased run at most 2.0x the gaps floor, faster than `nsys stats` and at
# least 5x faster than `nsys analyze` at 2 M and 5 M kernels; peak RSS at most 800 MB at 2 M, 1200 MB at 5 M and
# 2000 MB at 20 M (which must complete); the cached re-run at most 0.5x the floor; a small export's cold run (the
# fixed cost, start-up and imports included) at most 0.5 s.
TARGET_X_FLOOR = 2.0
TARGET_X_ANALYZE = 5.0
TARGET_X_FLOOR_SIZES = (2_000_000, 5_000_000)
TARGET_RSS_MB = {2_000_000: 800, 5_000_000: 1200, 20_000_000: 2000}
TARGET_CACHED_X_FLOOR = 0.5
TARGET_FIXED_S = 0.5


def targets(rows: list[Row]) -> list[str]:
    """The performance targets, each marked met or NOT met (see TARGET_*): per size, the cold run (on the phased
    export when measured, else the plain one) against the gaps floor, `nsys stats` and `nsys analyze` (all sizes
    are reported; the targets hold at 2 M and 5 M kernels), the cached re-run against the floor, every cold
    diagnose row's peak RSS where a limit is set; a small export's cold run against the fixed-cost target."""
    lines = []
    sizes = sorted({r.kernels for r in rows if r.command != DIAGNOSE_SMALL})
    for kernels in sizes:
        cold = _row(rows, kernels, DIAGNOSE_PHASED) or _row(rows, kernels, DIAGNOSE_COLD, DIAGNOSE_PLAIN)
        at = f"{_kernels(kernels)} kernels"
        if cold is None:
            lines.append(f"- {at}: diagnose did not succeed, no target can be checked")
            continue
        which = "cold phased run" if cold.command == DIAGNOSE_PHASED else "cold run"
        held = kernels in TARGET_X_FLOOR_SIZES
        if cold.x_floor is not None:
            lines.append(f"- {at}: {which} {cold.x_floor:.2f}x the gaps floor (target <= {TARGET_X_FLOOR:g}x"
                         + (f"): {_mark(cold.x_floor <= TARGET_X_FLOOR)}" if held else ", at 2 M and 5 M)"))
        if cold.speedup_vs_nsys_stats is not None:
            lines.append(f"- {at}: {which} {cold.speedup_vs_nsys_stats:.2f}x as fast as nsys stats (target > 1x"
                         + (f"): {_mark(cold.speedup_vs_nsys_stats > 1)}" if held else ", at 2 M and 5 M)"))
        if cold.speedup_vs_nsys_analyze is not None:
            lines.append(f"- {at}: {which} {cold.speedup_vs_nsys_analyze:.1f}x faster than nsys analyze (target >= "
                         f"{TARGET_X_ANALYZE:g}x" + (f"): {_mark(cold.speedup_vs_nsys_analyze >= TARGET_X_ANALYZE)}"
                                                     if held else ", at 2 M and 5 M)"))
        cached = _row(rows, kernels, DIAGNOSE_CACHED)
        if cached is not None and cached.x_floor is not None:
            lines.append(f"- {at}: cached re-run {cached.x_floor:.2f}x the gaps floor (target <= "
                         f"{TARGET_CACHED_X_FLOOR:g}x): {_mark(cached.x_floor <= TARGET_CACHED_X_FLOOR)}")
        limit = TARGET_RSS_MB.get(kernels)
        if limit:
            for r in rows:
                if (r.kernels == kernels and r.command in (DIAGNOSE_COLD, DIAGNOSE_PLAIN, DIAGNOSE_PHASED)
                        and r.status == "ok" and r.peak_rss_mb is not None):
                    lines.append(f"- {at}: {r.command} peak RSS {r.peak_rss_mb:.0f} MB (target <= {limit} MB): "
                                 f"{_mark(r.peak_rss_mb <= limit)}")
    for r in rows:
        if r.command == DIAGNOSE_SMALL and r.status == "ok" and r.wall_s is not None:
            lines.append(f"- fixed cost, {r.note}: {r.wall_s:.2f} s (target <= {TARGET_FIXED_S:g} s): "
                         f"{_mark(r.wall_s <= TARGET_FIXED_S)}")
    return lines + kineto.target_lines(rows, DIAGNOSE_COLD, TARGET_RSS_MB, _kernels)


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def render(rows: list[Row], sizes: list[Size], info: dict[str, Any], tools: Tools, repeat: int,
           timings: TimingsReport | None = None, trace_timings: TimingsReport | None = None) -> str:
    parts = [markdown_table(rows), ""]
    traces = kineto.comparison(rows, DIAGNOSE_COLD, _kernels)
    if traces:
        parts += ["PyTorch-profiler traces of the same runs, against the export's cold run:", "", *traces, ""]
    scale = scaling_lines(scaling(rows))
    if scale:
        parts += ["Linear scaling:", *scale, ""]
    phases = phase_cost(rows)
    if phases:
        parts += ["Cost of judging phases (cold run on the phased export over the plain one):",
                  *(f"- {_kernels(c['kernels'])} kernels: {c['plain_s']:.2f} s -> {c['phased_s']:.2f} s "
                    f"({c['added'] * 100:+.0f} %)" for c in phases), ""]
    goal = targets(rows)
    if goal:
        parts += ["Targets:", *goal, ""]
    for report in (timings, trace_timings):
        if report is not None:
            parts += [f"Where the time went: `diagnose --timings`, cold, on {Path(report.path).name} "
                      f"({_kernels(report.kernels)} kernels)" + ("" if report.status == "ok" else f", {report.status}")
                      + ":", "", "```", report.table, "```", ""]
    problems = [f"- {r.command} at {_kernels(r.kernels)}: {r.status}: {r.note}"
                for r in rows if r.status in ("failed", "timeout")]
    if problems:
        parts += ["Problems:", *problems, ""]
    notes = [f"- {r.command} at {_kernels(r.kernels)}: {r.note}" for r in rows
             if r.status == "ok" and r.note and r.command != DIAGNOSE_SMALL]
    if notes:
        parts += ["Notes:", *notes, ""]
    made = ", ".join(f"{_kernels(s.kernels)}{' phased' if s.path.endswith('-phased.sqlite') else ''}"
                     f"{'' if s.path.endswith('.sqlite') else ' trace.gz' if s.path.endswith('.gz') else ' trace'}: "
                     + (f"generated in {s.generated_s:.1f} s" if s.generated_s is not None else "reused")
                     for s in sizes)
    parts += [(f"Machine: {info['cpus']} CPUs ({info['cpu_model']}), {info['ram_gb']} GB RAM, load average at start "
              f"{' / '.join(str(x) for x in info['load_average_at_start'])}; Python {info['python']}, "
              f"DuckDB {info['duckdb']}, nsys-diagnose {info['nsys_diagnose']} ({info['git'] or 'no git'}), "
              f"nsys {tools.nsys_version or 'not used'}. Wall time: median of {repeat} run(s); peak RSS: max. "
              f"Exports ({made}).")]
    return "\n".join(parts)


def write_json(out: Path, rows: list[Row], sizes: list[Size], info: dict[str, Any], tools: Tools,
               repeat: int, timings: TimingsReport | None = None, trace_timings: TimingsReport | None = None) -> None:
    data = {"machine": info, "tools": asdict(tools), "repeat": repeat, "sizes": [asdict(s) for s in sizes],
            "rows": [asdict(r) for r in rows], "scaling": scaling(rows), "phase_cost": phase_cost(rows),
            "targets": targets(rows), "timings": asdict(timings) if timings else None,
            "trace_timings": asdict(trace_timings) if trace_timings else None}
    out.write_text(json.dumps(data, indent=2) + "\n")


# ----------------------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--kernels", type=int, nargs="+", default=list(DEFAULT_SIZES), metavar="N",
                   help="export sizes in kernels (default: 1000000 2000000 5000000 20000000)")
    p.add_argument("--workdir", type=Path,
                   help="where the exports (large-N.sqlite, reused across runs) and scratch files go "
                        "(default: a temporary directory, removed at the end unless --keep)")
    p.add_argument("--repeat", type=int, default=1, help="runs per command; median time, max RSS (default: 1)")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="also write every number to this JSON file")
    p.add_argument("--no-nsys", action="store_true", help="do not run nsys stats / nsys analyze")
    p.add_argument("--no-phased", action="store_true",
                   help="do not measure the cold run on the phased twin of each export")
    p.add_argument("--no-timings", action="store_true",
                   help="do not run `diagnose --timings` once more on the largest size to show where its time went")
    p.add_argument("--small", type=Path, nargs="+", default=[], metavar="EXPORT",
                   help="also diagnose these small exports cold: their wall time is the fixed cost of a diagnosis")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"kill a command after S seconds and report it as a timeout (default: {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--keep", action="store_true", help="keep the work directory (exports, reports, nsys output)")
    p.add_argument("--kineto", action="store_true",
                   help="also diagnose each export's run as a PyTorch-profiler trace (WORKDIR/large-N.pt.trace.json, "
                        "reused across runs) and compare it with the export's cold run")
    p.add_argument("--kineto-gzip", action="store_true", help="with --kineto: the gzipped trace too (.json.gz)")
    p.add_argument("--kineto-writer", choices=kineto.WRITERS, default="stream",
                   help="with --kineto: write the trace streaming (default) or with fixtures' write_kineto "
                        "(convert; memory grows with the trace)")
    args = p.parse_args(argv)
    if args.repeat < 1 or any(n < 1 for n in args.kernels):
        p.error("--repeat and --kernels must be >= 1")
    args.kineto = args.kineto or args.kineto_gzip
    missing = [str(x) for x in args.small if not x.is_file()]
    if missing:
        p.error(f"--small: no such file: {', '.join(missing)}")
    return args


@contextlib.contextmanager
def work_directory(workdir: Path | None, keep: bool) -> Iterator[Path]:
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        yield workdir.resolve()
        return
    path = Path(tempfile.mkdtemp(prefix="nsys-diagnose-bench-"))
    try:
        yield path
    finally:
        if keep:
            print(f"kept {path}", file=sys.stderr)
        else:
            shutil.rmtree(path, ignore_errors=True)


def progress(message: str) -> None:
    print(f"[benchmark] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [FLOOR_CHILD]:
        floor_child(*argv[1:4])
        return 0
    args = parse_args(argv)
    info = machine()
    tools = find_tools(use_nsys=not args.no_nsys)
    rows: list[Row] = []
    sizes: list[Size] = []
    timings: TimingsReport | None = None
    trace_timings: TimingsReport | None = None
    with work_directory(args.workdir, args.keep) as workdir:
        for kernels in sorted(set(args.kernels)):
            progress(f"{_kernels(kernels)} kernels: preparing the export in {workdir}")
            size = ensure_export(workdir, kernels)
            sizes.append(size)
            scratch = workdir / f"scratch-{kernels}"
            _reset_dir(scratch)
            ctx = Context(size=size, tools=tools, scratch=scratch, cache_dir=workdir / "cache", repeat=args.repeat,
                          timeout_s=args.timeout)
            phased = None
            if not args.no_phased:
                progress(f"{_kernels(kernels)} kernels: preparing the phased export")
                phased = ensure_export(workdir, kernels, phased=True)
                sizes.append(phased)
            traces = []
            for gz in ([False, *([True] if args.kineto_gzip else [])] if args.kineto else []):
                progress(f"{_kernels(kernels)} kernels: preparing the PyTorch-profiler trace{' (gzip)' if gz else ''}")
                traces.append(ensure_trace(workdir, size, gz, args.kineto_writer))
            sizes += traces
            progress(f"{_kernels(kernels)} kernels: measuring ({size.file_mb:.0f} MB)")
            size_rows = measure_size(ctx, use_nsys=not args.no_nsys, phased=phased, traces=traces)
            for r in size_rows:
                progress(f"  {r.command}: {_wall(r)}" + (f" s, {r.peak_rss_mb:.0f} MB" if r.status == "ok" else ""))
            rows += size_rows
            if kernels == max(args.kernels) and not args.no_timings and tools.has_timings:
                progress(f"{_kernels(kernels)} kernels: where the time goes (diagnose --timings)")
                timings = timings_report(ctx, phased or size)
                if traces:
                    trace_timings = timings_report(ctx, traces[0])
        if args.small:
            progress("small exports: measuring the fixed cost")
            scratch = workdir / "scratch-small"
            _reset_dir(scratch)
            rows += small_rows(args.small, tools, scratch, args.repeat, args.timeout)
            for r in rows[-len(args.small):]:
                progress(f"  {r.note}: {_wall(r)}")
        if args.json:
            write_json(args.json, rows, sizes, info, tools, args.repeat, timings, trace_timings)
    print(render(rows, sizes, info, tools, args.repeat, timings, trace_timings))
    return 1 if any(r.status in ("failed", "timeout") and r.command in DIAGNOSE_ROWS for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
