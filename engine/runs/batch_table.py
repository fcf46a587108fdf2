"""The table of a batch: one row per profile, the same columns for every row (COLUMNS: the verdict, the key
metrics, the findings), and writing it to a Parquet, CSV or JSON Lines file (engine/runs/batch.py fills it)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from ..base.duck import offline_connection, reraise_interrupt, sql_literal
from ..base.errors import INTERNAL, InputError, OutputError
from ..reading.inputs import SQLITE_MAGIC, is_report, is_trace
from ..reports.metrics import METRICS, Metric
from ..base.text import is_utf8, printable, shown_path
from ..model.report import Report
from ..base.vocabulary import Severity


TABLE_FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}
STATUS_OK, STATUS_ERROR = "ok", "error"  # the status column: diagnosed, or an error row


# ------------------------------------------------------------------------------------------------------------
# The table: one row per profile, the same columns for every row
# ------------------------------------------------------------------------------------------------------------
def _metric_type(metric: Metric) -> str:
    return "BIGINT" if metric.unit in ("count", "bytes") else "DOUBLE"


# The key metrics of the single-profile report (engine/reports/metrics.py), one column each, named by their key.
METRIC_COLUMNS: tuple[Metric, ...] = tuple(m for m in METRICS if m.report)
FINDING_FIELDS = {"rule": "VARCHAR", "category": "VARCHAR", "severity": "VARCHAR", "subject": "VARCHAR",
                  "phase": "VARCHAR", "impact": "DOUBLE", "title": "VARCHAR"}
COLUMNS: dict[str, Any] = {
    "path": "VARCHAR",
    "status": "VARCHAR",          # ok | error
    "error": "VARCHAR",           # one sentence; null when ok
    "verdict": "VARCHAR",         # category of the primary bottleneck, 'none' when nothing is wrong
    "verdict_rule": "VARCHAR",
    "headline": "VARCHAR",
    "primary_cost": "DOUBLE",     # the verdict's impact: share of the GPU time the primary finding costs (0-1)
    "phase": "VARCHAR",
    "stack": "VARCHAR",
    "source_format": "VARCHAR",   # nsys (an export) or kineto (a PyTorch-profiler trace); null when neither
    "nsys_version": "VARCHAR",
    "duration_ns": "BIGINT",
    **{m.key: _metric_type(m) for m in METRIC_COLUMNS},
    **{f"findings_{s}": "BIGINT" for s in Severity.names()},
    "findings": [FINDING_FIELDS],
    "seconds": "DOUBLE",          # wall time of this profile's diagnosis in its worker
}


def _finite(value: Any, kind: str) -> int | float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if number != number or number in (float("inf"), float("-inf")):
        return None
    return round(number) if kind == "BIGINT" else number


def report_row(path: str, report: Report, seconds: float) -> dict[str, Any]:
    verdict, profile = report.verdict, report.profile
    metrics = {row.key: row.value for row in report.key_metrics}
    findings = [{"rule": f.rule, "category": f.category, "severity": f.severity.value, "subject": f.subject,
                 "phase": f.phase, "impact": f.impact, "title": f.title} for f in report.findings]
    return {
        "path": shown_path(path), "status": STATUS_OK, "error": None,
        "verdict": verdict.primary or "none", "verdict_rule": verdict.rule, "headline": verdict.headline,
        "primary_cost": verdict.impact, "phase": verdict.phase,
        "stack": profile.stack.name if profile.stack else None, "source_format": profile.source_format,
        "nsys_version": profile.nsys_version,
        "duration_ns": profile.duration_ns,
        **{m.key: _finite(metrics.get(m.key), _metric_type(m)) for m in METRIC_COLUMNS},
        **{f"findings_{s}": sum(1 for f in findings if f["severity"] == s) for s in Severity.names()},
        "findings": findings, "seconds": seconds,
    }


def error_row(path: str, message: str, seconds: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {name: None for name in COLUMNS}
    row.update(path=shown_path(path), status=STATUS_ERROR, error=printable(message), seconds=seconds,
               source_format=source_format_of(Path(path)))
    return row


def source_format_of(path: Path) -> str | None:
    """What a profile that could not be diagnosed is, from its first bytes: 'nsys' (a SQLite database or an
    .nsys-rep report), 'kineto' (JSON in object form, plain or gzipped: a trace, or meant to be one), else None."""
    try:
        if not path.is_file():
            return None
        if is_report(path):
            return "nsys"
        with open(path, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                return "nsys"
        return "kineto" if is_trace(path) else None
    except OSError:
        return None


def is_internal(row: dict[str, Any]) -> bool:
    return row["status"] == STATUS_ERROR and str(row["error"]).startswith(INTERNAL)


# ------------------------------------------------------------------------------------------------------------
# Writing the table
# ------------------------------------------------------------------------------------------------------------
def table_format(path: Path) -> str | None:
    """parquet, csv or jsonl from the file name; None for any other name."""
    return TABLE_FORMATS.get(path.suffix.lower())


def write_table(rows: Sequence[dict[str, Any]], output: Path, *, mode: int) -> None:
    """Write `rows` to `output` (the format from its extension) atomically: DuckDB writes the file in a private
    temporary directory beside the target (0700: nobody else can read it while it is written), and it is renamed
    onto the target when complete; nothing is left behind. `mode`: the permissions of the finished file."""
    fmt = table_format(output)
    if fmt is None:
        raise InputError(f"{output}: the results file must end in {', '.join(TABLE_FORMATS)}.")
    target = Path(os.path.realpath(output))
    workdir = Path(tempfile.mkdtemp(prefix=f".{shown_path(target.name)[:200]}.", suffix=".tmp", dir=target.parent))
    through: Path | None = None
    try:
        written = workdir / f"results.{fmt}"
        if is_utf8(str(workdir)):
            _copy_rows(rows, written, fmt, output)
        else:  # DuckDB takes file names as UTF-8 text only: it writes through a link to the directory
            through = Path(tempfile.mkdtemp(prefix="nsys-diagnose-results-"))
            (through / "out").symlink_to(workdir, target_is_directory=True)
            _copy_rows(rows, through / "out" / written.name, fmt, output)
        fd = os.open(written, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(written, target)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(output)) from None  # name the results file, not the temporary
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if through is not None:
            shutil.rmtree(through, ignore_errors=True)  # the link only, never what it leads to


_COPY = {
    "parquet": ("SELECT * FROM results", "FORMAT parquet"),
    "csv": ("SELECT * REPLACE (to_json(findings)::VARCHAR AS findings) FROM results", "FORMAT csv, HEADER"),
    "jsonl": ("SELECT * FROM results", "FORMAT json"),  # newline-delimited: one object per line
}


def _copy_rows(rows: Sequence[dict[str, Any]], path: Path, fmt: str, output: Path) -> None:
    """The rows, typed by COLUMNS (from_json reads them with exactly that structure), copied to `path` by DuckDB."""
    query, options = _COPY[fmt]
    con = offline_connection(threads=1)
    try:
        con.execute(f"CREATE TABLE batch AS SELECT unnest(from_json(?::JSON, {sql_literal(json.dumps([COLUMNS]))}), "
                    f"recursive := false) AS r", [json.dumps(_printable(list(rows)), default=str)])
        con.execute("CREATE VIEW results AS SELECT r.* FROM batch")
        con.execute(f"COPY ({query}) TO {sql_literal(str(path))} ({options})")
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        raise OutputError(f"{output}: the results could not be written "
                          f"({' '.join(str(exc).split())[:300]}).") from None
    finally:
        con.close()


def _printable(value: Any) -> Any:
    """`value` with every string valid UTF-8 (text.printable), as DuckDB's JSON reader needs: a file name that is
    not UTF-8 is a row like any other, never a results file that cannot be written."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_printable(v) for v in value]
    return value


def output_mode(output: Path, umask: int) -> int:
    """A replaced results file keeps its mode; a new one gets what the umask gives new files."""
    try:
        st = os.stat(output)
    except OSError:
        return 0o666 & ~umask
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o666 & ~umask


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    errors = [r for r in rows if r["status"] == STATUS_ERROR]
    return {"profiles": len(rows), "ok": len(rows) - len(errors), "errors": len(errors),
            "internal": sum(1 for r in errors if is_internal(r))}


def has_finding_at_least(rows: Iterable[dict[str, Any]], severity: str) -> bool:
    return any(Severity(f["severity"]).at_least(severity) for r in rows for f in r["findings"] or [])
