"""The commands tools/benchmark.py measures for each size (the floor, diagnose cold / building / reusing its cache,
the phased export, the traces, nsys), each run --repeat times into one Row, and the ratios between the rows."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import benchmark_kineto as kineto
from benchmark_floor import FLOOR_CHILD, present_columns
from benchmark_inputs import kernel_count, warm_page_cache
from benchmark_measure import Row, Size, measure, summarise

# The floor runs in a child process of the benchmark script itself (its hidden FLOOR_CHILD argument).
BENCHMARK_SCRIPT = Path(__file__).resolve().with_name("benchmark.py")

DIAGNOSE_COLD = "diagnose (cold)"
DIAGNOSE_PLAIN = "diagnose"
DIAGNOSE_BUILD = "diagnose (first run, builds cache)"
DIAGNOSE_CACHED = "diagnose (cache reused)"
DIAGNOSE_PHASED = "diagnose (cold, phased)"
DIAGNOSE_SMALL = "diagnose (small export)"
BARE_DUCKDB = "bare DuckDB start"
# What the fixed cost of a diagnosis is compared with: Python started, duckdb imported, one query answered.
BARE_DUCKDB_CODE = "import duckdb; duckdb.connect().execute('select 1').fetchall()"
FLOOR_GAPS = "floor (gaps)"
FLOOR_COPY = "floor (copy)"
FLOOR_SCAN = "floor (scan)"
NSYS_STATS = "nsys stats"
NSYS_ANALYZE = "nsys analyze"
DIAGNOSE_ROWS = (DIAGNOSE_COLD, DIAGNOSE_PLAIN, DIAGNOSE_BUILD, DIAGNOSE_CACHED, DIAGNOSE_PHASED, DIAGNOSE_SMALL,
                 *kineto.KINETO_ROWS)


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
        argv = [sys.executable, str(BENCHMARK_SCRIPT), FLOOR_CHILD, mode, ctx.size.path, columns]
        rows.append(run_repeated(ctx, command, argv))
    return rows


def diagnose_env(cache_dir: Path) -> dict[str, str]:
    return {**os.environ, "NSYS_DIAGNOSE_CACHE_DIR": str(cache_dir)}


def diagnose_rows(ctx: Context, cached: bool = True) -> list[Row]:
    """The cold run, then (`cached`) the run that builds the cache and the one that reuses it."""
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
    if not cached:
        return rows
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
                 traces: list[Size] | None = None, cached: bool = True) -> list[Row]:
    rows = [*floor_rows(ctx), *diagnose_rows(ctx, cached)]
    if phased is not None:
        rows.append(phased_row(ctx, phased))
    rows += trace_rows(ctx, traces or [])
    rows += nsys_rows(ctx, use_nsys)
    add_ratios(rows)
    kineto.export_ratios(rows, DIAGNOSE_COLD)
    return rows


def small_rows(paths: list[Path], tools: Tools, scratch: Path, repeat: int, timeout_s: float) -> list[Row]:
    """A cold diagnosis of each small export: its wall time is the fixed cost of one diagnosis; first, a bare DuckDB
    start (BARE_DUCKDB_CODE in the same Python), what that fixed cost is compared with."""
    rows = []
    if paths:
        ctx = Context(size=Size(kernels=0, path="", file_mb=0.0, generated_s=None), tools=tools, scratch=scratch,
                      cache_dir=scratch / "cache", repeat=repeat, timeout_s=timeout_s)
        row = run_repeated(ctx, BARE_DUCKDB, [sys.executable, "-c", BARE_DUCKDB_CODE])
        row.note = "python -c \"" + BARE_DUCKDB_CODE + "\""
        rows.append(row)
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
