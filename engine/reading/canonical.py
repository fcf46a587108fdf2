"""The canonical tables every later stage reads: stable names, unit-suffixed columns, decoded values.

Whatever nsys version wrote the export, these tables have exactly these columns and types. They are filled only
through `fill` (canonical_fill.py), which checks every adapter query against them by column name and type. The
column reference in engine/reading/nsys-schema.md is generated from these definitions (canonical_doc.py);
regenerate it with

    python -m nsys_diagnose.reading.canonical_doc --update engine/reading/nsys-schema.md
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str
    unit: str = ""


@dataclass(frozen=True)
class View:
    name: str
    doc: str
    columns: tuple[Column, ...]

    def ddl(self) -> str:
        return _ddl(self.name, self.columns)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


def _c(name: str, type_: str, doc: str, unit: str = "") -> Column:
    return Column(name, type_, doc, unit)


def _ddl(table: str, columns: tuple[Column, ...]) -> str:
    cols = ", ".join(f'"{c.name}" {c.type}' for c in columns)
    return f'CREATE TABLE "{table}" ({cols})'


_TIME = (
    _c("start_ns", "BIGINT", "Start on the capture timeline (ns).", "ns"),
    _c("end_ns", "BIGINT", "End on the capture timeline (ns).", "ns"),
    _c("dur_ns", "BIGINT", "end_ns - start_ns (ns).", "ns"),
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
                _c("graph_node_id", "BIGINT",
                   "CUDA graph node id when traced with --cuda-graph-trace=node, else NULL."),
                _c("graph_id", "BIGINT", "CUDA graph id (nsys 2025.5+ node mode), else NULL."),
                _c("grid_size", "BIGINT", "gridX*gridY*gridZ (blocks).", "blocks"),
                _c("block_size", "BIGINT", "blockX*blockY*blockZ (threads per block).", "threads"),
                _c("registers_per_thread", "INTEGER", "Registers per thread.", "registers"),
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
                _c("bytes", "BIGINT", "Bytes copied.", "bytes"),
                _c("copy_kind", "VARCHAR", "Direction: HtoD, DtoH, DtoD, HtoH, PtoP, HtoA, AtoH, AtoA, AtoD, DtoA, "
                   "'UVM HtoD', 'UVM DtoH', 'UVM DtoD' or unknown."),
                _c("src_mem", "VARCHAR", "Source memory: pageable, pinned, device, array, managed, device_static, "
                   "managed_static or unknown."),
                _c("dst_mem", "VARCHAR", "Destination memory kind (same words as src_mem)."),
                _c("is_uvm", "BOOLEAN", "True for unified-memory page migrations (copyKind 11-13)."),
                _c("migration_cause", "INTEGER",
                   "UVM migration cause code (ENUM_CUDA_UNIF_MEM_MIGRATION), NULL otherwise."),
                _c("graph_node_id", "BIGINT", "CUDA graph node id when issued from a graph, else NULL."),
            ),
        ),
        View(
            "memsets",
            "One row per memset on a GPU.",
            _TIME
            + _GPU_PLACE
            + (
                _c("bytes", "BIGINT", "Bytes set.", "bytes"),
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
                _c("api_name", "VARCHAR",
                   "Name of the API call that blocked (e.g. cudaDeviceSynchronize), when correlated."),
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
                _c("ts_ns", "BIGINT", "Sample time on the capture timeline (ns).", "ns"),
                _c("device_id", "INTEGER", "GPU the sample belongs to: typeId & 0xFF, TARGET_INFO_GPU.id."),
                _c("metric", "VARCHAR", "Metric name as nsys writes it, e.g. 'DRAM Read Bandwidth [Throughput %]' "
                                        "(2023.4+) or 'DRAM Read Throughput' (2022.4, from GENERIC_EVENTS)."),
                _c("value", "DOUBLE", "Sample value (percent for throughput metrics).", "as the metric name says"),
                _c("chip", "VARCHAR", "Chip of the GPU (TARGET_INFO_GPU.chipName), e.g. 'GH100', when recorded."),
            ),
        ),
        View(
            "osrt_calls",
            "One row per OS-runtime library call on a CPU thread (nsys --trace=osrt: ioctl, poll, read, "
            "pthread_mutex_lock, sem_timedwait ...); empty when OS-runtime calls were not traced.",
            _TIME
            + (
                _c("pid", "BIGINT", "Process id, decoded from globalTid."),
                _c("tid", "BIGINT", "Thread id, decoded from globalTid."),
                _c("global_tid", "BIGINT", "nsys globalTid (the same thread key as api_calls.global_tid)."),
                _c("name", "VARCHAR", "Function called, as nsys records it, e.g. ioctl, poll, pthread_cond_wait."),
                _c("return_value", "BIGINT", "Return value of the call."),
                _c("nesting_level", "INTEGER", "0 for a call made by the application, 1 or more for a traced call "
                   "made inside another one (mmap inside pthread_create): sum only level 0 for time per thread."),
            ),
        ),
        View(
            "cpu_samples",
            "One row per CPU sample of a running thread (nsys --sample with backtraces); empty when CPU "
            "sampling was off.",
            (
                _c("ts_ns", "BIGINT", "Sample time on the capture timeline (ns).", "ns"),
                _c("pid", "BIGINT", "Process id, decoded from globalTid."),
                _c("tid", "BIGINT", "Thread id, decoded from globalTid."),
                _c("global_tid", "BIGINT", "nsys globalTid of the sampled thread (the same key as "
                                           "api_calls.global_tid)."),
                _c("cpu", "INTEGER", "CPU core the thread was running on."),
                _c("function", "VARCHAR", "Function of the leaf frame (the code running when the sample was taken); "
                   "a hex address when nsys could not resolve the symbol; NULL when the sample has no backtrace."),
                _c("module", "VARCHAR", "Path of the binary or library of the leaf frame, e.g. "
                   "/usr/lib64/libcuda.so.545.29.06, or [kernel.kallsyms]; NULL when the sample has no backtrace."),
                _c("kernel_mode", "BOOLEAN", "True when the leaf frame is in the OS kernel; NULL when the sample has "
                   "no backtrace."),
            ),
        ),
        View(
            "devices",
            "GPUs: those listed by the export plus any that did work; `used` marks the ones that did work.",
            (
                _c("device_id", "INTEGER", "CUDA device index."),
                _c("name", "VARCHAR",
                   "Marketing name, e.g. 'NVIDIA H100 80GB HBM3' (NULL when the export lists no GPU)."),
                _c("used", "BOOLEAN", "True when the capture holds kernels, copies, memsets or graph replays on it."),
                _c("sm_count", "INTEGER", "Streaming multiprocessors.", "SMs"),
                _c("memory_bandwidth_bytes_per_s", "BIGINT", "Peak DRAM bandwidth (B/s).", "B/s"),
                _c("total_memory_bytes", "BIGINT", "Device memory (bytes).", "bytes"),
                _c("clock_rate_hz", "BIGINT", "SM clock (Hz).", "Hz"),
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


@dataclass(frozen=True)
class Stored:
    """How a canonical view is kept in the database when it differs from its columns: `derived` columns are
    not stored but computed by the view (from `joins`, with the stored table as `t`); `extra` columns are
    stored for them. Millions of kernels and API calls share a few hundred names, so the rows keep string
    ids and the names live once in kernel_names / api_names."""

    extra: tuple[Column, ...]
    derived: dict[str, str]
    joins: str


STORED = {
    "kernels": Stored(
        extra=(_c("short_name_id", "BIGINT", "StringIds id of `short_name`."),),
        derived={"name": "coalesce(dn.value, sn.value)", "short_name": "coalesce(sn.value, dn.value)"},
        joins="LEFT JOIN {catalog}.kernel_names dn ON dn.id = t.name_id "
              "LEFT JOIN {catalog}.kernel_names sn ON sn.id = t.short_name_id"),
    "api_calls": Stored(  # the class from eventClass, or from the name when the export does not record it
        extra=(_c("event_class", "TINYINT",
                  "nsys eventClass: 0 CUDA runtime, 1 CUDA driver, NULL when not recorded."),),
        derived={"name": "n.name",
                 "api_class": "CASE WHEN t.event_class = 0 THEN 'runtime' WHEN t.event_class = 1 THEN 'driver' "
                              "WHEN n.value LIKE 'cuda%' THEN 'runtime' ELSE 'driver' END"},
        joins="LEFT JOIN {catalog}.api_names n ON n.id = t.name_id"),
}
# Tables of a canonical database besides the views: the names the stored views join back, and the state
# (fingerprint of the profile, what was learned about it) saved with a cache.
SIDE_TABLES: dict[str, View] = {
    t.name: t
    for t in (
        View("kernel_names", "Kernel names, once per StringIds id (joined back by `kernels`).", (
            _c("id", "BIGINT", "StringIds id."),
            _c("value", "VARCHAR", "The string."),
        )),
        View("api_names", "API names, once per StringIds id (joined back by `api_calls`).", (
            _c("id", "BIGINT", "StringIds id."),
            _c("name", "VARCHAR", "The name without its _vNNNN version suffix."),
            _c("value", "VARCHAR", "The name as recorded."),
        )),
        View("_state", "What a cache was built from and what was learned while reading the export.", (
            _c("key", "VARCHAR", "Name."),
            _c("value", "VARCHAR", "Value (JSON or text)."),
        )),
    )
}


def stored_columns(table: str) -> tuple[Column, ...]:
    """The columns `table` has in the database: a view's columns that are not derived, then its extra ones."""
    if table in SIDE_TABLES:
        return SIDE_TABLES[table].columns
    stored = STORED.get(table)
    if stored is None:
        return VIEWS[table].columns
    return tuple(c for c in VIEWS[table].columns if c.name not in stored.derived) + stored.extra


def stored_ddl(table: str) -> str:
    return _ddl(table, stored_columns(table))


def database_ddl() -> dict[str, str]:
    """Every table of a canonical database and the statement that creates it: nothing else may be in one."""
    return {name: stored_ddl(name) for name in (*VIEWS, *SIDE_TABLES)}


def by_id_view(view: str) -> str:
    """The view of a STORED view's rows as they are stored: names as ids, no name joined. DuckDB joins a view's names
    for every row it scans, used or not (about 30 ms per scan of 2 M kernels), so a fact that reads no name scans
    this one instead; team facts may read it too (engine/facts/team_sql.py)."""
    return f"_{view}_by_id"


def by_id_sql(view: str, catalog: str) -> str:
    """The view by_id_view(`view`) over the tables of `catalog`."""
    return f'SELECT * FROM {catalog}."{view}"'


def view_sql(view: str, catalog: str) -> str:
    """The canonical view `view` over the tables of `catalog`."""
    stored = STORED.get(view)
    if stored is None:
        return f'SELECT * FROM {catalog}."{view}"'
    cols = ", ".join(f'{stored.derived.get(c.name, "t." + chr(34) + c.name + chr(34))} AS "{c.name}"'
                     for c in VIEWS[view].columns)
    return f'SELECT {cols} FROM {catalog}."{view}" t {stored.joins.format(catalog=catalog)}'


def stored_rows(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Rows of canonical views (view name -> mappings of its columns) as the rows of the tables that store them:
    every column of the table, NULL where a row gives none; the names of kernels and API calls moved into the
    name tables, as ids (a row's own `name_id` is kept); `dur_ns`, when a row leaves it out, is end_ns - start_ns."""
    out: dict[str, list[dict[str, Any]]] = {}
    names: dict[str, dict[str, int]] = {"kernel_names": {}, "api_names": {}}

    def name_id(table: str, text: Any, given: Any = None) -> Any:
        if text is None:
            return given
        ids = names[table]
        if text not in ids:
            ids[text] = given if given is not None else max([0, *ids.values()]) + 1
        return ids[text]

    for view, rows in tables.items():
        columns = [c.name for c in stored_columns(view)]
        stored = []
        for row in rows:
            row = dict(row)
            start, end = row.get("start_ns"), row.get("end_ns")
            if "dur_ns" in columns and row.get("dur_ns") is None and start is not None and end is not None:
                row["dur_ns"] = end - start
            if view == "kernels":
                row["name_id"] = name_id("kernel_names", row.get("name"), row.get("name_id"))
                row["short_name_id"] = name_id("kernel_names", row.get("short_name"))
            elif view == "api_calls":
                row["name_id"] = name_id("api_names", row.get("name"), row.get("name_id"))
                row["event_class"] = {"runtime": 0, "driver": 1}.get(row.get("api_class") or "")
            stored.append({c: row.get(c) for c in columns})
        out[view] = stored
    out["kernel_names"] = [{"id": i, "value": text} for text, i in names["kernel_names"].items()]
    out["api_names"] = [{"id": i, "name": text, "value": text} for text, i in names["api_names"].items()]
    return out


def definition_text() -> str:
    """Everything that decides the shape of a canonical database: part of the cache format (see cache_format.py)."""
    return "\n".join([*database_ddl().values(), *(view_sql(v, "canon") for v in VIEWS)])

