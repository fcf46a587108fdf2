"""The table adapters of a PyTorch-profiler (Kineto) trace: for each canonical table, the SQL that fills it from the
trace's events, once they are in the `_events` table (engine/reading/kineto.py). They play the part adapters.py
plays for an nsys export, and fill the same columns, so every fact reads either input alike.

What the events hold (pytorch/kineto, libkineto/src/output_json.cpp and CuptiActivity.cpp): GPU work (`kernel`,
`gpu_memcpy`, `gpu_memset`) sits on a `pid` that is the device index and a `tid` that is the stream, with the
device, stream, context and correlation id repeated in `args`; CUDA API calls (`cuda_runtime`, `cuda_driver`) and
CPU ranges (`user_annotation` from record_function, `cpu_op` for each ATen operator) sit on the OS process and
thread; `cuda_sync` events are the CPU-blocking synchronisations CUPTI reports. A copy's direction and memory kinds
are only in its name, `Memcpy HtoD (Pageable -> Device)`; a memset's memory kind in `Memset (Device)`.
"""

from __future__ import annotations

from typing import Callable

from . import adapters as nsys_adapters
from .adapter_base import Adapter, Source
from .adapters import devices_select

# The launching process of GPU work: a trace is one process's, and its GPU events carry the device, not the pid.
_GPU_PID = "coalesce(l.pid, (SELECT pid FROM _host))"
_LAUNCHER = "LEFT JOIN _launchers l ON l.correlation = e.correlation"
_TIMES = "e.ts_ns AS start_ns, e.ts_ns + e.dur_ns AS end_ns, e.dur_ns AS dur_ns"
_GPU_PLACE = (f"CAST(coalesce(e.device, e.pid_n) AS INTEGER) AS device_id, coalesce(e.stream, e.tid_n) AS stream_id, "
              f"{_GPU_PID} AS pid, e.correlation AS correlation_id")
_GLOBAL_TID = "(e.pid_n << 24) | (e.tid_n & 16777215)"

# The words of Kineto's names (memoryKindString, memcpyKindString, syncTypeString in CuptiActivity.cpp) as the
# canonical tables spell them (adapters.MEM_KINDS, COPY_KINDS, SYNC_TYPES).
_MEM_WORD = "replace(lower(trim({0})), ' ', '_')"
_SYNC_TYPES = {"Event Sync": "event_sync", "Stream Wait Event": "stream_wait_event", "Stream Sync": "stream_sync",
               "Context Sync": "context_sync"}

MISSING_REASON = {
    "kernels": "the trace holds no GPU kernel (no `kernel` event): profile with CUDA activities on "
               "(torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]))",
    "api_calls": "the trace holds no CUDA API call (no `cuda_runtime` or `cuda_driver` event): profile with CUDA "
                 "activities on (ProfilerActivity.CUDA)",
    "memcpys": "the trace holds no CUDA memcpy (no `gpu_memcpy` event)",
    "memsets": "the trace holds no CUDA memset (no `gpu_memset` event)",
    "syncs": "the trace holds no CPU-blocking synchronisation record (`cuda_sync` events, which the profiler "
             "writes only when asked: experimental_config=torch._C._profiler._ExperimentalConfig("
             "enable_cuda_sync_events=True)); the synchronising calls themselves (cudaStreamSynchronize ...) are "
             "still counted",
    "graph_launches": "a PyTorch-profiler trace records the kernels a CUDA graph replays one by one, never the "
                      "replay as one interval",
    "nvtx_ranges": "the trace holds no record_function range or operator (no `user_annotation` or `cpu_op` "
                   "event): profile with CPU activities on (ProfilerActivity.CPU)",
    "gpu_metrics": "a PyTorch-profiler trace holds no GPU metrics: capture with nsys (`diagnose profile "
                   "--gpu-metrics`) to get SM, tensor-core, DRAM and link throughput",
    "osrt_calls": "a PyTorch-profiler trace holds no OS-runtime calls (poll, ioctl, read, pthread waits ...): "
                  "capture with nsys (`diagnose profile`) to see them",
    "cpu_samples": "a PyTorch-profiler trace holds no CPU samples: capture with nsys (`nsys profile "
                   "--sample=process-tree`) to see which functions the CPU ran",
    "devices": "the trace lists no GPU (its deviceProperties are empty)",
    "processes": "the trace names no process",
}


def _gpu(category: str, joins: str = "") -> str:
    return f"FROM _events e {_LAUNCHER} {joins} WHERE e.cat = '{category}' AND e.ts_ns IS NOT NULL"


_NAME_JOINS = ("LEFT JOIN _strings s ON s.value = e.name LEFT JOIN _short_names k ON k.name = e.name "
               "LEFT JOIN _strings sn ON sn.value = k.short_name")


def kernels(_source: Source) -> list[Adapter]:
    """A kernel launched by cudaGraphLaunch ran as a node of a CUDA graph: its graph node id is Kineto's when the
    trace records one, else -1 (the canonical column marks graph nodes by being set)."""

    def select(_src: str) -> str:
        return f"""
        SELECT {_TIMES}, {_GPU_PLACE}, e.context AS context_id, s.id AS name_id,
               CASE WHEN l.graph_launch THEN coalesce(e.graph_node, -1) END AS graph_node_id,
               CASE WHEN l.graph_launch THEN e.graph_id END AS graph_id,
               e.grid AS grid_size, e.block AS block_size, CAST(e.registers AS INTEGER) AS registers_per_thread,
               sn.id AS short_name_id
        {_gpu('kernel', _NAME_JOINS)}"""

    return [Adapter("kernels", None, select, announce=False)]


def api_calls(_source: Source) -> list[Adapter]:
    def select(_src: str) -> str:
        return f"""
        SELECT {_TIMES}, e.pid_n AS pid, e.tid_n AS tid, {_GLOBAL_TID} AS global_tid,
               e.correlation AS correlation_id, s.id AS name_id, NULL::BIGINT AS return_value,
               CAST(CASE e.cat WHEN 'cuda_runtime' THEN 0 ELSE 1 END AS TINYINT) AS event_class
        FROM _events e JOIN _strings s ON s.value = e.name
        WHERE e.cat IN ('cuda_runtime', 'cuda_driver') AND e.ts_ns IS NOT NULL"""

    return [Adapter("api_calls", None, select, announce=False)]


def memcpys(_source: Source) -> list[Adapter]:
    parts = "regexp_extract(e.name, '^Memcpy (\\S+) \\((.*) -> (.*)\\)$', ['kind', 'src', 'dst'])"

    def select(_src: str) -> str:
        return f"""
        SELECT start_ns, end_ns, dur_ns, device_id, stream_id, pid, correlation_id, bytes,
               CASE WHEN p.kind IN ('', 'Unknown') THEN 'unknown' ELSE p.kind END AS copy_kind,
               coalesce(nullif({_MEM_WORD.format('p.src')}, ''), 'unknown') AS src_mem,
               coalesce(nullif({_MEM_WORD.format('p.dst')}, ''), 'unknown') AS dst_mem,
               false AS is_uvm, NULL::INTEGER AS migration_cause, NULL::BIGINT AS graph_node_id
        FROM (SELECT {_TIMES}, {_GPU_PLACE}, e.bytes AS bytes, {parts} AS p {_gpu('gpu_memcpy')})"""

    return [Adapter("memcpys", None, select, announce=False)]


def memsets(_source: Source) -> list[Adapter]:
    def select(_src: str) -> str:
        kind = "regexp_extract(e.name, '^Memset \\((.*)\\)$', 1)"
        return f"""
        SELECT {_TIMES}, {_GPU_PLACE}, e.bytes AS bytes,
               coalesce(nullif({_MEM_WORD.format(kind)}, ''), 'unknown') AS mem_kind,
               NULL::BIGINT AS graph_node_id
        {_gpu('gpu_memset')}"""

    return [Adapter("memsets", None, select, announce=False)]


def syncs(_source: Source) -> list[Adapter]:
    """Reads api_calls (filled before) for the name of the call that blocked."""
    whens = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _SYNC_TYPES.items())

    def select(_src: str) -> str:
        return f"""
        SELECT {_TIMES}, {_GPU_PLACE}, CASE e.name {whens} ELSE 'unknown' END AS sync_type, a.name AS api_name
        FROM _events e {_LAUNCHER}
        LEFT JOIN (SELECT a.pid, a.correlation_id, any_value(n.name) AS name
                   FROM api_calls a LEFT JOIN api_names n ON n.id = a.name_id
                   WHERE a.correlation_id IN (SELECT correlation FROM _events WHERE cat = 'cuda_sync')
                   GROUP BY ALL) a
          ON a.correlation_id = e.correlation
        WHERE e.cat = 'cuda_sync' AND e.ts_ns IS NOT NULL"""

    return [Adapter("syncs", None, select, announce=False)]


def nvtx_ranges(_source: Source) -> list[Adapter]:
    """record_function ranges (`user_annotation`) in the default domain, as `torch.cuda.nvtx` ranges would be;
    ATen operators (`cpu_op`) in a domain of their own, `cpu_op`, so that what the host did in a gap between two
    kernels ("inside aten::item") is named as NVTX ranges name it in an nsys capture."""

    def select(_src: str) -> str:
        return f"""
        SELECT {_TIMES}, e.pid_n AS pid, e.tid_n AS tid, {_GLOBAL_TID} AS global_tid, e.name AS text,
               CASE e.cat WHEN 'cpu_op' THEN 'cpu_op' END AS domain, 'push_pop' AS range_kind
        FROM _events e
        WHERE e.cat IN ('user_annotation', 'cpu_op') AND e.ts_ns IS NOT NULL AND e.pid_n IS NOT NULL
          AND e.tid_n IS NOT NULL AND e.dur_ns >= 0"""

    return [Adapter("nvtx_ranges", None, select, announce=False)]


def devices(_source: Source) -> list[Adapter]:
    """The GPUs of deviceProperties (in `_device_properties`) plus every GPU that did work."""
    listed = ("SELECT device_id, name, sm_count, NULL::BIGINT, total_memory, NULL::BIGINT, compute_capability "
              "FROM _device_properties")
    return [Adapter("devices", None, lambda _src: devices_select(listed), announce=False)]

def processes(_source: Source) -> list[Adapter]:
    """The processes named by `process_name` metadata events, plus every pid seen on a CPU thread."""

    def select(_src: str) -> str:
        return """
        WITH listed AS (SELECT pid_n AS pid, any_value(arg_name) AS name FROM _events
                        WHERE ph = 'M' AND name = 'process_name' AND pid_n IS NOT NULL GROUP BY pid_n),
             seen AS (SELECT pid FROM kernels UNION SELECT pid FROM api_calls UNION SELECT pid FROM memcpys
                      UNION SELECT pid FROM nvtx_ranges)
        SELECT s.pid AS pid, l.name AS name
        FROM (SELECT pid FROM seen WHERE pid IS NOT NULL) s LEFT JOIN listed l ON l.pid = s.pid
        ORDER BY 1"""

    return [Adapter("processes", None, select, announce=False)]


def _none(_source: Source) -> list[Adapter]:
    return []


# Every canonical table in adapters.ADAPTERS's order (syncs read api_calls; devices and processes the GPU tables);
# those a trace cannot fill have no adapter.
_FILLED = {"kernels": kernels, "api_calls": api_calls, "memcpys": memcpys, "memsets": memsets, "syncs": syncs,
           "nvtx_ranges": nvtx_ranges, "devices": devices, "processes": processes}
ADAPTERS: dict[str, Callable[[Source], list[Adapter]]] = {table: _FILLED.get(table, _none)
                                                          for table in nsys_adapters.ADAPTERS}
