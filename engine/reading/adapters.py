"""The table adapters: for each canonical table, the SQL that fills it from the raw tables of an nsys export.

This is the only place that knows how nsys versions differ (engine/reading/nsys-schema.md has the evidence):
two metadata-table names, legacy TARGET_INFO_GPU columns, columns added over the years, NVTX text inline or in
StringIds, pid/tid packed into globalTid, `_vNNNN` API suffixes, enum tables that may be absent (so the codes
are written here), GPUs listed that did no work, graph-mode CUDA graphs.

An adapter is a query whose columns carry the canonical names (`AS start_ns` ...): canonical_fill.fill checks them
against the table and inserts them by name. A column an export lacks reads as a typed NULL (or a default), so
one query serves every version. What the adapters are built from is in adapter_base.py, the StringIds
in string_ids.py.
"""

from __future__ import annotations

from typing import Callable

from .adapter_base import Adapter, Source, _case, _columns, _gpu_place, _has_columns, _pid, _tid, _times

# Enum codes, identical in every export that has the ENUM_* tables (2022.4 to 2026.2); older exports have no
# ENUM tables, so the codes are written here (nsys-schema.md, "Enum codes").
COPY_KINDS = {
    0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}
UVM_COPY_KINDS = (11, 12, 13)
MEM_KINDS = {
    0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device_static",
    6: "managed_static", 7: "unknown",
}
SYNC_TYPES = {0: "unknown", 1: "event_sync", 2: "stream_wait_event", 3: "stream_sync", 4: "context_sync"}
NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 59, 60, 75
# OSRT_API eventClass (ENUM_NSYS_EVENT_CLASS): 27 is a call; 31 and 32 are the markers "OS runtime libraries
# profiling started/finished", which are not calls.
OSRT_CALL, OSRT_PROFILING_STARTED, OSRT_PROFILING_FINISHED = 27, 31, 32

METADATA_TABLES = ("EXPORT_META_DATA", "META_DATA_EXPORT")  # renamed in 2023.3

MISSING_REASON = {
    "kernels": "the export has no CUPTI_ACTIVITY_KIND_KERNEL table: no CUDA kernel was traced "
               "(capture with `diagnose profile`, or `nsys profile --trace=cuda`)",
    "api_calls": "the export has no CUPTI_ACTIVITY_KIND_RUNTIME table: CUDA API calls were not traced",
    "memcpys": "the export has no CUPTI_ACTIVITY_KIND_MEMCPY table: the capture has no CUDA memcpy data",
    "memsets": "the export has no CUPTI_ACTIVITY_KIND_MEMSET table: the capture has no CUDA memset data",
    "syncs": "the export has no CUPTI_ACTIVITY_KIND_SYNCHRONIZATION table: no CPU-blocking synchronisation was traced",
    "graph_launches": "the export has no CUPTI_ACTIVITY_KIND_GRAPH_TRACE table: no CUDA graph replay was "
                      "traced in graph mode",
    "nvtx_ranges": "the export has no NVTX_EVENTS table: the application emitted no NVTX ranges or "
                   "NVTX tracing was off (`--trace=nvtx`; every `diagnose profile` preset turns it on)",
    "gpu_metrics": "the export has no GPU metrics (no GPU_METRICS table, no GPU-metric samples in GENERIC_EVENTS): "
                   "capture with `diagnose profile --gpu-metrics` (nsys: `--gpu-metrics-devices=all`) to get SM, "
                   "tensor-core, DRAM and link throughput",
    "osrt_calls": "the export has no OSRT_API table: OS-runtime calls (poll, ioctl, read, pthread waits ...) were "
                  "not traced; profile with `nsys profile --trace=osrt` (with cuda, nvtx) to see them",
    "cpu_samples": "the export has no COMPOSITE_EVENTS table: the CPU was not sampled; profile with "
                   "`nsys profile --sample=process-tree` and backtraces on (`--sample=cpu` in old nsys releases; "
                   "`nsys status --environment` says whether the system allows CPU sampling) to see which "
                   "functions the CPU ran",
    "devices": "the export lists no GPU (no TARGET_INFO_GPU table)",
    "processes": "the export has no PROCESSES table",
}


# -- The adapters, one function per canonical table ----------------------------------------------------------

def kernels(source: Source) -> list[Adapter]:
    T = "CUPTI_ACTIVITY_KIND_KERNEL"
    c = _columns(source, T, "k")

    # The rows keep the string ids of the names; kernel_names holds each name once (canonical.STORED).
    def select(src: str) -> str:
        return f"""
        SELECT {_times('k')}, {_gpu_place(c)}, {c('contextId')} AS context_id,
               COALESCE({c('demangledName')}, {c('shortName')}) AS name_id,
               NULLIF({c('graphNodeId')}, 0) AS graph_node_id, NULLIF({c('graphId')}, 0) AS graph_id,
               {c('gridX', '1')} * {c('gridY', '1')} * {c('gridZ', '1')} AS grid_size,
               {c('blockX', '1')} * {c('blockY', '1')} * {c('blockZ', '1')} AS block_size,
               {c('registersPerThread')} AS registers_per_thread, {c('shortName')} AS short_name_id
        FROM {src} k"""

    return [Adapter("kernels", T, select)] if source.has(T) else []


def api_calls(source: Source) -> list[Adapter]:
    """Runtime and driver calls: both live in CUPTI_ACTIVITY_KIND_RUNTIME (eventClass tells them apart); a
    separate DRIVER table is documented but seen in no export, and read when present."""
    adapters = []
    for T in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        c = _columns(source, T, "r")

        def select(src: str, c: Callable[..., str] = c) -> str:
            return f"""
            SELECT {_times('r')}, {_pid('r.globalTid')} AS pid, {_tid('r.globalTid')} AS tid,
                   r.globalTid AS global_tid, {c('correlationId')} AS correlation_id, {c('nameId')} AS name_id,
                   {c('returnValue')} AS return_value, CAST({c('eventClass')} AS TINYINT) AS event_class
            FROM {src} r"""

        if source.has(T):
            adapters.append(Adapter("api_calls", T, select))
    return adapters


def memcpys(source: Source) -> list[Adapter]:
    T = "CUPTI_ACTIVITY_KIND_MEMCPY"
    c = _columns(source, T, "m")
    kind = c("copyKind", "0")
    uvm = ", ".join(map(str, UVM_COPY_KINDS))

    def select(src: str) -> str:
        return f"""
        SELECT {_times('m')}, {_gpu_place(c)}, {c('bytes')} AS bytes,
               {_case(kind, COPY_KINDS, 'unknown')} AS copy_kind,
               {_case(c('srcKind', '7'), MEM_KINDS, 'unknown')} AS src_mem,
               {_case(c('dstKind', '7'), MEM_KINDS, 'unknown')} AS dst_mem,
               {kind} IN ({uvm}) AS is_uvm,
               CASE WHEN {kind} IN ({uvm}) THEN {c('migrationCause')} END AS migration_cause,
               NULLIF({c('graphNodeId')}, 0) AS graph_node_id
        FROM {src} m"""

    return [Adapter("memcpys", T, select)] if source.has(T) else []


def memsets(source: Source) -> list[Adapter]:
    T = "CUPTI_ACTIVITY_KIND_MEMSET"
    c = _columns(source, T, "m")

    def select(src: str) -> str:
        return f"""
        SELECT {_times('m')}, {_gpu_place(c)}, {c('bytes')} AS bytes,
               {_case(c('memKind', '7'), MEM_KINDS, 'unknown')} AS mem_kind,
               NULLIF({c('graphNodeId')}, 0) AS graph_node_id
        FROM {src} m"""

    return [Adapter("memsets", T, select)] if source.has(T) else []


def syncs(source: Source) -> list[Adapter]:
    """Reads api_calls (filled before) for the name of the call that blocked."""
    T = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    c = _columns(source, T, "s")

    def select(src: str) -> str:
        return f"""
        SELECT {_times('s')}, {_gpu_place(c)}, {_case(c('syncType', '0'), SYNC_TYPES, 'unknown')} AS sync_type,
               a.name AS api_name
        FROM {src} s
        LEFT JOIN (SELECT a.pid, a.correlation_id, any_value(n.name) AS name
                   FROM api_calls a LEFT JOIN api_names n ON n.id = a.name_id
                   WHERE a.correlation_id IN (SELECT correlationId FROM {src}) GROUP BY ALL) a
          ON a.correlation_id = {c('correlationId')} AND a.pid = {_pid(c('globalPid'))}"""

    return [Adapter("syncs", T, select)] if source.has(T) else []


def graph_launches(source: Source) -> list[Adapter]:
    T = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    c = _columns(source, T, "g")

    def select(src: str) -> str:
        return f"""
        SELECT {_times('g')}, {_gpu_place(c)}, {c('graphId')} AS graph_id, {c('graphExecId')} AS graph_exec_id
        FROM {src} g"""

    return [Adapter("graph_launches", T, select)] if source.has(T) else []


def nvtx_ranges(source: Source) -> list[Adapter]:
    """Complete ranges only (eventType 59 push/pop, 60 start/end); the label is inline `text` or a StringIds
    `textId`; a domain's name is the text of its eventType-75 row, per process."""
    T = "NVTX_EVENTS"
    c = _columns(source, T, "e")
    d = _columns(source, T, "d")

    def select(src: str) -> str:
        return f"""
        WITH domains AS (
            SELECT {d('domainId')} AS domain_id, {_pid('d.globalTid')} AS pid,
                   any_value(COALESCE({d('text', type_='VARCHAR')}, ds.value)) AS name
            FROM {src} d LEFT JOIN _strings ds ON ds.id = {d('textId')}
            WHERE d.eventType = {NVTX_DOMAIN_CREATE}
            GROUP BY ALL)
        SELECT {_times('e')}, {_pid('e.globalTid')} AS pid, {_tid('e.globalTid')} AS tid, e.globalTid AS global_tid,
               COALESCE({c('text', type_='VARCHAR')}, st.value) AS text, dom.name AS domain,
               CASE e.eventType WHEN {NVTX_PUSH_POP} THEN 'push_pop' ELSE 'start_end' END AS range_kind
        FROM {src} e
        LEFT JOIN _strings st ON st.id = {c('textId')}
        LEFT JOIN domains dom ON dom.domain_id = {c('domainId')} AND dom.pid = {_pid('e.globalTid')}
                             AND {c('domainId', '0')} <> 0
        WHERE e.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END})
          AND e."end" IS NOT NULL AND e."end" >= e.start"""

    return [Adapter("nvtx_ranges", T, select)] if source.has(T) else []


def gpu_metrics(source: Source) -> list[Adapter]:
    """GPU-metrics samples, one row per sample and metric, from either export format:

    - nsys 2023 and later: GPU_METRICS rows, named through TARGET_INFO_GPU_METRICS joined on (typeId, metricId),
      since metric ids are not stable across versions (nsys-schema.md, "Pitfalls the reader handles");
    - nsys 2022.4 and earlier: GENERIC_EVENTS rows whose `data` is a JSON object of metric name -> integer
      string (the 2022.4 User Guide, "GPU Metrics > Exporting and Querying Data"); the event types that carry
      GPU metrics are those whose samples have a `GR Active`, `SM Active` or `GPC Clock Frequency` key.

    The GPU is `typeId & 0xFF`, which is TARGET_INFO_GPU.id (NVIDIA's own nsys recipes gpu_metric_util_map and
    nvlink_sum compute it so); the chip comes from that TARGET_INFO_GPU row."""
    info = "TARGET_INFO_GPU_METRICS"
    gpu = "TARGET_INFO_GPU"
    chips = (f'SELECT id AS gpu_id, any_value(chipName) AS chip FROM src."{gpu}" GROUP BY id'
             if _has_columns(source, gpu, ("id", "chipName"))
             else "SELECT NULL::BIGINT AS gpu_id, NULL::VARCHAR AS chip WHERE false")
    if source.has("GPU_METRICS"):
        T = "GPU_METRICS"
        c = _columns(source, T, "g")
        ts = c("timestamp", c("rawTimestamp"))

        def select(src: str) -> str:
            if source.has(info):
                name = "COALESCE(t.metric_name, 'metric ' || g.metricId)"
                names = f"""LEFT JOIN (SELECT typeId AS type_id, metricId AS metric_id,
                                              any_value(metricName) AS metric_name
                                       FROM src."{info}" GROUP BY ALL) t
                              ON t.type_id = g.typeId AND t.metric_id = g.metricId"""
            else:
                name, names = "'metric ' || g.metricId", ""
            return f"""
            SELECT {ts} AS ts_ns, CAST(g.typeId & 255 AS INTEGER) AS device_id, {name} AS metric,
                   CAST(g.value AS DOUBLE) AS value, ch.chip AS chip
            FROM {src} g {names}
            LEFT JOIN ({chips}) ch ON ch.gpu_id = g.typeId & 255"""

        return [Adapter("gpu_metrics", T, select)]
    if _has_columns(source, "GENERIC_EVENTS", ("timestamp", "typeId", "data")):
        def select_generic(src: str) -> str:
            return f"""
            WITH ev AS (SELECT timestamp AS ts_ns, typeId, TRY_CAST(data AS JSON) AS j FROM {src}),
            metric_types AS (
                SELECT DISTINCT typeId FROM ev
                WHERE json_exists(j, '$."GR Active"') OR json_exists(j, '$."SM Active"')
                   OR json_exists(j, '$."GPC Clock Frequency"'))
            SELECT x.ts_ns, x.device_id, x.metric, x.value, ch.chip AS chip
            FROM (SELECT ev.ts_ns, CAST(ev.typeId & 255 AS INTEGER) AS device_id, e.key AS metric,
                         TRY_CAST(e.value AS DOUBLE) AS value
                  FROM ev, unnest(map_entries(json_transform(ev.j, '"MAP(VARCHAR, VARCHAR)"'))) AS u(e)
                  WHERE ev.typeId IN (SELECT typeId FROM metric_types) AND ev.ts_ns IS NOT NULL) x
            LEFT JOIN ({chips}) ch ON ch.gpu_id = x.device_id"""

        return [Adapter("gpu_metrics", "GENERIC_EVENTS", select_generic)]
    return []


def osrt_calls(source: Source) -> list[Adapter]:
    """OS-runtime calls (`nsys profile --trace=osrt`); the name is a StringIds `nameId`, recorded bare (ioctl,
    pthread_mutex_lock: no version suffix). The profiling-started/finished markers (eventClass 31, 32) are left
    out, and so are rows that cannot be placed on the timeline (end before start, start before 0)."""
    T = "OSRT_API"
    c = _columns(source, T, "o")

    def select(src: str) -> str:
        return f"""
        SELECT {_times('o')}, {_pid('o.globalTid')} AS pid, {_tid('o.globalTid')} AS tid, o.globalTid AS global_tid,
               s.value AS name, {c('returnValue')} AS return_value,
               CAST(COALESCE({c('nestingLevel')}, 0) AS INTEGER) AS nesting_level
        FROM {src} o
        LEFT JOIN _strings s ON s.id = {c('nameId')}
        WHERE COALESCE({c('eventClass')}, {OSRT_CALL}) NOT IN ({OSRT_PROFILING_STARTED}, {OSRT_PROFILING_FINISHED})
          AND o.start >= 0 AND o."end" >= o.start"""

    return [Adapter("osrt_calls", T, select)] if _has_columns(source, T, ("start", "end", "globalTid")) else []


def cpu_samples(source: Source) -> list[Adapter]:
    """CPU samples (COMPOSITE_EVENTS) with the leaf frame of their backtrace: the SAMPLING_CALLCHAINS row of the
    same id at stackDepth 0 (the table's key is (id, stackDepth), so the join adds no row); symbol and module
    are StringIds ids. Without callchains the function is NULL. kernelMode is NULL rather than 0 for user frames
    in 2022.4 and 2023.2 exports."""
    T, chains = "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS"
    c = _columns(source, T, "e")
    frame = _columns(source, chains, "l")
    leaf = "NULL::VARCHAR AS function, NULL::VARCHAR AS module, NULL::BOOLEAN AS kernel_mode"
    joins = ""
    if _has_columns(source, chains, ("id", "stackDepth")) and _has_columns(source, T, ("id",)):
        leaf = (f"fs.value AS function, ms.value AS module, "
                f"CASE WHEN l.id IS NOT NULL THEN COALESCE({frame('kernelMode')}, 0) <> 0 END AS kernel_mode")
        joins = f"""
        LEFT JOIN src."{chains}" l ON l.id = e.id AND l.stackDepth = 0
        LEFT JOIN _strings fs ON fs.id = {frame('symbol')}
        LEFT JOIN _strings ms ON ms.id = {frame('module')}"""

    def select(src: str) -> str:
        return f"""
        SELECT e.start AS ts_ns, {_pid('e.globalTid')} AS pid, {_tid('e.globalTid')} AS tid,
               e.globalTid AS global_tid, CAST({c('cpu')} AS INTEGER) AS cpu, {leaf}
        FROM {src} e{joins}
        WHERE e.start >= 0"""

    return [Adapter("cpu_samples", T, select)] if _has_columns(source, T, ("start", "globalTid")) else []


def devices(source: Source) -> list[Adapter]:
    """Every GPU the export lists plus every GPU that did work (TARGET_INFO_GPU lists all GPUs of the host, and
    may be missing). Reads the GPU tables of canonical kernels, memcpys, memsets and graph_launches."""
    T = "TARGET_INFO_GPU"
    g = _columns(source, T, "g")
    device_id = g("id", g("deviceId"))  # legacy exports call it deviceId
    listed = ("SELECT NULL::INTEGER AS device_id, NULL::VARCHAR AS name, NULL::INTEGER AS sm, NULL::BIGINT AS bw, "
              "NULL::BIGINT AS mem, NULL::BIGINT AS clk, NULL::VARCHAR AS cc WHERE false")
    if source.has(T) and "smCount" in source.tables[T]:
        listed = f"""SELECT {device_id}, {g('name', type_='VARCHAR')}, {g('smCount')}, {g('memoryBandwidth')},
                            {g('totalMemory')}, {g('clockRate')}, {g('computeMajor')} || '.' || {g('computeMinor')}
                     FROM src."{T}" g"""
    elif source.has(T) and source.has("TARGET_INFO_CUDA_GPU"):  # legacy: details in a second table, in kB/s and kHz
        listed = f"""SELECT {device_id}, {g('name', type_='VARCHAR')}, c.numMultiprocessors,
                            c.globalMemoryBandwidth * 1000, c.globalMemorySize, c.coreClockRate * 1000,
                            c.computeCapabilityMajor || '.' || c.computeCapabilityMinor
                     FROM src."{T}" g LEFT JOIN src."TARGET_INFO_CUDA_GPU" c ON c.deviceId = {device_id}"""
    elif source.has(T):
        listed = f"""SELECT {device_id}, {g('name', type_='VARCHAR')}, NULL::INTEGER, NULL::BIGINT, NULL::BIGINT,
                            NULL::BIGINT, NULL::VARCHAR
                     FROM src."{T}" g"""

    return [Adapter("devices", None, lambda _src: devices_select(listed), announce=False)]


def devices_select(listed: str) -> str:
    """The devices table from `listed` (a query of device_id, name, sm, bw, mem, clk, cc: the GPUs the profile
    describes) and the GPUs the GPU tables used."""
    return f"""
        WITH listed AS (
            SELECT device_id, any_value(name) AS name, any_value(sm) AS sm, any_value(bw) AS bw,
                   any_value(mem) AS mem, any_value(clk) AS clk, any_value(cc) AS cc
            FROM ({listed}) l(device_id, name, sm, bw, mem, clk, cc)
            WHERE device_id IS NOT NULL GROUP BY device_id),
        used AS (
            SELECT DISTINCT device_id FROM kernels UNION SELECT DISTINCT device_id FROM memcpys
            UNION SELECT DISTINCT device_id FROM memsets UNION SELECT DISTINCT device_id FROM graph_launches)
        SELECT COALESCE(l.device_id, u.device_id) AS device_id, l.name AS name, u.device_id IS NOT NULL AS used,
               l.sm AS sm_count, l.bw AS memory_bandwidth_bytes_per_s, l.mem AS total_memory_bytes,
               l.clk AS clock_rate_hz, l.cc AS compute_capability
        FROM listed l FULL OUTER JOIN (SELECT device_id FROM used WHERE device_id IS NOT NULL) u
          ON u.device_id = l.device_id
        ORDER BY 1"""


def processes(source: Source) -> list[Adapter]:
    """Every process the export lists (PROCESSES, absent before 2022 and in some Windows captures) plus every
    pid seen in kernels, api_calls, memcpys and nvtx_ranges."""
    T = "PROCESSES"

    def select(src: str) -> str:
        listed = (f"SELECT pid, name FROM {src}" if source.has(T)
                  else "SELECT NULL::BIGINT AS pid, NULL::VARCHAR AS name WHERE false")
        return f"""
        WITH listed AS (SELECT pid, any_value(name) AS name FROM ({listed}) WHERE pid IS NOT NULL GROUP BY pid),
             seen AS (SELECT pid FROM kernels UNION SELECT pid FROM api_calls UNION SELECT pid FROM memcpys
                      UNION SELECT pid FROM nvtx_ranges)
        SELECT COALESCE(l.pid, s.pid) AS pid, l.name AS name
        FROM listed l FULL OUTER JOIN (SELECT pid FROM seen WHERE pid IS NOT NULL) s ON s.pid = l.pid
        ORDER BY 1"""

    return [Adapter("processes", T if source.has(T) else None, select, announce=False)]


# In the order the tables are filled: syncs read api_calls; devices and processes read the GPU tables.
ADAPTERS: dict[str, Callable[[Source], list[Adapter]]] = {
    "kernels": kernels,
    "api_calls": api_calls,
    "memcpys": memcpys,
    "memsets": memsets,
    "syncs": syncs,
    "graph_launches": graph_launches,
    "nvtx_ranges": nvtx_ranges,
    "gpu_metrics": gpu_metrics,
    "osrt_calls": osrt_calls,
    "cpu_samples": cpu_samples,
    "devices": devices,
    "processes": processes,
}


def empty_reason(table: str, adapters: list[Adapter]) -> str:
    """Why `table` is empty once filled by `adapters` (none: the export lacks the table it is read from)."""
    if not adapters or table in ("devices", "processes"):
        return MISSING_REASON.get(table, f"the export has no data for {table}")
    if table == "api_calls":
        return "the CUDA API tables of the export are empty"
    if table == "osrt_calls":
        return "the OSRT_API table of the export holds no OS-runtime call"
    return f"the {adapters[0].reads} table of the export is empty"
