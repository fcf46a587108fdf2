"""Smoke test of tools/benchmark.py on a tiny export (no nsys needed): every command gets a row, the diagnose
rows succeed with a positive wall time and peak RSS, the JSON and the Markdown table agree, and a second run
with the same work directory reuses the export."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "benchmark.py"
HEADER = ("| kernels | file MB | command | wall s | peak RSS MB | CPU % | x floor (gaps) "
          "| x faster than nsys stats | x faster than nsys analyze |")

pytestmark = pytest.mark.slow(reason="benchmark smoke: runs tools/benchmark.py end to end")


def _bench(workdir: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--kernels", "3000", "--no-nsys", "--repeat", "1", "--workdir", str(workdir),
         "--json", str(out)],
        check=False, capture_output=True, text=True, timeout=120, cwd=workdir)


def test_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench(tmp_path, out)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    rows = {r["command"]: r for r in data["rows"]}

    assert {"floor (gaps)", "floor (copy)", "floor (scan)", "nsys stats", "nsys analyze"} <= rows.keys()
    diagnose = [c for c in rows if c.startswith("diagnose")]
    assert diagnose, rows.keys()
    if data["tools"]["has_no_cache"]:
        assert {"diagnose (cold)", "diagnose (first run, builds cache)", "diagnose (cache reused)"} <= set(diagnose)
    else:
        assert diagnose == ["diagnose"]
    for command in ("floor (gaps)", "floor (copy)", "floor (scan)", *diagnose):
        row = rows[command]
        assert row["status"] == "ok", row
        assert row["kernels"] == 3000
        assert row["wall_s"] > 0 and row["peak_rss_mb"] > 0
        assert all(run["returncode"] == 0 and run["wall_s"] > 0 and run["rss_kib"] > 0 for run in row["runs"])
        assert row["x_floor"] > 0 and row["cpu_pct"] > 0
    assert rows["nsys stats"]["status"] == rows["nsys analyze"]["status"] == "skipped"
    assert data["sizes"][0]["kernels"] == 3000 and data["sizes"][0]["generated_s"] is not None
    assert data["machine"]["cpus"] >= 1 and data["machine"]["duckdb"]

    lines = done.stdout.splitlines()
    assert HEADER in lines
    assert any(line.startswith("| 3 k |") and "| floor (gaps) |" in line for line in lines)
    # the phased twin is measured beside the plain export, and what phases cost is reported
    assert rows["diagnose (cold, phased)"]["status"] == "ok"
    assert data["phase_cost"][0]["kernels"] == 3000 and "Cost of judging phases" in done.stdout
    assert any(t.startswith("- 3 k kernels: cold phased run") and "the gaps floor" in t for t in data["targets"])
    # where the largest size's cold run spent its time: the stages and facts of `diagnose --timings`
    assert data["timings"]["kernels"] == 3000 and data["timings"]["status"] == "ok"
    assert "read the export" in data["timings"]["table"] and "_idle_gaps" in data["timings"]["table"]
    assert "Where the time went: `diagnose --timings`" in done.stdout
    assert (tmp_path / "large-3000.sqlite").is_file()

    # same work directory: the export is reused, not generated again
    again = _bench(tmp_path, out)
    assert again.returncode == 0, again.stderr
    assert json.loads(out.read_text())["sizes"][0]["generated_s"] is None


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_under_test", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _part(name: str) -> ModuleType:
    """A sibling module of tools/benchmark.py, importable once _module() has put tools/ on sys.path."""
    return importlib.import_module(name)


def test_failing_and_hanging_commands_are_not_timed(tmp_path: Path) -> None:
    bench = _module()
    measuring, report = _part("benchmark_measure"), _part("benchmark_report")
    failing = measuring.measure([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"],
                            cwd=tmp_path, timeout_s=60, stdout_path=tmp_path / "fail.out")
    assert failing.returncode == 3 and not failing.ok and failing.stderr_tail == "boom"
    hanging = measuring.measure([sys.executable, "-c", "import time; time.sleep(60)"],
                            cwd=tmp_path, timeout_s=0.5, stdout_path=tmp_path / "hang.out")
    assert hanging.timed_out and not hanging.ok and hanging.wall_s < 30

    row = measuring.summarise(bench.Row(kernels=1, file_mb=0.1, command="x", status=""), [failing])
    assert row.status == "failed" and row.wall_s is None and "exit status 3" in row.note and "boom" in row.note
    row = measuring.summarise(bench.Row(kernels=1, file_mb=0.1, command="x", status=""), [hanging])
    assert row.status == "timeout"
    assert "timeout" in report.markdown_table([row])


def test_kineto_trace_rows(tmp_path: Path) -> None:
    """--kineto: the streaming writer writes the bytes write_kineto writes, the trace is cached beside the export,
    and the trace row runs `diagnose TRACE ... --no-cache` and is compared with the export's cold row (a stand-in
    for diagnose: nothing is timed here)."""
    from nsys_diagnose.fixtures._kineto import write_kineto
    from nsys_diagnose.fixtures.generator import generate_large

    bench = _module()
    commands, report = _part("benchmark_commands"), _part("benchmark_report")
    export = tmp_path / "large-2000.sqlite"
    generate_large(export, kernels=2000)
    size = bench.Size(kernels=2000, path=str(export), file_mb=export.stat().st_size / 1e6, generated_s=None)

    trace = bench.ensure_trace(tmp_path, size, False, "stream")
    assert trace.path == str(tmp_path / "large-2000.pt.trace.json") and trace.generated_s is not None
    converted = tmp_path / "convert" / "large-2000.pt.trace.json"
    write_kineto(export, converted)
    assert Path(trace.path).read_bytes() == converted.read_bytes()
    events = json.loads(Path(trace.path).read_text())["traceEvents"]
    assert sum(e.get("cat") == "kernel" for e in events) == 2000
    assert bench.ensure_trace(tmp_path, size, False, "stream").generated_s is None  # reused
    gz = bench.ensure_trace(tmp_path, size, True, "stream")
    assert gz.path.endswith(".pt.trace.json.gz") and Path(gz.path).read_bytes()[:2] == b"\x1f\x8b"

    fake = ("import sys; a = sys.argv[1:]; "
            "sys.exit(0 if a[0].endswith('.pt.trace.json') and a[-1] == '--no-cache' and '-q' in a else 9)")
    tools = commands.Tools(diagnose=[sys.executable, "-c", fake], has_no_cache=True, nsys=None, nsys_version=None)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ctx = bench.Context(size=size, tools=tools, scratch=scratch, cache_dir=tmp_path / "cache", repeat=1,
                        timeout_s=60)
    (row,) = commands.trace_rows(ctx, [trace])
    assert row.status == "ok", row.note
    assert row.command == "diagnose trace (cold)" and row.file_mb == trace.file_mb
    cold = bench.Row(kernels=2000, file_mb=size.file_mb, command="diagnose (cold)", status="ok", wall_s=row.wall_s / 2,
                     peak_rss_mb=100.0)
    bench.kineto.export_ratios([cold, row], "diagnose (cold)")
    assert row.x_export is not None and 1.9 < row.x_export < 2.1
    assert any("diagnose trace (cold)" in t and "the export's cold run" in t for t in report.targets([cold, row]))
    assert "| 2 k | plain |" in "\n".join(bench.kineto.comparison([cold, row], "diagnose (cold)", bench._kernels))
    assert bench.parse_args(["--kineto-gzip"]).kineto


def test_targets_are_ratios_of_rows_measured_in_one_run() -> None:
    """Each target compares rows of the same run: the phased run with the floor, nsys and the plain run at the sizes
    where the target holds, and a small export with the bare DuckDB start measured beside it."""
    bench = _module()
    commands, report = _part("benchmark_commands"), _part("benchmark_report")

    def row(kernels: int, command: str, wall: float, **ratios: float) -> object:
        return bench.Row(kernels=kernels, file_mb=1.0, command=command, status="ok", wall_s=wall, peak_rss_mb=700,
                         **ratios, note="small.sqlite" if command == commands.DIAGNOSE_SMALL else "")

    rows = [row(2_000_000, commands.DIAGNOSE_COLD, 5.0), row(2_000_000, commands.DIAGNOSE_PHASED, 6.5, x_floor=3.5,
                                                               speedup_vs_nsys_analyze=2.5, speedup_vs_nsys_stats=0.6),
            row(20_000_000, commands.DIAGNOSE_PHASED, 80.0, speedup_vs_nsys_stats=0.5, x_floor=3.5),
            row(0, commands.BARE_DUCKDB, 0.1), row(10, commands.DIAGNOSE_SMALL, 0.35)]
    lines = report.targets(rows)
    at_2m = [line for line in lines if line.startswith("- 2 M kernels")]
    assert any("3.50x the gaps floor (target <= 3x): NOT met" in line for line in at_2m), at_2m
    assert any("2.5x faster than nsys analyze (target >= 2x): met" in line for line in at_2m), at_2m
    assert any("phased run 1.30x the run without phases (target <= 1.2x): NOT met" in line for line in at_2m), at_2m
    # nsys stats and the floor are held at the size each target names, and only reported elsewhere
    assert any("1.67x the wall time of nsys stats (target <= 2x, at 20 M)" in line for line in at_2m), at_2m
    assert any(line.startswith("- 20 M kernels") and "2.00x the wall time of nsys stats (target <= 2x): met" in line
               for line in lines), lines
    assert any("3.50x the gaps floor (target <= 3x, at 2 M)" in line for line in lines if "20 M" in line), lines
    assert any("3.5x a bare DuckDB start (0.10 s; target <= 4x): met" in line for line in lines), lines
