#!/usr/bin/env python3
"""Benchmark `diagnose` on large synthetic exports against the floor and against NVIDIA's own tools.

usage: python tools/benchmark.py [--kernels 1000000 2000000 5000000 20000000] [--workdir DIR] [--repeat N]
                                 [--json OUT.json] [--no-nsys] [--no-phased] [--no-cached] [--no-timings]
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
                           reused by the next (NSYS_DIAGNOSE_CACHE_DIR points into the work directory);
                           --no-cached leaves both out.
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
  bare DuckDB start        with --small, once: `python -c "import duckdb; duckdb.connect().execute('select 1')
                           .fetchall()"`, the least any DuckDB-based tool pays; the fixed-cost target is a ratio to it.
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
over the sizes (a fixed part plus a part per kernel); the cost of judging phases; a check against the targets, each
a ratio of rows measured in the same run (the cold phased run <= 3.0x the gaps floor and >= 2x faster than `nsys
analyze` at 2 M kernels, <= 2x the wall time of `nsys stats` at 20 M; the phased run <= 1.2x the plain one at every
size; peak RSS <= 800 MB at 2 M, <= 1200 MB at 5 M and <= 2000 MB at 20 M; the cached re-run <= 0.5x the floor; a
small export's cold run <= 4x a bare DuckDB start, the row "bare DuckDB start" that --small adds: Python, `import
duckdb`, one query); where the time went in the largest size's cold run
(`diagnose --timings` on its phased export, or the plain one with --no-phased, run once more after the timed runs:
each stage and each fact of the run and of each phase, with its rows and DuckDB spill; --no-timings leaves it out);
and a description of the machine; --json writes every number. With --kineto, the trace rows beside the export's
cold row, their targets (the cold run on the trace <= 2.0x the one on the export, peak RSS within the export's
limits) and `diagnose --timings` on the largest trace.

The parts, beside this command line: benchmark_inputs.py (the exports and traces), benchmark_measure.py (running
and measuring a child), benchmark_floor.py (the floor child), benchmark_commands.py (the commands of each size),
benchmark_report.py (the table, fits, targets and JSON), benchmark_kineto.py (the trace rows and writer).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ is no package: its sibling modules
import benchmark_kineto as kineto  # noqa: E402
from benchmark_commands import (DIAGNOSE_ROWS, Context, TimingsReport, _reset_dir, find_tools,  # noqa: E402
                                measure_size, small_rows, timings_report)
from benchmark_floor import FLOOR_CHILD, floor_child  # noqa: E402
from benchmark_inputs import ensure_export, ensure_trace  # noqa: E402
from benchmark_measure import Row, Size  # noqa: E402
from benchmark_report import _kernels, _wall, machine, render, write_json  # noqa: E402

DEFAULT_SIZES = (1_000_000, 2_000_000, 5_000_000, 20_000_000)
DEFAULT_TIMEOUT_S = 900.0


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
    p.add_argument("--no-cached", action="store_true",
                   help="leave out the runs that build and reuse the cache (the cold runs only)")
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
            size_rows = measure_size(ctx, use_nsys=not args.no_nsys, phased=phased, traces=traces,
                                     cached=not args.no_cached)
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
