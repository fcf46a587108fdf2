"""What the export says about itself (nsys version, capture options) and what its tables show about the capture
(time window, CUDA-graph trace mode): ProfileInfo, kept in the canonical `profile_info` table."""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from ..base.duck import insert_rows, one_row, scalar
from .adapter_base import Source
from .adapters import METADATA_TABLES
from .canonical import VIEWS


@dataclass
class ProfileInfo:
    path: str
    nsys_version: str | None = None
    schema_version: str | None = None
    export_time_utc: str | None = None
    metadata_table: str | None = None
    command: str | None = None
    graph_trace_setting: str | None = None   # 'graph' or 'node' as recorded in the capture options
    graph_trace_mode: str | None = None      # 'graph' or 'node' when CUDA graphs ran (from the data first)
    start_ns: int | None = None              # span of the traced activity (what is judged)
    end_ns: int | None = None
    session_start_ns: int | None = None      # whole session per ANALYSIS_DETAILS, when recorded
    session_end_ns: int | None = None
    source_tables: list[str] = field(default_factory=list)
    source_format: str = "nsys"              # 'nsys' (an export) or 'kineto' (a PyTorch-profiler trace)
    producer: str | None = None              # what wrote a trace that is no nsys export: 'PyTorch profiler'
    rank: int | None = None                  # the trace's own distributedInfo, when it has one
    world_size: int | None = None

    @property
    def duration_ns(self) -> int | None:
        if self.start_ns is None or self.end_ns is None:
            return None
        return self.end_ns - self.start_ns


def read_metadata(con: duckdb.DuckDBPyConnection, source: Source, info: ProfileInfo) -> None:
    """The export's metadata rows (EXPORT_META_DATA before 2023.3, META_DATA_EXPORT since; none before 2022) and
    the capture options of META_DATA_CAPTURE (2023.3+), whose graph-trace key is matched by its end since it
    carries a PROCESS_0: prefix up to 2025.1 (nsys-schema.md, "Version identification")."""
    meta: dict[str, str] = {}
    for table in METADATA_TABLES:
        if source.has(table):
            info.metadata_table = table
            for name, value in con.execute(f'SELECT name, value FROM src."{table}"').fetchall():
                meta.setdefault(str(name), "" if value is None else str(value))
    info.nsys_version = meta.get("EXPORT_PRODUCT_VERSION") or None
    info.schema_version = meta.get("EXPORT_SCHEMA_VERSION") or None
    info.export_time_utc = meta.get("EXPORT_TIME_UTC") or None
    if source.has("META_DATA_CAPTURE"):
        for name, value in con.execute('SELECT name, value FROM src."META_DATA_CAPTURE"').fetchall():
            name = str(name)
            if name.endswith("CUDA_GRAPH_TRACE_OPTIONS:MODE") and value:
                info.graph_trace_setting = str(value).strip().lower()
            elif name == "PROCESS_0:COMMAND" and value and not info.command:
                info.command = str(value)


def read_window_and_graph_mode(con: duckdb.DuckDBPyConnection, source: Source, info: ProfileInfo,
                               graph_launches: int) -> None:
    """The judged window is the span of the traced activity in the canonical tables: ANALYSIS_DETAILS spans the
    whole session (idle start-up included) and, in derived time-slices, the original capture, so it is kept
    apart. The graph-trace mode comes from the data (graph replays, or kernels with a graph node id) before the
    recorded setting, which only matters when graphs were launched at all."""
    info.start_ns, info.end_ns = one_row(con, """
        SELECT min(s), max(e) FROM (
            SELECT min(start_ns) s, max(end_ns) e FROM kernels
            UNION ALL SELECT min(start_ns), max(end_ns) FROM api_calls
            UNION ALL SELECT min(start_ns), max(end_ns) FROM memcpys
            UNION ALL SELECT min(start_ns), max(end_ns) FROM memsets
            UNION ALL SELECT min(start_ns), max(end_ns) FROM graph_launches
            UNION ALL SELECT min(start_ns), max(end_ns) FROM nvtx_ranges WHERE start_ns >= 0)""")
    if source.has("ANALYSIS_DETAILS"):
        cols = source.tables["ANALYSIS_DETAILS"]
        if "startTime" in cols and "stopTime" in cols:
            row = con.execute('SELECT min(startTime), max(stopTime) FROM src."ANALYSIS_DETAILS"').fetchone()
            if row and row[0] is not None and row[1] is not None and row[1] > row[0]:
                info.session_start_ns, info.session_end_ns = row
    node_kernels = scalar(con, "SELECT count(*) FROM kernels WHERE graph_node_id IS NOT NULL")
    if graph_launches:
        info.graph_trace_mode = "graph"
    elif node_kernels:
        info.graph_trace_mode = "node"
    else:
        launches = scalar(con, "SELECT count(*) FROM api_calls WHERE name_id IN (SELECT id FROM api_names "
                               "WHERE name LIKE 'cudaGraphLaunch%' OR name LIKE 'cuGraphLaunch%')")
        info.graph_trace_mode = info.graph_trace_setting if launches else None


def write_profile_info(con: duckdb.DuckDBPyConnection, info: ProfileInfo, invalid_times: dict[str, int],
                       placement: dict[str, int] | None = None) -> int:
    """Fill the canonical profile_info table; returns its row count. `invalid_times`: rows left out of each
    view for impossible times, read by the invalid_timestamps fact as `invalid_times:<view>`. `placement`: the
    counts of GPU work without a device, under their own keys (`no_device:<view>` ..., Loader._place_deviceless)."""
    pairs = {
        "path": info.path,
        "source_format": info.source_format,
        "producer": info.producer,
        "rank": info.rank,
        "world_size": info.world_size,
        "nsys_version": info.nsys_version,
        "schema_version": info.schema_version,
        "export_time_utc": info.export_time_utc,
        "metadata_table": info.metadata_table,
        "command": info.command,
        "graph_trace_setting": info.graph_trace_setting,
        "graph_trace_mode": info.graph_trace_mode,
        "start_ns": info.start_ns,
        "end_ns": info.end_ns,
        "duration_ns": info.duration_ns,
        "session_start_ns": info.session_start_ns,
        "session_end_ns": info.session_end_ns,
        **{f"invalid_times:{view}": count for view, count in sorted(invalid_times.items())},
        **dict(sorted((placement or {}).items())),
    }
    con.execute(VIEWS["profile_info"].ddl())
    insert_rows(con, "profile_info", [(k, None if v is None else str(v)) for k, v in pairs.items()],
                '("key", "value")')
    return len(pairs)
