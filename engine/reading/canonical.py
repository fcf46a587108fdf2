"""The canonical views every later stage reads: stable names, unit-suffixed columns, decoded values.

Whatever nsys version wrote the export, these tables have exactly these columns and types. The
schema doubles as documentation (README "Canonical views" is generated from it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class View:
    name: str
    doc: str
    columns: tuple[Column, ...]

    def ddl(self) -> str:
        cols = ", ".join(f'"{c.name}" {c.type}' for c in self.columns)
        return f'CREATE TABLE "{self.name}" ({cols})'

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


def _c(name: str, type_: str, doc: str) -> Column:
    return Column(name, type_, doc)


_TIME = (
    _c("start_ns", "BIGINT", "Start on the capture timeline (ns)."),
    _c("end_ns", "BIGINT", "End on the capture timeline (ns)."),
    _c("dur_ns", "BIGINT", "end_ns - start_ns (ns)."),
)
_GPU_PLACE = (
    _c("device_id", "INTEGER", "CUDA device index (TARGET_INFO_GPU.id)."),
    _c("stream_id", "BIGINT", "CUDA stream id."),
    _c("pid", "BIGINT", "Process id, decoded from globalPid."),
    _c("correlation_id", "BIGINT", "Links the GPU activity to the API call that issued it (same pid)."),
)

VIEWS: dict[str, View] = {
    v.name: v
    for v in (
        View(
            "kernels",
            "One row per CUDA kernel execution on a GPU.",
            _TIME
            + _GPU_PLACE
            + (
                _c("context_id", "BIGINT", "CUDA context id."),
                _c("name", "VARCHAR", "Demangled kernel name (falls back to the short name)."),
                _c("short_name", "VARCHAR", "Base kernel name without template arguments."),
                _c("name_id", "BIGINT", "StringIds id of `name`: equal ids mean equal names, so facts can group "
                                        "and match millions of kernels on an integer instead of a string."),
                _c("graph_node_id", "BIGINT", "CUDA graph node id when traced with --cuda-graph-trace=node, else NULL."),
                _c("graph_id", "BIGINT", "CUDA graph id (nsys 2025.5+ node mode), else NULL."),
                _c("grid_size", "BIGINT", "gridX*gridY*gridZ (blocks)."),
                _c("block_size", "BIGINT", "blockX*blockY*blockZ (threads per block)."),
                _c("registers_per_thread", "INTEGER", "Registers per thread."),
            ),
        ),
        View(
            "api_calls",
            "One row per CUDA runtime or driver API call on a CPU thread.",
            _TIME
            + (
                _c("pid", "BIGINT", "Process id, decoded from globalTid."),
                _c("tid", "BIGINT", "Thread id, decoded from globalTid."),
                _c("global_tid", "BIGINT", "nsys globalTid (unique thread key across processes)."),
                _c("correlation_id", "BIGINT", "Matches correlation_id of the GPU work it issued (same pid)."),
                _c("name", "VARCHAR", "API name without the _vNNNN version suffix, e.g. cudaLaunchKernel."),
                _c("name_id", "BIGINT", "StringIds id of the recorded name (versions of one API have different "
                                        "ids but the same `name`)."),
                _c("api_class", "VARCHAR", "'runtime' (cuda*) or 'driver' (cu*)."),
                _c("return_value", "BIGINT", "CUDA return code (0 = success)."),
            ),
        ),
        View(
            "memcpys",
            "One row per memory copy on a GPU, including unified-memory migrations.",
            _TIME
            + _GPU_PLACE
            + (
                _c("bytes", "BIGINT", "Bytes copied."),
                _c("copy_kind", "VARCHAR", "Direction: HtoD, DtoH, DtoD, HtoH, PtoP, HtoA, AtoH, AtoA, AtoD, DtoA, "
                   "'UVM HtoD', 'UVM DtoH', 'UVM DtoD' or unknown."),
                _c("src_mem", "VARCHAR", "Source memory: pageable, pinned, device, array, managed, device_static, "
                   "managed_static or unknown."),
                _c("dst_mem", "VARCHAR", "Destination memory kind (same words as src_mem)."),
                _c("is_uvm", "BOOLEAN", "True for unified-memory page migrations (copyKind 11-13)."),
                _c("migration_cause", "INTEGER", "UVM migration cause code (ENUM_CUDA_UNIF_MEM_MIGRATION), NULL otherwise."),
                _c("graph_node_id", "BIGINT", "CUDA graph node id when issued from a graph, else NULL."),
            ),
        ),
        View(
            "memsets",
            "One row per memset on a GPU.",
            _TIME
            + _GPU_PLACE
            + (
                _c("bytes", "BIGINT", "Bytes set."),
                _c("mem_kind", "VARCHAR", "Memory kind (same words as memcpys.src_mem)."),
                _c("graph_node_id", "BIGINT", "CUDA graph node id when issued from a graph, else NULL."),
            ),
        ),
        View(
            "syncs",
            "One row per CPU-blocking synchronisation seen by CUPTI.",
            _TIME
            + _GPU_PLACE
            + (
                _c("sync_type", "VARCHAR", "event_sync, stream_wait_event, stream_sync, context_sync or unknown "
                   "(CUPTI's label; older drivers mislabel, prefer api_name)."),
                _c("api_name", "VARCHAR", "Name of the API call that blocked (e.g. cudaDeviceSynchronize), when correlated."),
            ),
        ),
        View(
            "graph_launches",
            "One row per CUDA graph replay traced in graph mode (CUPTI_ACTIVITY_KIND_GRAPH_TRACE); "
            "the kernels of such graphs are absent from `kernels`.",
            _TIME
            + _GPU_PLACE
            + (
                _c("graph_id", "BIGINT", "CUDA graph id."),
                _c("graph_exec_id", "BIGINT", "Executable graph id."),
            ),
        ),
        View(
            "nvtx_ranges",
            "One row per complete NVTX range (push/pop or start/end); instants and open ranges are dropped.",
            _TIME
            + (
                _c("pid", "BIGINT", "Process id of the thread that opened the range."),
                _c("tid", "BIGINT", "Thread id of the thread that opened the range."),
                _c("global_tid", "BIGINT", "nsys globalTid of that thread."),
                _c("text", "VARCHAR", "Range label (inline text or registered string)."),
                _c("domain", "VARCHAR", "NVTX domain name, NULL for the default domain."),
                _c("range_kind", "VARCHAR", "'push_pop' or 'start_end'."),
            ),
        ),
        View(
            "gpu_metrics",
            "GPU-metrics samples (nsys --gpu-metrics-devices), one row per sample and metric.",
            (
                _c("ts_ns", "BIGINT", "Sample time on the capture timeline (ns)."),
                _c("device_id", "INTEGER", "GPU the sample belongs to (low byte of GPU_METRICS.typeId)."),
                _c("metric", "VARCHAR", "Metric name as nsys writes it, e.g. 'DRAM Read Bandwidth [Throughput %]'."),
                _c("value", "DOUBLE", "Sample value (percent for throughput metrics)."),
            ),
        ),
        View(
            "devices",
            "GPUs: those listed by the export plus any that did work; `used` marks the ones that did work.",
            (
                _c("device_id", "INTEGER", "CUDA device index."),
                _c("name", "VARCHAR", "Marketing name, e.g. 'NVIDIA H100 80GB HBM3' (NULL when the export lists no GPU)."),
                _c("used", "BOOLEAN", "True when the capture holds kernels, copies, memsets or graph replays on it."),
                _c("sm_count", "INTEGER", "Streaming multiprocessors."),
                _c("memory_bandwidth_bytes_per_s", "BIGINT", "Peak DRAM bandwidth (B/s)."),
                _c("total_memory_bytes", "BIGINT", "Device memory (bytes)."),
                _c("clock_rate_hz", "BIGINT", "SM clock (Hz)."),
                _c("compute_capability", "VARCHAR", "e.g. '9.0'."),
            ),
        ),
        View(
            "processes",
            "Processes seen in the capture.",
            (
                _c("pid", "BIGINT", "Process id."),
                _c("name", "VARCHAR", "Executable name when the export records it."),
            ),
        ),
        View(
            "profile_info",
            "Key/value facts about the export itself (nsys version, graph-trace mode, time window ...).",
            (
                _c("key", "VARCHAR", "Name."),
                _c("value", "VARCHAR", "Value as text."),
            ),
        ),
    )
}


# -- How the canonical tables are stored ------------------------------------------------------------------------

@dataclass(frozen=True)
class Stored:
    """How a canonical view is kept in the database when it differs from its columns: `derived` columns are
    not stored but computed by the view (from `joins`, with the stored table as `t`); `extra` columns are
    stored for them. Millions of kernels and API calls share a few hundred names, so the rows keep string
    ids and the names live once in kernel_names / api_names."""

    extra: str
    derived: dict[str, str]
    joins: str


STORED = {
    "kernels": Stored(
        extra="short_name_id BIGINT",
        derived={"name": "coalesce(dn.value, sn.value)", "short_name": "coalesce(sn.value, dn.value)"},
        joins="LEFT JOIN {catalog}.kernel_names dn ON dn.id = t.name_id "
              "LEFT JOIN {catalog}.kernel_names sn ON sn.id = t.short_name_id"),
    "api_calls": Stored(  # the class from eventClass, or from the name when the export does not record it
        extra="event_class TINYINT",
        derived={"name": "n.name",
                 "api_class": "CASE WHEN t.event_class = 0 THEN 'runtime' WHEN t.event_class = 1 THEN 'driver' "
                              "WHEN n.value LIKE 'cuda%' THEN 'runtime' ELSE 'driver' END"},
        joins="LEFT JOIN {catalog}.api_names n ON n.id = t.name_id"),
}

# Tables of a canonical database besides the views: the names the stored views join back, and the state
# (fingerprint of the profile, what was learned about it) saved with a cache.
SIDE_TABLES = {
    "kernel_names": 'CREATE TABLE "kernel_names" ("id" BIGINT, "value" VARCHAR)',
    "api_names": 'CREATE TABLE "api_names" ("id" BIGINT, "name" VARCHAR, "value" VARCHAR)',
    "_state": 'CREATE TABLE "_state" ("key" VARCHAR, "value" VARCHAR)',
}


def stored_ddl(view: str) -> str:
    """The table as stored: the canonical columns that are not derived, then the extra ones."""
    stored = STORED.get(view)
    if stored is None:
        return VIEWS[view].ddl()
    cols = [f'"{c.name}" {c.type}' for c in VIEWS[view].columns if c.name not in stored.derived]
    return f'CREATE TABLE "{view}" ({", ".join(cols)}, {stored.extra})'


def database_ddl() -> dict[str, str]:
    """Every table of a canonical database and the statement that creates it: nothing else may be in one."""
    return {**{name: stored_ddl(name) for name in VIEWS}, **SIDE_TABLES}


def view_sql(view: str, catalog: str) -> str:
    """The canonical view `view` over the tables of `catalog`."""
    stored = STORED.get(view)
    if stored is None:
        return f'SELECT * FROM {catalog}."{view}"'
    cols = ", ".join(f'{stored.derived.get(c.name, "t." + chr(34) + c.name + chr(34))} AS "{c.name}"'
                     for c in VIEWS[view].columns)
    return f'SELECT {cols} FROM {catalog}."{view}" t {stored.joins.format(catalog=catalog)}'
