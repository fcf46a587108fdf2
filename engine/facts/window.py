"""The steady window: a capture that opens with a one-off start-up (model load, warm-up) is judged on the work after
it. The `startup` fact (computed over the whole capture, `-- @whole-capture`) says where the start-up ends; the
canonical views of the scratch database are then redefined to hold only what starts from that moment on, so every
other fact, the phases and the team facts judge the steady window through the same views, with no second copy of
the pipeline. Ranges still open at the boundary are kept (an NVTX range around the whole run), and the capture's
duration becomes the steady window's. The views are put back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..reading.canonical import STORED, VIEWS, by_id_sql, by_id_view, view_sql

# The time column each canonical view is cut on; views not named here (devices, processes) are not cut.
_CUT_ON = {"kernels": "start_ns", "memcpys": "start_ns", "memsets": "start_ns", "graph_launches": "start_ns",
           "syncs": "start_ns", "api_calls": "start_ns", "osrt_calls": "start_ns", "gpu_metrics": "ts_ns",
           "cpu_samples": "ts_ns", "nvtx_ranges": "end_ns"}
# A view cut on its end keeps what ends strictly after the cut: the start-up's own last range ends exactly there.
_CUT_ON_END = {"nvtx_ranges"}


def steady_start(startup_rows: list[dict[str, Any]]) -> int | None:
    """Where the steady window begins, or None when the capture is judged whole (no start-up, or nothing steady
    after it)."""
    row = startup_rows[0] if startup_rows else {}
    return int(row["steady_start_ns"]) if row.get("judged_after") and row.get("steady_start_ns") is not None else None


def cut_predicate(view: str, since_ns: int, alias: str = "") -> str:
    """The SQL condition that keeps a row of `view` in the steady window from `since_ns` on ('TRUE' for a view that is
    not cut): an operation belongs to it when it starts there, an NVTX range when it ends after the cut."""
    column = _CUT_ON.get(view)
    if column is None:
        return "TRUE"
    op = ">" if view in _CUT_ON_END else ">="
    return f'{alias + "." if alias else ""}"{column}" {op} {int(since_ns)}'


def _view_sources(con: Any) -> dict[str, str]:
    """The SQL of each canonical view as the export defined it."""
    rows = con.execute("SELECT view_name, sql FROM duckdb_views() WHERE database_name = current_database() "
                       "AND schema_name = 'main' AND NOT internal").fetchall()
    wanted = {*VIEWS, *(by_id_view(v) for v in STORED)}
    return {name: sql for name, sql in rows if name in wanted}


@contextmanager
def steady_window(con: Any, since_ns: int | None) -> Iterator[None]:
    """Within the block, the canonical views hold only what happened from `since_ns` on (nothing changes when it is
    None). An operation belongs to the steady window when it starts there; an NVTX range when it ends there."""
    if since_ns is None:
        yield
        return
    saved = _view_sources(con)
    try:
        for view, column in _CUT_ON.items():
            if view in saved:
                con.execute(f'CREATE OR REPLACE VIEW "{view}" AS SELECT * FROM ({view_sql(view, "canon")}) '
                            f'WHERE {cut_predicate(view, since_ns)}')
            if by_id_view(view) in saved:
                con.execute(f'CREATE OR REPLACE VIEW "{by_id_view(view)}" AS SELECT * FROM '
                            f'({by_id_sql(view, "canon")}) WHERE {cut_predicate(view, since_ns)}')
        if "profile_info" in saved:
            # The capture's duration becomes the steady window's (timestamps count from the capture's start).
            con.execute(f"CREATE OR REPLACE VIEW profile_info_whole AS {_select_of(saved['profile_info'])}")
            # The traced span runs from start_ns to end_ns (engine/reading/metadata.py): the steady window starts at
            # since_ns, so its duration is end_ns - since_ns, not the whole duration less since_ns.
            since = int(since_ns)
            con.execute("CREATE OR REPLACE VIEW profile_info AS SELECT key, CASE "
                        f"WHEN key = 'start_ns' THEN CAST({since} AS VARCHAR) "
                        "WHEN key = 'duration_ns' THEN CAST(greatest((SELECT CAST(value AS BIGINT) FROM "
                        f"profile_info_whole WHERE key = 'end_ns') - {since}, 0) AS VARCHAR) "
                        "ELSE value END AS value FROM profile_info_whole")
        yield
    finally:
        for view, sql in saved.items():
            con.execute(sql if sql.lstrip().upper().startswith("CREATE OR REPLACE") else
                        sql.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
        con.execute("DROP VIEW IF EXISTS profile_info_whole")


def _select_of(create_sql: str) -> str:
    """The SELECT of a `CREATE VIEW name AS SELECT ...` statement."""
    head, sep, tail = create_sql.partition(" AS ")
    return tail.rstrip().rstrip(";") if sep else create_sql
