"""The floor of tools/benchmark.py, run in a child process of the benchmark (FLOOR_CHILD): the least a tool that
finds idle gaps must do with an export (scan, copy, or copy and sum the gaps between kernels)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
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
