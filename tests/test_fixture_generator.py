"""Tests of the synthetic nsys export generator (fixtures/generator.py).

Every check reads the generated SQLite files directly with sqlite3 and recomputes the ground truth from the
rows; the shape tests compare each generated table with the real export of the same nsys version in the
real-export corpus (tests/conftest.py REAL_DIR; slow tier, skipped when the corpus is absent).
"""

from __future__ import annotations

import bisect
import json
import re
import sqlite3
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from nsys_diagnose.fixtures import generator as gen
from nsys_diagnose.fixtures import runs
from nsys_diagnose.fixtures.runs import RUN_SCENARIOS, RunScenario
from nsys_diagnose.fixtures.generator import SCENARIOS, Scenario, generate, generate_large, main

from conftest import scenario_path, slow_but

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REAL = SHARED / "real-profiles"
SCHEMA_MD = SHARED / "nsys-schema.md"
EXAMPLES = REPO / "fixtures" / "examples"

needs_real = pytest.mark.real_exports  # tests/conftest.py skips these when the corpus is absent

NAMES = list(SCENARIOS)  # every scenario module of fixtures/scenarios/, by name (tests/test_scenario_registry.py)
CAPTURE = ["empty_capture", "nvtx_only", "cuda_api_only", "tiny_capture"]
PRIMARIES = {"launch-bound", "pcie-bound", "unified-memory", "api-latency", "multi-gpu-imbalance", "memory-bound",
             "low-utilization", "capture", "host-bound", "small-kernels", "occupancy", "compute-bound",
             "communication-bound", "fusion", None}
# tables no real export here contains; their columns follow NVIDIA's documented export schema (Nsight Systems
# User Guide, "SQLite Schema Reference"), checked against the schema notes by test_documented_tables_follow_schema_md
DOCUMENTED = {
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ["start", "end", "deviceId", "contextId", "greenContextId", "streamId",
                                        "correlationId", "globalPid", "graphId", "graphExecId"],
    "GPU_METRICS": ["timestamp", "typeId", "metricId", "value"],
    "TARGET_INFO_GPU_METRICS": ["typeId", "sourceId", "typeName", "metricId", "metricName"],
}
# nsys 2022.4 GPU-metrics tables (generic events), written by the 2022.1-era metric scenarios: in no real export
# here either; columns as the 2022.4.2 exporter and the User Guide's schema reference give them
DOCUMENTED_GENERIC = {
    "GENERIC_EVENT_SOURCES": ["sourceId", "data"],
    "GENERIC_EVENT_TYPES": ["typeId", "sourceId", "data"],
    "GENERIC_EVENTS": ["rawTimestamp", "timestamp", "typeId", "data"],
}
# tables the reference export of an era lacks, compared with the real export (of an older nsys) they were copied
# from instead: the OSRT_API text is the same in every real export here that has one (2022.4.2, 2023.2.3)
_SAMPLED_2024 = "Sh1mwww__llama3-inference__real_inference_simulation__2024.6.2_RTX4060Ti_llm-sim-nvtx.sqlite"
BORROWED = {"2024.6": {"OSRT_API": "wenscarl__cutlass_benchmark__report1__2023.2.3_A100+A40_cutlass-gemm.sqlite",
                       "COMPOSITE_EVENTS": _SAMPLED_2024, "SAMPLING_CALLCHAINS": _SAMPLED_2024}}
REFERENCES = {  # era -> real exports (first wins for a table present in several)
    "2024.6": ["NVIDIA__Fuser__report1__2024.6.2_8xH100node_matmul-test.sqlite"],
    "2022.1": ["MohanadOdema__DLProf__w_Relu_nsys_profile__2022.1.3_RTX2070S_pytorch-cnn-dlprof.sqlite"],
    "2025.5": ["florianmattana__CUDA-Kernels__prof__2025.5.2_windows_RTX5070Ti-laptop_gemm.sqlite",
               "GindaChen__nsys-ai__mock__2026.1.1_RTX3080-WSL_torch-minimal.sqlite"],
}
DLPROF_COLUMNS = {"kernel_name", "long_kernel_name", "cuda_name"}  # added by DLProf, not by nsys
PID_MASK = 0xFFFFFF


# ------------------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------------------
def connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def tables(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


def rows(path: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with connect(path) as con:
        return con.execute(sql, args).fetchall()


def one(path: Path, sql: str, args: tuple[Any, ...] = ()) -> Any:
    return rows(path, sql, args)[0][0]


def union_stats(intervals: list[tuple[int, int]]) -> tuple[float, list[int], int]:
    """(busy fraction of [first start, last end], positive gaps between merged intervals, span)."""
    iv = sorted(intervals)
    busy, gaps = 0, []
    cs, ce = iv[0]
    for s, e in iv[1:]:
        if s > ce:
            busy += ce - cs
            gaps.append(s - ce)
            cs, ce = s, e
        else:
            ce = max(ce, e)
    busy += ce - cs
    span = max(e for _, e in iv) - iv[0][0]
    return busy / span, gaps, span


def in_range(value: float, bounds: tuple[float, float]) -> bool:
    return bounds[0] <= value <= bounds[1]


def kernel_intervals(path: Path, device: int | None = None) -> list[tuple[int, int]]:
    sql = "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL"
    return rows(path, sql + " WHERE deviceId = ?", (device,)) if device is not None else rows(path, sql)


def runtime_by_name(path: Path, pattern: str) -> list[tuple[int, int, int, int, int]]:
    """(start, end, globalTid, correlationId, eventClass) of RUNTIME rows whose name matches LIKE pattern."""
    return rows(path, """SELECT r.start, r.end, r.globalTid, r.correlationId, r.eventClass
                         FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                         WHERE s.value LIKE ? ORDER BY r.start""", (pattern,))


def launch_of_kernels(path: Path) -> list[tuple[int, int, int, int, str]]:
    """(kernel start, kernel end, api start, api globalTid, api name) per kernel, joined on (pid, corr)."""
    return rows(path, """
        SELECT k.start, k.end, r.start, r.globalTid, s.value
        FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
             AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215)
        JOIN StringIds s ON s.id = r.nameId ORDER BY k.start""")


def nvtx_ranges(path: Path) -> list[tuple[int, int, str, int, int]]:
    """(start, end, label, globalTid, domainId) of eventType 59 ranges, label from text or textId."""
    return rows(path, """SELECT e.start, e.end, COALESCE(e.text, s.value), e.globalTid, e.domainId
                         FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                         WHERE e.eventType = 59 ORDER BY e.start""")


def range_of(t: int, tid: int, ranges: list[tuple[int, int, str, int, int]], label: str) -> bool:
    return any(s <= t <= e and g == tid for s, e, lab, g, _ in ranges if lab == label)


def meta(path: Path, table: str) -> dict[str, str]:
    return dict(rows(path, f"SELECT name, value FROM {table}"))


class _Scenarios(dict):
    """Scenario name -> its export (seed 0, shared with the other modules), generated when a test first reads it."""

    def __missing__(self, name: str) -> Path:
        if name not in NAMES:
            raise KeyError(name)
        self[name] = scenario_path(name)
        return self[name]


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return _Scenarios()


# ------------------------------------------------------------------------------------------------------------
# registry
# ------------------------------------------------------------------------------------------------------------
def test_registry() -> None:
    assert list(SCENARIOS) == sorted(NAMES)  # one module per scenario, listed by name
    for name, s in SCENARIOS.items():
        assert isinstance(s, Scenario) and s.name == name
        assert s.expected_primary in PRIMARIES
        assert s.description.endswith(".") and len(s.description) > 40
        assert s.truth and s.schema in REFERENCES
    expected = {"eager_decode": "launch-bound", "graph_decode_node": None, "graph_decode_graph": None,
                "prefill_decode_nvtx": "launch-bound", "pageable_copies": "pcie-bound", "sync_storm": "api-latency",
                "multi_gpu_straggler": "multi-gpu-imbalance", "memory_bound_metrics": "memory-bound",
                "old_schema_2022": "launch-bound", "new_schema_2025": "launch-bound", "healthy_prefill": None,
                "uvm_migration_storm": "unified-memory", "empty_capture": "capture", "nvtx_only": "capture",
                "cuda_api_only": "capture", "tiny_capture": "capture", "clock_glitch": "launch-bound",
                "graph_host_gaps": "host-bound", "alloc_churn": "api-latency", "tiny_kernels_queued": "small-kernels",
                "healthy_graph_decode": None, "graph_replays_fill": None, "hidden_copies": None,
                "small_grid_decode": "occupancy",
                "prefill_heavy_eager_decode": "launch-bound", "idle_server_bursts": "launch-bound",
                "short_decode_after_prefills": "launch-bound",
                "server_bursts_short_waits": "launch-bound", "server_bursts_epoll": "launch-bound",
                "reference_batch1_decode": "launch-bound",
                "tensor_idle_fp32_prefill": "compute-bound", "latency_bound_decode": "compute-bound",
                "nvlink_saturated_tp2": "communication-bound", "metrics_coarse_decode": "launch-bound",
                "metrics_2022_tu10x": "compute-bound", "metrics_2022_ga100": "memory-bound",
                "metrics_2022_gh100": None, "metrics_unknown_names": None,
                # the steady loop's verdict, judged after the model load (tests/test_startup.py)
                "model_load_decode": None, "model_load_no_nvtx": None, "model_load_pcie_loop": "pcie-bound",
                "model_load_only": "pcie-bound", "eager_unfused_glue": "fusion", "long_context_decode": None,
                "fp32_sgemm_a100": "compute-bound", "bf16_xmma_a100": None,
                # the same FP32 GEMMs on a Turing GPU (compute capability 7.5): FP16 tensor cores only
                "fp32_gemm_turing": "compute-bound",
                # worker 1's kernels were never traced: GPU 0's eager decode decides; the capture problem is a finding
                "worker_kernels_untraced": "launch-bound",
                # decode judged on its own: by TensorRT-LLM's step labels, by the vLLM V1 steps' shape
                "trtllm_forward_steps": "launch-bound", "vllm_v1_forward_ranges": "launch-bound",
                # no loop and nothing but kernels; a busy GPU whose sync overhead is secondary
                "no_loop_load_syncs": None, "busy_gpu_sync_overhead": None,
                # every long gap ends in a user prefetch, while the host prints results
                "uvm_prefetch_host_print": "host-bound",
                # an OpenMP offload stencil whose 16-team kernels use 16 of 132 SMs
                "openmp_small_grids": "occupancy",
                # one-off work before the loop found by shape (tests/test_startup.py): the loop's own verdict
                "first_launch_module_load": None, "pinned_alloc_before_loop": "launch-bound"}
    assert {n: s.expected_primary for n, s in SCENARIOS.items()} == expected
    with pytest.raises(KeyError):
        generate("no_such_scenario", "/tmp/never.sqlite")


# ------------------------------------------------------------------------------------------------------------
# shape: tables and columns identical to the real export of the same nsys version
# ------------------------------------------------------------------------------------------------------------
def _reference_tables(era: str) -> dict[str, list[tuple[Any, ...]]]:
    ref: dict[str, list[tuple[Any, ...]]] = {}
    for fname in REFERENCES[era]:
        with connect(REAL / fname) as con:
            for t in tables(con):
                if t not in ref:
                    ref[t] = [r for r in con.execute(f'PRAGMA table_info("{t}")') if r[1] not in DLPROF_COLUMNS]
    for t, fname in BORROWED.get(era, {}).items():
        assert t not in ref, f"{t} is in the {era} reference export now: drop it from BORROWED"
        with connect(REAL / fname) as con:
            ref[t] = con.execute(f'PRAGMA table_info("{t}")').fetchall()
    return ref


def _documented_columns_from_md() -> dict[str, list[str]]:
    text = SCHEMA_MD.read_text()
    sec = text[text.index("### CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):]
    graph = [c.strip() for c in re.search(r"`([^`]*graphExecId)`", sec).group(1).split(",")]
    out = {"CUPTI_ACTIVITY_KIND_GRAPH_TRACE": graph}
    for t in ("TARGET_INFO_GPU_METRICS", "GPU_METRICS"):
        m = re.search(rf"`{t}\(([^)]*)\)`", text)
        out[t] = [c.strip().split()[0] for c in m.group(1).split(",")]
    return out


@needs_real
@pytest.mark.parametrize("name", NAMES)
def test_shape_matches_real_export(files: dict[str, Path], name: str) -> None:
    era = SCENARIOS[name].schema
    ref = _reference_tables(era)
    with connect(files[name]) as con:
        generated = tables(con)
        # no index but the ones a PRIMARY KEY of the real table implies (SAMPLING_CALLCHAINS (id, stackDepth))
        assert not con.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                               "AND name NOT LIKE 'sqlite_autoindex_%'").fetchall()
        for t in generated:
            info = con.execute(f'PRAGMA table_info("{t}")').fetchall()
            if t in DOCUMENTED or t in DOCUMENTED_GENERIC:
                assert [r[1] for r in info] == {**DOCUMENTED, **DOCUMENTED_GENERIC}[t], t
                assert all(r[2] in ("INTEGER", "TEXT") for r in info)
                continue
            assert t in ref, f"{name}: table {t} does not exist in the real {era} export"
            assert info == ref[t], f"{name}: {t} columns/types differ from the real {era} export"
            assert con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] > 0, f"empty table {t} (nsys is lazy)"
        # the enum tables carry the rows of the real export
        for t in generated:
            if t.startswith("ENUM_"):
                mine = con.execute(f"SELECT * FROM {t} ORDER BY id").fetchall()
                src = next(f for f in REFERENCES[era] if t in tables(connect(REAL / f)))
                assert mine == rows(REAL / src, f"SELECT * FROM {t} ORDER BY id"), t
    # metadata: same keys in the same order as the real export
    meta_table = "EXPORT_META_DATA" if era == "2022.1" else "META_DATA_EXPORT"
    assert [k for k, _ in rows(files[name], f"SELECT name, value FROM {meta_table}")] == \
        [k for k, _ in rows(REAL / REFERENCES[era][0], f"SELECT name, value FROM {meta_table}")]
    if era != "2022.1":
        def keys(p: Path) -> set[str]:  # PROCESS_0:ARGUMENT_<n>: one key per command-line argument
            return {re.sub(r"ARGUMENT_\d+$", "ARGUMENT_0", k) for (k,) in rows(p, "SELECT name FROM META_DATA_CAPTURE")}

        assert keys(files[name]) <= set().union(*(keys(REAL / f) for f in REFERENCES[era]))


@pytest.mark.skipif(not SCHEMA_MD.is_file(), reason=f"{SCHEMA_MD} not available")
def test_documented_tables_follow_schema_md() -> None:
    assert _documented_columns_from_md() == DOCUMENTED


def test_era_specific_tables(files: dict[str, Path]) -> None:
    with connect(files["old_schema_2022"]) as con:
        t = tables(con)
        assert "EXPORT_META_DATA" in t and "META_DATA_EXPORT" not in t and "META_DATA_CAPTURE" not in t
        assert not [x for x in t if x.startswith("ENUM_")]
        assert "TARGET_INFO_CUDA_NULL_STREAM" in t
        for x in t:
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{x}")')]
            assert "greenContextId" not in cols and not DLPROF_COLUMNS & set(cols)
    m = meta(files["old_schema_2022"], "EXPORT_META_DATA")
    assert m["EXPORT_PRODUCT_VERSION"] == "2022.1.3.3" and m["EXPORT_SCHEMA_VERSION"] == "2.9.1"
    assert "EXPORT_OUTUPT_FILE" in m  # the real 2022.1 typo
    m = meta(files["eager_decode"], "META_DATA_EXPORT")
    assert m["EXPORT_PRODUCT_VERSION"].startswith("2024.6.2") and m["EXPORT_SCHEMA_VERSION"] == "3.16.1"
    assert "EXPORT_PARAM_OUTPUT_FILE" in m
    m = meta(files["new_schema_2025"], "META_DATA_EXPORT")
    assert m["EXPORT_PRODUCT_VERSION"].startswith("2025.5.2") and m["EXPORT_SCHEMA_VERSION"].startswith("3.24.")
    with connect(files["new_schema_2025"]) as con:
        t = tables(con)
        assert "CUPTI_ACTIVITY_KIND_OVERHEAD" in t and "TARGET_INFO_CUDA_DEVICE" in t and "NVTX_EVENTS" not in t
        kcols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        assert {"graphId", "clusterX", "qmdLastCtaDone"} <= set(kcols)
        assert "copyCount" in [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_MEMCPY)")]
        scols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)")]
        assert {"deprecatedSyncType", "eventSyncId"} <= set(scols)
        assert len([x for x in t if x.startswith("ENUM_")]) < 15
    with connect(files["eager_decode"]) as con:
        enums = {x for x in tables(con) if x.startswith("ENUM_")}
        assert {"ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE",
                "ENUM_CUDA_KERNEL_LAUNCH_TYPE"} <= enums
        assert "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" not in tables(con)


# ------------------------------------------------------------------------------------------------------------
# invariants every scenario must satisfy
# ------------------------------------------------------------------------------------------------------------
PID = "((globalPid >> 24) & 16777215)"


@pytest.mark.parametrize("name", NAMES)
def test_encodings_and_correlation(files: dict[str, Path], name: str) -> None:
    path = files[name]
    with connect(path) as con:
        t = set(tables(con))

        def none(sql: str) -> None:
            assert con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0] == 0, sql

        # serialized GlobalIds: bits >= 48 VM id 1, 24-47 pid, 0-23 tid (0 for processes)
        if "PROCESSES" in t:
            none(f"SELECT * FROM PROCESSES WHERE globalPid >> 48 != 1 OR {PID} != pid OR globalPid & 16777215 != 0")
        if "ProcessStreams" in t:
            none("SELECT * FROM ProcessStreams WHERE globalPid >> 48 != 1 OR globalPid & 16777215 != 0 "
                 "OR filenameId NOT IN (SELECT id FROM StringIds) OR contentId NOT IN (SELECT id FROM StringIds)")
        none("SELECT * FROM ThreadNames WHERE globalTid >> 48 != 1 OR globalTid & 16777215 = 0 "
             "OR nameId NOT IN (SELECT id FROM StringIds)")
        activity = [x for x in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                                "CUPTI_ACTIVITY_KIND_GRAPH_TRACE") if x in t]
        # clock_glitch writes some activity that ends before it starts on purpose (checked by its own test)
        ordered = "start > 0" if name == "clock_glitch" else "start > 0 AND start <= end"
        for table in activity:
            none(f"SELECT * FROM {table} WHERE NOT ({ordered}) OR globalPid >> 48 != 1 "
                 f"OR globalPid & 16777215 != 0 OR {PID} NOT IN (SELECT pid FROM PROCESSES)")
        runtime = "CUPTI_ACTIVITY_KIND_RUNTIME" in t
        assert runtime or not activity, "activity rows without API calls"
        if runtime:
            none(f"""SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE NOT (start > 0 AND start < end)
                     OR {PID.replace('globalPid', 'globalTid')} NOT IN (SELECT pid FROM PROCESSES)
                     OR globalTid & 16777215 = 0""")
            none("SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId NOT IN (SELECT id FROM StringIds)")
        api_names = con.execute("""SELECT DISTINCT s.value, r.eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                                   JOIN StringIds s ON s.id = r.nameId""").fetchall() if runtime else []
        for nm, ec in api_names:
            if nm.startswith("cuda"):  # runtime API: eventClass 0, API-version suffix
                assert ec == 0 and re.search(r"_v\d+$", nm), nm
            else:  # driver API: eventClass 1, bare name
                assert nm.startswith("cu") and ec == 1 and not re.search(r"_v\d{4,}$", nm), nm
        # every kernel/copy/memset/sync/graph row correlates with an API call of the same process that started
        # before it; UVM migrations (copyKind 11-13) are not caused by an API call and carry correlationId 0
        api: dict[tuple[int, int], int] = {}
        if runtime:
            api = {(g >> 24 & PID_MASK, c): s for s, g, c in
                   con.execute("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
        for table in activity:
            kind = "copyKind" if table == "CUPTI_ACTIVITY_KIND_MEMCPY" else "0"
            for s, g, c in con.execute(f"SELECT start, globalPid, correlationId FROM {table} "
                                       f"WHERE {kind} NOT IN (11, 12, 13)"):
                assert api.get((g >> 24 & PID_MASK, c), s) < s, f"{table}: correlationId {c} has no earlier API call"
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in t:
            none("SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (11, 12, 13) AND correlationId != 0")
        # names resolve in StringIds
        if "CUPTI_ACTIVITY_KIND_KERNEL" in t:
            for col in ("demangledName", "shortName", "mangledName"):
                none(f"SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {col} NOT IN (SELECT id FROM StringIds)")
            none("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId NOT IN (SELECT id FROM TARGET_INFO_GPU)")
        if "NVTX_EVENTS" in t:
            none(f"""SELECT * FROM NVTX_EVENTS WHERE COALESCE(text, (SELECT value FROM StringIds WHERE id = textId))
                     IS NULL OR {PID.replace('globalPid', 'globalTid')} NOT IN (SELECT pid FROM PROCESSES)
                     OR NOT ((eventType = 59 AND 0 < start AND start < end)
                             OR (eventType = 75 AND start < 0 AND end IS NULL))""")
        # the trace span covers every event and is long enough to judge
        duration = con.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()[0]
        assert duration >= SCENARIOS[name].truth["capture_ns_min"]
        for table in activity + ["CUPTI_ACTIVITY_KIND_RUNTIME"] * runtime:
            assert con.execute(f"SELECT max(end) FROM {table}").fetchone()[0] < duration
        if "NVTX_EVENTS" in t:
            assert con.execute("SELECT max(end) FROM NVTX_EVENTS").fetchone()[0] < duration
        for row in con.execute("SELECT name, smCount, memoryBandwidth, totalMemory, clockRate, chipName "
                               "FROM TARGET_INFO_GPU"):
            if row[5] == "TU102":  # metrics_2022_tu10x: a GeForce RTX 2080 Ti
                assert row[0].startswith("NVIDIA GeForce") and row[1] == 68 and row[2] > 6e11 and row[3] > 1.1e10
                continue
            assert row[0].startswith("NVIDIA") and row[1] >= 100 and row[2] > 1e12 and row[3] > 8e10 and row[4] > 1e9


# ------------------------------------------------------------------------------------------------------------
# per-scenario ground truth
# ------------------------------------------------------------------------------------------------------------
def check_eager(path: Path, truth: dict[str, Any]) -> None:
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    launches = runtime_by_name(path, "cudaLaunchKernel%")
    assert len(launches) == truth["launch_calls"]
    lazy = set()  # first launches that also load the function (2025.5 CUPTI_ACTIVITY_KIND_OVERHEAD) take longer
    if "CUPTI_ACTIVITY_KIND_OVERHEAD" in tables(connect(path)):
        lazy = {c for (c,) in rows(path, "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_OVERHEAD")}
    assert all(in_range(e - s, truth["launch_call_ns"]) for s, e, _, c, _ in launches if c not in lazy)
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == truth["memcpy_count"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE syncType = 3") == \
        truth["stream_syncs"]
    assert one(path, "SELECT count(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["device_count"]
    iv = kernel_intervals(path)
    busy, gaps, _ = union_stats(iv)
    assert in_range(busy, truth["gpu_busy"]) and in_range(1 - busy, truth["overhead_ratio"])
    assert in_range(statistics.mean(e - s for s, e in iv), truth["mean_kernel_ns"])
    assert in_range(statistics.mean(gaps), truth["mean_gap_ns"])
    # host-bound: the launch call of a kernel mostly starts after the previous kernel finished
    lk = launch_of_kernels(path)
    assert len(lk) == truth["kernel_count"]
    assert all(api_start < ks for ks, _, api_start, _, _ in lk)
    after = sum(lk[i][2] >= lk[i - 1][1] for i in range(1, len(lk))) / (len(lk) - 1)
    assert in_range(after, truth["host_bound_fraction"])
    if "nvtx_ranges" in truth:
        ranges = nvtx_ranges(path)
        assert len(ranges) == truth["nvtx_ranges"]
        assert {r[2] for r in ranges} == {truth["nvtx_step_label"]}
        assert all(range_of(a, tid, ranges, truth["nvtx_step_label"]) for _, _, a, tid, _ in lk)


@pytest.mark.parametrize("name", ["eager_decode", "old_schema_2022", "new_schema_2025"])
def test_eager_decode_truth(files: dict[str, Path], name: str) -> None:
    check_eager(files[name], dict(SCENARIOS[name].truth))


def test_clock_glitch_truth(files: dict[str, Path]) -> None:
    path, truth = files["clock_glitch"], SCENARIOS["clock_glitch"].truth
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert one(path, 'SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "end" < start') == \
        truth["reversed_kernels"]
    assert one(path, 'SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE "end" < start') == \
        truth["reversed_memcpys"]
    assert one(path, 'SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE "end" < start') == 0


def test_new_schema_2025_details(files: dict[str, Path]) -> None:
    path, truth = files["new_schema_2025"], SCENARIOS["new_schema_2025"].truth
    ov = rows(path, """SELECT o.correlationId, s.value, o.eventClass, o.overheadType, o.start, o.end
                       FROM CUPTI_ACTIVITY_KIND_OVERHEAD o JOIN StringIds s ON s.id = o.nameId""")
    assert len(ov) == truth["lazy_loading_overheads"]
    launches = {c: (s, e) for s, e, _, c, _ in runtime_by_name(path, "cudaLaunchKernel%")}
    for corr, label, ec, ot, s, e in ov:
        assert label == "Lazy Function Loading" and ec == 103 and ot == 7
        assert launches[corr][0] < s < e < launches[corr][1]
    assert meta(path, "META_DATA_CAPTURE")["PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE"] == "Graph"
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphId IS NOT NULL") == 0
    assert one(path, "SELECT count(*) FROM TARGET_INFO_CUDA_DEVICE") == 1
    assert one(path, "SELECT max(smCount) FROM TARGET_INFO_GPU") == 132


def test_graph_decode_node(files: dict[str, Path]) -> None:
    path, truth = files["graph_decode_node"], SCENARIOS["graph_decode_node"].truth
    assert meta(path, "META_DATA_CAPTURE")["PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE"] == "Node"
    graphs = runtime_by_name(path, "cudaGraphLaunch_v10000")
    assert len(graphs) == truth["graph_launches"] and not runtime_by_name(path, "cudaLaunchKernel%")
    starts = {c: s for s, _, _, c, _ in graphs}
    ks = rows(path, "SELECT correlationId, graphNodeId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(ks) == truth["kernel_count"] >= 5000
    per_launch: dict[int, list[int]] = defaultdict(list)
    for corr, node, s, _ in ks:
        assert corr in starts and starts[corr] < s and node is not None
        per_launch[corr].append(node)
    assert len(per_launch) == truth["graph_launches"]
    for nodes in per_launch.values():
        assert len(nodes) == len(set(nodes)) == truth["nodes_per_graph"]
    busy, gaps, span = union_stats([(s, e) for *_, s, e in ks])
    assert in_range(1 - busy, truth["overhead_ratio"]) and in_range(busy, truth["gpu_busy"])
    assert in_range(statistics.mean(gaps), truth["mean_gap_ns"])
    assert in_range(statistics.mean(e - s for *_, s, e in ks), truth["mean_kernel_ns"])
    assert span >= truth["capture_ns_min"]
    assert "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" not in tables(connect(path))
    ranges = rows(path, "SELECT e.text, s.value FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId")
    assert len(ranges) == truth["nvtx_ranges"] and all(t is None and v == STEP for t, v in ranges)


STEP = gen.STEP_LABEL


def test_graph_decode_graph(files: dict[str, Path]) -> None:
    path, truth = files["graph_decode_graph"], SCENARIOS["graph_decode_graph"].truth
    assert meta(path, "META_DATA_CAPTURE")["PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE"] == "Graph"
    graphs = {c: s for s, _, _, c, _ in runtime_by_name(path, "cudaGraphLaunch_v10000")}
    assert len(graphs) == truth["graph_launches"]
    gt = rows(path, "SELECT start, end, correlationId, graphId, graphExecId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    assert len(gt) == truth["graph_trace_rows"]
    assert all(c in graphs and graphs[c] < s for s, _, c, _, _ in gt)
    ks = rows(path, "SELECT start, end, correlationId, graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(ks) == truth["kernel_count"] == len(runtime_by_name(path, "cudaLaunchKernel%"))
    assert all(c not in graphs and node is None for _, _, c, node in ks)
    busy, _, _ = union_stats([(s, e) for s, e, *_ in gt] + [(s, e) for s, e, *_ in ks])
    assert in_range(busy, truth["gpu_busy"])
    kernel_only, _, _ = union_stats([(s, e) for s, e, *_ in ks])
    assert in_range(kernel_only, truth["kernel_table_busy"])


def test_prefill_decode_nvtx(files: dict[str, Path]) -> None:
    path, truth = files["prefill_decode_nvtx"], SCENARIOS["prefill_decode_nvtx"].truth
    ranges = nvtx_ranges(path)
    labels = Counter(r[2] for r in ranges)
    assert labels["prefill"] == truth["nvtx_prefill_ranges"] and labels["decode"] == truth["nvtx_decode_ranges"]
    assert labels[truth["nvtx_forward_label"]] == truth["nvtx_forward_ranges"]
    dom = rows(path, "SELECT start, end, text, domainId FROM NVTX_EVENTS WHERE eventType = 75")
    assert len(dom) == 1 and dom[0][0] < 0 and dom[0][1] is None and dom[0][2] == truth["nvtx_domain"]
    fwd = rows(path, "SELECT text, domainId, textId FROM NVTX_EVENTS WHERE textId IS NOT NULL")
    assert len(fwd) == truth["nvtx_forward_ranges"] and all(t is None and d == dom[0][3] for t, d, _ in fwd)
    phase: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for ks, ke, api, tid, _ in launch_of_kernels(path):
        inside = [lab for lab in ("prefill", "decode") if range_of(api, tid, ranges, lab)]
        assert len(inside) == 1
        assert range_of(api, tid, ranges, truth["nvtx_forward_label"])
        phase[inside[0]].append((ks, ke))
    assert len(phase["prefill"]) == truth["prefill_kernels"] and len(phase["decode"]) == truth["decode_kernels"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert in_range(union_stats(phase["prefill"])[0], truth["prefill_busy"])
    durations = [e - s for s, e in phase["prefill"]]
    assert all(in_range(d, truth["prefill_kernel_ns"]) for d in durations)
    long_names = rows(path, """SELECT k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                               ON s.id = k.shortName WHERE s.value = 'flash_fwd_kernel' OR s.value LIKE 'sm90_%256x%'
                               OR s.value LIKE 'nvjet%'""")
    assert long_names and all(in_range(d, truth["prefill_long_kernel_ns"]) for (d,) in long_names)
    decode_busy = statistics.mean(union_stats(v)[0] for v in _split_steps(path, ranges, phase["decode"]))
    assert in_range(decode_busy, truth["decode_busy"])
    pre = sum(e - s for s, e, lab, *_ in ranges if lab == "prefill")
    dec = sum(e - s for s, e, lab, *_ in ranges if lab == "decode")
    assert in_range(dec / (pre + dec), truth["decode_time_share"])
    busy, _, _ = union_stats(kernel_intervals(path))
    assert in_range(1 - busy, truth["overhead_ratio"])


def _split_steps(path: Path, ranges: list[tuple[int, int, str, int, int]],
                 kernels: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    steps = [(s, e) for s, e, lab, *_ in ranges if lab == "decode"]
    by_launch = {(ks, ke): api for ks, ke, api, _, _ in launch_of_kernels(path)}
    out: list[list[tuple[int, int]]] = [[] for _ in steps]
    for k in kernels:
        api = by_launch[k]
        out[next(i for i, (s, e) in enumerate(steps) if s <= api <= e)].append(k)
    return out


def test_pageable_copies(files: dict[str, Path]) -> None:
    path, truth = files["pageable_copies"], SCENARIOS["pageable_copies"].truth
    cp = rows(path, "SELECT start, end, bytes, copyKind, srcKind, dstKind, correlationId "
                    "FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert len(cp) == truth["memcpy_count"]
    assert sum(c[3] == 1 for c in cp) == truth["htod_count"] and sum(c[3] == 2 for c in cp) == truth["dtoh_count"]
    assert sum(c[2] for c in cp) == truth["memcpy_bytes"] and {c[2] for c in cp} == {truth["bytes_per_copy"]}
    pageable = sum((c[3] == 1 and c[4] == 0) or (c[3] == 2 and c[5] == 0) for c in cp) / len(cp)
    assert pageable == truth["pageable_fraction"]
    for s, e, b, *_ in cp:
        assert in_range(b / ((e - s) / 1e9), truth["memcpy_bandwidth_Bps"]) and in_range(e - s, truth["copy_ns"])
    calls = {c: (s, e) for s, e, _, c, _ in runtime_by_name(path, truth["memcpy_call"])}
    assert len(calls) == len(cp)
    assert all(calls[c][0] < s and e < calls[c][1] for s, e, *_, c in cp)  # synchronous copies
    kernel_ns = sum(e - s for s, e in kernel_intervals(path))
    copy_ns = sum(e - s for s, e, *_ in cp)
    assert in_range(copy_ns / (copy_ns + kernel_ns), truth["memcpy_share_of_gpu_time"])
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]


def test_sync_storm(files: dict[str, Path]) -> None:
    path, truth = files["sync_storm"], SCENARIOS["sync_storm"].truth
    iv = kernel_intervals(path)
    assert len(iv) == truth["kernel_count"] == len(runtime_by_name(path, "cudaLaunchKernel%"))
    syncs = runtime_by_name(path, "cudaDeviceSynchronize_v3020")
    assert len(syncs) == truth["device_syncs"]
    sr = rows(path, "SELECT syncType, streamId, correlationId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    assert len(sr) == truth["sync_rows"] and {(t, s) for t, s, _ in sr} == {(truth["sync_type"], 4294967295)}
    assert {c for *_, c in sr} == {c for _, _, _, c, _ in syncs}
    assert in_range(statistics.mean(e - s for s, e, *_ in syncs), truth["sync_blocked_ns"])
    busy, gaps, span = union_stats(iv)
    assert in_range(busy, truth["gpu_busy"]) and in_range(1 - busy, truth["overhead_ratio"])
    assert in_range(statistics.mean(gaps), truth["mean_gap_ns"])
    assert in_range(statistics.mean(e - s for s, e in iv), truth["mean_kernel_ns"])
    ends = sorted(e for _, e, *_ in syncs)
    iv.sort()
    j = 0
    for (_, prev_end), (nxt, _) in zip(iv, iv[1:]):  # every idle gap begins inside a synchronisation
        while j < len(ends) and ends[j] <= prev_end:
            j += 1
        assert j < len(ends) and ends[j] < nxt
    assert in_range(sum(e - s for s, e, *_ in syncs) / span, truth["sync_time_share"])


def test_multi_gpu_straggler(files: dict[str, Path]) -> None:
    path, truth = files["multi_gpu_straggler"], SCENARIOS["multi_gpu_straggler"].truth
    assert one(path, "SELECT count(*) FROM TARGET_INFO_GPU") == truth["target_info_gpus"]
    ks = rows(path, """SELECT (k.globalPid >> 24) & 16777215, k.deviceId, s.value, k.end - k.start, k.correlationId
                       FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName""")
    assert len(ks) == truth["kernel_count"]
    dev_of = defaultdict(set)
    for pid, dev, *_ in ks:
        dev_of[pid].add(dev)
    assert len(dev_of) == truth["process_count"] and all(len(d) == 1 for d in dev_of.values())
    assert len({d for v in dev_of.values() for d in v}) == truth["device_count"]
    rank = {pid: next(iter(d)) for pid, d in dev_of.items()}
    nccl: dict[int, list[int]] = defaultdict(list)
    compute: dict[int, int] = defaultdict(int)
    for pid, dev, short, d, _ in ks:
        if short == truth["nccl_kernel"]:
            nccl[dev].append(d)
        else:
            compute[dev] += d
    assert all(len(v) == truth["allreduce_per_rank"] for v in nccl.values()) and len(nccl) == 2
    m0, m1 = statistics.mean(nccl[0]), statistics.mean(nccl[1])
    assert in_range(m0, truth["nccl_mean_ns_rank0"]) and in_range(m1, truth["nccl_mean_ns_rank1"])
    assert in_range(m0 / m1, truth["nccl_ratio_rank0_rank1"])
    assert in_range(compute[1] / compute[0], truth["compute_ratio_rank1_rank0"])
    launch = rows(path, """SELECT DISTINCT s.value, r.eventClass FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds ks ON ks.id = k.shortName
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
             AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215)
        JOIN StringIds s ON s.id = r.nameId WHERE ks.value LIKE 'nccl%'""")
    assert launch == [(truth["nccl_launch_api"], 1)]
    assert sorted(rank.values()) == [0, 1]


def test_memory_bound_metrics(files: dict[str, Path]) -> None:
    path, truth = files["memory_bound_metrics"], SCENARIOS["memory_bound_metrics"].truth
    iv = kernel_intervals(path)
    assert len(iv) == truth["kernel_count"] == len(runtime_by_name(path, "cudaLaunchKernel%"))
    assert in_range(union_stats(iv)[0], truth["gpu_busy"])
    names = dict(rows(path, "SELECT metricId, metricName FROM TARGET_INFO_GPU_METRICS"))
    assert tuple(names.values()) == tuple(truth["metric_names"])
    assert all(n.endswith("[Throughput %]") for n in names.values())
    samples: dict[str, dict[int, int]] = defaultdict(dict)
    for ts, mid, v in rows(path, "SELECT timestamp, metricId, value FROM GPU_METRICS"):
        samples[names[mid]][ts] = v
    stamps = sorted(samples["DRAM Read Bandwidth [Throughput %]"])
    assert {b - a for a, b in zip(stamps, stamps[1:])} == {truth["metric_period_ns"]}
    assert len({len(v) for v in samples.values()}) == 1
    busy_ts = [t for t, v in samples["GR Active [Throughput %]"].items() if v >= 50]
    assert len(busy_ts) > 0.9 * len(stamps)

    def mean(metric: str) -> float:
        return statistics.mean(samples[metric][t] for t in busy_ts)

    assert in_range(mean("DRAM Read Bandwidth [Throughput %]"), truth["dram_read_pct_busy"])
    assert in_range(mean("SM Issue [Throughput %]"), truth["sm_issue_pct_busy"])
    assert in_range(mean("Tensor Active [Throughput %]"), truth["tensor_active_pct_busy"])
    long = rows(path, """SELECT k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                         ON s.id = k.shortName WHERE s.value IN ('gemv2T_kernel_val', 'paged_attention_v2_kernel')""")
    assert long and all(in_range(d, truth["long_kernel_ns"]) for (d,) in long)


# ------------------------------------------------------------------------------------------------------------
# GPU metrics: 2023+ GPU_METRICS tables and 2022.4 GENERIC_EVENTS JSON
# ------------------------------------------------------------------------------------------------------------
METRIC_NAMES = ["tensor_idle_fp32_prefill", "latency_bound_decode", "nvlink_saturated_tp2", "metrics_coarse_decode",
                "metrics_2022_tu10x", "metrics_2022_ga100", "metrics_2022_gh100"]
# truth key prefix -> metric names (without the unit suffix) that measure it, in the nsys versions modelled
METRIC_KEYS = {"sm_active": ("SM Active", "SMs Active"), "sm_issue": ("SM Issue",),
               "tensor_active": ("Tensor Active", "Tensor Active / FP16 Active"),
               "dram_read": ("DRAM Read Bandwidth", "DRAM Read Throughput"),
               "dram_write": ("DRAM Write Bandwidth", "DRAM Write Throughput"),
               "warps_in_flight": ("Compute Warps in Flight", "Compute Warps In Flight")}
GEMM_WORDS = ("gemm", "cutlass", "cublas", "xmma", "wgmma", "hmma", "nvjet")


def metric_samples(path: Path) -> tuple[dict[int, dict[str, dict[int, int]]], list[str]]:
    """({GPU (typeId & 0xFF): {metric name: {timestamp: value}}}, names in metricId / JSON key order)."""
    out: dict[int, dict[str, dict[int, int]]] = defaultdict(lambda: defaultdict(dict))
    with connect(path) as con:
        t = set(tables(con))
    if "GPU_METRICS" in t:
        info = rows(path, "SELECT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS ORDER BY typeId, metricId")
        names = {(ty, mid): n for ty, mid, n in info}
        for ts, ty, mid, v in rows(path, "SELECT timestamp, typeId, metricId, value FROM GPU_METRICS"):
            out[ty & 0xFF][names[(ty, mid)]][ts] = v
        first = min(ty for ty, _, _ in info)
        return out, [n for ty, _, n in info if ty == first]
    order: list[str] = []
    for ts, ty, data in rows(path, "SELECT timestamp, typeId, data FROM GENERIC_EVENTS ORDER BY timestamp"):
        obj = json.loads(data)
        order = order or list(obj)
        assert list(obj) == order and all(isinstance(v, str) and v.isdigit() for v in obj.values())
        for k, v in obj.items():
            out[ty & 0xFF][k][ts] = int(v)
    return out, order


def metric_name(names: list[str], key: str) -> str:
    found = [n for n in names if n.split(" [")[0] in METRIC_KEYS[key] and (n == n.split(" [")[0] or
                                                                        n.endswith("[Throughput %]"))]
    assert len(found) == 1, (key, found)
    return found[0]


def running_at(iv: list[tuple[int, int]], ts: int) -> bool:
    i = bisect.bisect_right(iv, (ts, float("inf"))) - 1
    return i >= 0 and iv[i][1] >= ts


def union_ns(iv: list[tuple[int, int]]) -> int:
    busy, ce = 0, -1
    for s, e in sorted(iv):
        if e > ce:
            busy += e - max(s, ce)
            ce = e
    return busy


def check_gpu_metrics(path: Path, truth: dict[str, Any]) -> None:
    with connect(path) as con:
        t = set(tables(con))
    legacy = truth["metric_format"] == "GENERIC_EVENTS"
    assert ({"GENERIC_EVENTS", "GENERIC_EVENT_TYPES", "GENERIC_EVENT_SOURCES"} <= t) == legacy
    assert ({"GPU_METRICS", "TARGET_INFO_GPU_METRICS"} <= t) != legacy
    samples, names = metric_samples(path)
    assert names == list(truth["metric_names"])
    gpus = {i: chip for i, chip in rows(path, "SELECT id, chipName FROM TARGET_INFO_GPU")}
    assert set(samples) <= set(gpus) and len(samples) == truth["device_count"]
    if "chip" in truth:
        assert set(gpus.values()) == {truth["chip"]}
    if legacy:  # 2022.4: unit-less names, '/' escaped by the exporter's JSON writer, typed generic events
        assert not any("[" in n for n in names)
        for (data,) in rows(path, "SELECT data FROM GENERIC_EVENTS LIMIT 3"):
            assert data.startswith("{\n    \"") and all(n.replace("/", "\\/") in data for n in names)
        types = rows(path, "SELECT typeId, sourceId, data FROM GENERIC_EVENT_TYPES")
        sources = {s for (s,) in rows(path, "SELECT sourceId FROM GENERIC_EVENT_SOURCES")}
        assert {ty for ty, _, _ in types} == {ty for (ty,) in rows(path, "SELECT DISTINCT typeId FROM GENERIC_EVENTS")}
        assert all(src in sources and json.loads(d)["Fields"] for _, src, d in types)
        assert all(json.loads(d)["SourceGroup"] == "GpuMetrics"
                   for (d,) in rows(path, "SELECT data FROM GENERIC_EVENT_SOURCES"))
        assert {r - ts for r, ts in rows(path, "SELECT rawTimestamp, timestamp FROM GENERIC_EVENTS")} == \
            {one(path, "SELECT startTime FROM ANALYSIS_DETAILS")}
    else:  # 2023.4+: every name carries its unit; metric ids repeat across the GPUs' type ids
        assert all(re.search(r" \[[^\]]+\]$", n) for n in names)
        per_type = rows(path, "SELECT typeId, count(*), count(DISTINCT metricId) FROM TARGET_INFO_GPU_METRICS "
                              "GROUP BY typeId")
        assert all(c == d == len(names) for _, c, d in per_type) and len(per_type) == truth["device_count"]
        if "type_ids" in truth:
            assert sorted(ty for ty, _, _ in per_type) == list(truth["type_ids"])
    kernels = rows(path, """SELECT k.deviceId, k.start, k.end, s.value, d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
                            JOIN StringIds s ON s.id = k.shortName JOIN StringIds d ON d.id = k.demangledName""")
    assert len(kernels) == truth["kernel_count"]
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth.get("launch_calls", len(kernels))
    if "memcpy_count" in truth:
        assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == truth["memcpy_count"]
    if "stream_syncs" in truth:
        assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    if "nvtx_ranges" in truth:
        assert len(nvtx_ranges(path)) == truth["nvtx_ranges"]
    for dev, by_name in samples.items():
        assert list(by_name) == names and len({len(v) for v in by_name.values()}) == 1
        stamps = sorted(next(iter(by_name.values())))
        assert {b - a for a, b in zip(stamps, stamps[1:])} == {truth["metric_period_ns"]}
        for n, vals in by_name.items():
            if "Clock" not in n and "[Avg]" not in n:
                assert all(0 <= v <= 100 for v in vals.values()), n
        iv = sorted((s, e) for d, s, e, _, _ in kernels if d == dev)
        busy, gaps, _ = union_stats(iv)
        assert in_range(busy, truth["gpu_busy"])
        if "max_gap_ns" in truth:
            assert max(gaps) < truth["max_gap_ns"]
        if "kernel_ns" in truth:
            assert all(in_range(e - s, truth["kernel_ns"]) for s, e in iv)
        busy_ts = [ts for ts in stamps if running_at(iv, ts)]
        assert len(busy_ts) >= 10
        for key in METRIC_KEYS:
            if f"{key}_pct_busy" in truth:
                m = by_name[metric_name(names, key)]
                assert in_range(statistics.mean(m[ts] for ts in busy_ts), truth[f"{key}_pct_busy"]), (dev, key)
        ktime = sum(e - s for d, s, e, _, _ in kernels if d == dev)
        if "gemm_kernels" in truth:
            gemm = sum(e - s for d, s, e, short, _ in kernels if d == dev and short in truth["gemm_kernels"])
            assert in_range(gemm / ktime, truth["gemm_time_share"])
            assert sum(short in truth["gemm_kernels"] for *_, short, _ in kernels) == truth["gemm_kernel_count"]
        elif truth.get("gemm_time_share") == 0.0:  # no kernel a name-based GEMM test could take for one
            assert not [dm for *_, dm in kernels if any(w in dm.lower() for w in GEMM_WORDS)]


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_gpu_metrics_scenarios(files: dict[str, Path], name: str) -> None:
    check_gpu_metrics(files[name], dict(SCENARIOS[name].truth))
    assert files[name].stat().st_size < 3_000_000


def test_tensor_idle_fp32_metrics(files: dict[str, Path]) -> None:
    for name in ("tensor_idle_fp32_prefill", "metrics_2022_tu10x"):
        truth = SCENARIOS[name].truth
        samples, names = metric_samples(files[name])
        tensor = metric_name(names, "tensor_active")
        assert tensor == truth.get("tensor_metric", "Tensor Active [Throughput %]")
        # FP32 GEMMs: no tensor-core kernel names, the SMs issue while the tensor pipe idles
        assert all("sgemm" in k for k in truth["gemm_kernels"])
        assert truth["tensor_active_pct_busy"][1] <= 5 <= 20 <= truth["sm_issue_pct_busy"][0]


def test_latency_bound_decode_metrics(files: dict[str, Path]) -> None:
    truth = SCENARIOS["latency_bound_decode"].truth
    # resident but stalling: SMs Active high, issue, DRAM and tensor low, few warps in flight
    assert truth["sm_active_pct_busy"][0] >= 60 and truth["sm_issue_pct_busy"][1] <= 25
    assert truth["dram_read_pct_busy"][1] + truth["dram_write_pct_busy"][1] <= 40
    assert truth["tensor_active_pct_busy"][1] <= 20
    names = {n for (n,) in rows(files["latency_bound_decode"], "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL"
                                " k JOIN StringIds s ON s.id = k.shortName")}
    assert any("attention" in n for n in names) and any("gemv" in n for n in names)


def test_worker_kernels_untraced(files: dict[str, Path]) -> None:
    path, truth = files["worker_kernels_untraced"], SCENARIOS["worker_kernels_untraced"].truth
    assert one(path, "SELECT count(*) FROM TARGET_INFO_GPU") == truth["target_info_gpus"]
    assert one(path, "SELECT count(*) FROM PROCESSES") == truth["process_count"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    traced = rows(path, "SELECT DISTINCT (globalPid >> 24) & 16777215, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(traced) == truth["device_count"] and truth["untraced_pid"] not in {pid for pid, _ in traced}
    for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        assert one(path, f"SELECT count(*) FROM {table} WHERE (globalPid >> 24) & 16777215 = "
                         f"{truth['untraced_pid']}") == 0
    launches = runtime_by_name(path, "cudaLaunchKernel%")
    assert len(launches) == truth["launch_calls"]
    untraced = one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                         f"WHERE s.value LIKE 'cudaLaunchKernel%' AND (r.globalTid >> 24) & 16777215 = "
                         f"{truth['untraced_pid']}")
    assert untraced == truth["untraced_launches"]


def test_nvlink_saturated_tp2(files: dict[str, Path]) -> None:
    path, truth = files["nvlink_saturated_tp2"], SCENARIOS["nvlink_saturated_tp2"].truth
    assert one(path, "SELECT count(*) FROM TARGET_INFO_GPU") == truth["target_info_gpus"]
    ks = rows(path, """SELECT (k.globalPid >> 24) & 16777215, k.deviceId, s.value, k.start, k.end, k.correlationId
                       FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName""")
    assert len({pid for pid, *_ in ks}) == truth["process_count"] == one(path, "SELECT count(*) FROM PROCESSES")
    # one launching thread per GPU
    threads = rows(path, """SELECT DISTINCT k.deviceId, r.globalTid FROM CUPTI_ACTIVITY_KIND_KERNEL k
                            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                             AND r.globalTid >> 24 = k.globalPid >> 24""")
    assert sorted(d for d, _ in threads) == [0, 1] and len({g for _, g in threads}) == 2
    launch = rows(path, """SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds ks ON ks.id = k.shortName
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
             AND r.globalTid >> 24 = k.globalPid >> 24
        JOIN StringIds s ON s.id = r.nameId WHERE ks.value LIKE 'nccl%'""")
    assert launch == [(truth["nccl_launch_api"],)]
    assert len(runtime_by_name(path, truth["nccl_launch_api"])) == truth["nccl_launches"]
    samples, names = metric_samples(path)
    sfx = " [Throughput %]"
    for dev in (0, 1):
        comm = sorted((s, e) for _, d, n, s, e, _ in ks if d == dev and n == truth["nccl_kernel"])
        compute = sorted((s, e) for _, d, n, s, e, _ in ks if d == dev and n != truth["nccl_kernel"])
        assert len(comm) == truth["allreduce_per_gpu"]
        _, _, window = union_stats(comm + compute)
        assert in_range(union_ns(comm) / window, truth["comm_window_share"])
        exposed = union_ns(comm + compute) - union_ns(compute)
        assert in_range(exposed / window, truth["exposed_comm_fraction"])
        m = samples[dev]
        rx = {ts: m[f"NVLink RX Requests User Data{sfx}"][ts] + m[f"NVLink RX Responses User Data{sfx}"][ts]
              for ts in m[names[0]]}
        tx = {ts: m[f"NVLink TX Requests User Data{sfx}"][ts] + m[f"NVLink TX Responses User Data{sfx}"][ts]
              for ts in m[names[0]]}
        in_comm = [ts for ts in rx if running_at(comm, ts)]
        assert len(in_comm) > 100
        lo, hi = truth["nvlink_pct_comm_range"][dev]
        assert all(lo <= rx[ts] <= hi and lo <= tx[ts] <= hi for ts in in_comm)
        assert in_range(statistics.mean(rx[ts] for ts in in_comm), truth["nvlink_rx_pct_comm"][dev])
        assert in_range(statistics.mean(tx[ts] for ts in in_comm), truth["nvlink_tx_pct_comm"][dev])
        assert all(rx[ts] <= 2 * truth["nvlink_pct_idle_max"] for ts in rx if not running_at(comm, ts))
    # only GPU 1 is saturated
    assert truth["nvlink_pct_comm_range"][1][0] > 70 > truth["nvlink_pct_comm_range"][0][1]


def test_metrics_coarse_decode(files: dict[str, Path]) -> None:
    path, truth = files["metrics_coarse_decode"], dict(SCENARIOS["metrics_coarse_decode"].truth)
    check_eager(path, truth)
    durations = [e - s for s, e in kernel_intervals(path)]
    assert in_range(statistics.median(durations), truth["median_kernel_ns"])
    assert truth["metric_period_ns"] / truth["median_kernel_ns"][1] > 100  # most kernels fall between samples


@pytest.mark.parametrize("name", ["nvlink_saturated_tp2", "metrics_2022_ga100", "metrics_coarse_decode"])
def test_gpu_metrics_other_seed_and_scale(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.sqlite"
    sc = generate(name, path, seed=5, scale=2)
    assert sc.truth["kernel_count"] == 2 * SCENARIOS[name].truth["kernel_count"]
    check_gpu_metrics(path, dict(sc.truth))


def test_healthy_prefill(files: dict[str, Path]) -> None:
    path, truth = files["healthy_prefill"], SCENARIOS["healthy_prefill"].truth
    iv = kernel_intervals(path)
    assert len(iv) == truth["kernel_count"] == len(runtime_by_name(path, "cudaLaunchKernel%"))
    busy, gaps, _ = union_stats(iv)
    assert in_range(busy, truth["gpu_busy"]) and in_range(1 - busy, truth["overhead_ratio"])
    assert max(gaps) < truth["max_gap_ns"]
    assert all(in_range(e - s, truth["kernel_ns"]) for s, e in iv)
    cp = rows(path, "SELECT bytes, srcKind, dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert len(cp) == truth["memcpy_count"] and all(b <= 64 << 10 and 1 in (s, d) for b, s, d in cp)
    assert len(nvtx_ranges(path)) == truth["nvtx_ranges"]


def test_uvm_migration_storm(files: dict[str, Path]) -> None:
    path, truth = files["uvm_migration_storm"], SCENARIOS["uvm_migration_storm"].truth
    cp = rows(path, """SELECT copyKind, srcKind, dstKind, migrationCause, bytes, end - start, correlationId,
                       virtualAddress FROM CUPTI_ACTIVITY_KIND_MEMCPY""")
    assert len(cp) == truth["uvm_migrations"]
    kinds = Counter(c[0] for c in cp)
    assert kinds == {11: truth["uvm_htod"], 12: truth["uvm_dtoh"]}
    assert all(c[1] == c[2] == 7 and c[6] == 0 and c[7] for c in cp)
    assert {c[3] for c in cp} == set(truth["migration_causes"])
    assert all(in_range(c[4], truth["migration_bytes_range"]) for c in cp)
    assert sum(c[4] for c in cp if c[0] == 11) == truth["uvm_htod_bytes"]
    iv = kernel_intervals(path)
    assert len(iv) == truth["kernel_count"]
    assert in_range(sum(c[5] for c in cp) / sum(e - s for s, e in iv), truth["migration_vs_kernel_time"])
    assert len(runtime_by_name(path, "cudaDeviceSynchronize%")) == truth["device_syncs"]


def test_uvm_prefetch_host_print(files: dict[str, Path]) -> None:
    path, truth = files["uvm_prefetch_host_print"], SCENARIOS["uvm_prefetch_host_print"].truth
    cp = rows(path, "SELECT copyKind, migrationCause, bytes, start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert len(cp) == truth["uvm_migrations"] and {c[1] for c in cp} == set(truth["migration_causes"])
    assert {c[0] for c in cp} == {11, 12} and sum(c[2] for c in cp) == truth["uvm_bytes"]
    iv = kernel_intervals(path)
    assert len(iv) == truth["kernel_count"]
    assert len(runtime_by_name(path, "cudaMemPrefetchAsync%")) == truth["prefetch_calls"]
    assert len(runtime_by_name(path, "cudaDeviceSynchronize%")) == truth["device_syncs"]
    busy = merge(iv + [(c[3], c[4]) for c in cp])
    window = busy[-1][1] - busy[0][0]
    gaps = [(e, s) for (_, e), (s, _) in zip(busy, busy[1:])]
    assert in_range(sum(c[4] - c[3] for c in cp) / window, truth["uvm_time_share"])
    # the printing: the gaps of milliseconds, each with its CPU samples in printf, all in user mode
    long_gaps = [(s, e) for s, e in gaps if e - s > 1_000_000]
    assert len(long_gaps) == truth["kernel_count"] - 1
    assert in_range(sum(e - s for s, e in long_gaps) / window, truth["host_idle_share"])
    samples = rows(path, """SELECT e.start, s.value, l.kernelMode FROM COMPOSITE_EVENTS e
                            JOIN SAMPLING_CALLCHAINS l ON l.id = e.id AND l.stackDepth = 0
                            JOIN StringIds s ON s.id = l.symbol""")
    assert {f for _, f, _ in samples} <= set(truth["sample_functions"]) and not any(k for _, _, k in samples)
    for s, e in long_gaps:
        assert in_range(sum(s <= t < e for t, _, _ in samples), truth["cpu_samples_per_gap"])


def test_openmp_small_grids(files: dict[str, Path]) -> None:
    path, truth = files["openmp_small_grids"], SCENARIOS["openmp_small_grids"].truth
    ks = rows(path, "SELECT s.value, k.gridX * k.gridY * k.gridZ, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                    "JOIN StringIds s ON s.id = k.demangledName")
    assert len(ks) == truth["kernel_count"] and all(k[0].startswith(truth["kernel_prefix"]) for k in ks)
    assert {k[1] for k in ks} == {truth["ctas_per_launch"]}
    assert len(runtime_by_name(path, "cuLaunchKernel%")) == truth["launch_calls"]
    assert len(runtime_by_name(path, "cuStreamSynchronize%")) == truth["stream_syncs"]
    iv = merge([(k[2], k[3]) for k in ks])
    assert in_range(sum(e - s for s, e in iv) / (iv[-1][1] - iv[0][0]), truth["gpu_busy"])


# ------------------------------------------------------------------------------------------------------------
# idle-gap causes: what the issuing host thread does while the GPU idles
# ------------------------------------------------------------------------------------------------------------
def merge(intervals: list[tuple[int, int]], tolerance: int = 0) -> list[tuple[int, int]]:
    """Sorted, disjoint union of the intervals; intervals less than ``tolerance`` ns apart are joined."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1] + tolerance:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def idle_gaps(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    m = merge(intervals)
    return [(a[1], b[0]) for a, b in zip(m, m[1:])]


def covered_ns(a: int, b: int, merged: list[tuple[int, int]]) -> int:
    """Length of [a, b] covered by the sorted, disjoint intervals ``merged``."""
    return sum(max(0, min(b, e) - max(a, s)) for s, e in merged)


def inside(t: int, intervals: list[tuple[int, int]]) -> bool:
    return any(s <= t <= e for s, e in intervals)


def graph_mode_checks(path: Path, truth: dict[str, Any]) -> tuple[list[tuple[int, int]], set[int]]:
    """Checks shared by the graph-mode decodes; returns the GPU intervals (replays and copies) and the thread
    that launches them."""
    assert meta(path, "META_DATA_CAPTURE")["PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE"] == truth["graph_trace_mode"]
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in tables(connect(path)) and truth["kernel_count"] == 0
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    launches = {c: (s, g) for s, _, g, c, _ in runtime_by_name(path, "cudaGraphLaunch%")}
    gt = rows(path, "SELECT start, end, correlationId, streamId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE ORDER BY start")
    assert len(launches) == truth["graph_launches"] and len(gt) == truth["graph_trace_rows"]
    assert all(launches[c][0] < s and in_range(e - s, truth["replay_ns"]) for s, e, c, _ in gt)
    cp = rows(path, "SELECT start, end, bytes, copyKind, srcKind, dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert len(cp) == truth["memcpy_count"] and all(b <= 4096 and PINNED_KIND in (sk, dk) for *_, b, _, sk, dk in cp)
    assert Counter(c[3] for c in cp) == {1: 2 * truth["steps"], 2: truth["steps"]}
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") == truth["sync_rows"]
    assert one(path, "SELECT count(DISTINCT pid) FROM PROCESSES") == truth["process_count"]
    tid = {g for _, g in launches.values()}
    assert len(tid) == 1
    return [(s, e) for s, e, *_ in gt] + [(s, e) for s, e, *_ in cp], tid


PINNED_KIND = 1


def test_graph_host_gaps(files: dict[str, Path]) -> None:
    check_graph_host_gaps(files["graph_host_gaps"], dict(SCENARIOS["graph_host_gaps"].truth))


def check_graph_host_gaps(path: Path, truth: dict[str, Any]) -> None:
    gpu, tid = graph_mode_checks(path, dict(truth))
    busy, _, _ = union_stats(gpu)
    assert in_range(busy, truth["gpu_busy"])
    ranges = nvtx_ranges(path)
    assert len(ranges) == truth["nvtx_ranges"] and {r[3] for r in ranges} == tid
    labels = (truth["nvtx_step_label"], *truth["nvtx_host_labels"])
    assert Counter(r[2] for r in ranges) == {lab: truth["steps"] for lab in labels}
    for lab, key in zip(truth["nvtx_host_labels"], ("schedule_ns", "process_outputs_ns")):
        assert all(in_range(e - s, truth[key]) for s, e, label, *_ in ranges if label == lab)
    # the long idle gaps are host time of the launching thread: inside 'schedule'/'process_outputs', no CUDA call
    host = merge([(s, e) for s, e, lab, *_ in ranges if lab in truth["nvtx_host_labels"]])
    assert not any(covered_ns(s, e, host) for s, e, g, _, _ in runtime_by_name(path, "%") if g in tid)
    gaps = idle_gaps(gpu)
    long = [(a, b) for a, b in gaps if b - a > truth["max_other_gap_ns"]]
    assert len(long) == truth["host_gaps"] and all(in_range(b - a, truth["host_gap_ns"]) for a, b in long)
    assert in_range(sum(covered_ns(a, b, host) for a, b in gaps) / sum(b - a for a, b in gaps),
                    truth["idle_in_host_ranges"])
    # OS runtime calls: one poll() inside each 'schedule' range, plus the profiling started/finished markers
    osrt = rows(path, """SELECT o.start, o.end, o.eventClass, o.globalTid, s.value, o.nestingLevel, o.callchainId
                         FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId ORDER BY o.start""")
    calls = [r for r in osrt if r[2] == 27]
    assert len(calls) == truth["osrt_calls"] and {r[4] for r in calls} == {truth["osrt_call"]}
    assert all(in_range(e - s, truth["osrt_call_ns"]) and g in tid and lvl == 0 and cc == 0
               for s, e, _, g, _, lvl, cc in calls)
    schedule = [(s, e) for s, e, lab, *_ in ranges if lab == truth["nvtx_host_labels"][0]]
    assert all(sum(a <= s and e <= b for a, b in schedule) == 1 for s, e, *_ in calls)
    markers = [r for r in osrt if r[2] != 27]
    assert len(markers) == truth["osrt_markers"] and [r[2] for r in markers] == [31, 32]
    assert all(s == e and g >> 24 & PID_MASK == next(iter(tid)) >> 24 & PID_MASK and g & PID_MASK == 0
               and lvl is None for s, e, _, g, _, lvl, _ in markers)
    assert markers[0][0] < calls[0][0] and markers[-1][0] > calls[-1][1]


def test_healthy_graph_decode(files: dict[str, Path]) -> None:
    check_healthy_graph_decode(files["healthy_graph_decode"], dict(SCENARIOS["healthy_graph_decode"].truth))


def check_healthy_graph_decode(path: Path, truth: dict[str, Any]) -> None:
    gpu, tid = graph_mode_checks(path, dict(truth))
    busy, gaps, _ = union_stats(gpu)
    assert in_range(busy, truth["gpu_busy"]) and max(gaps) < truth["max_gap_ns"]
    replays = rows(path, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    assert union_stats(replays)[0] >= truth["gpu_busy"][0]  # the replays alone keep the GPU busy
    ranges = nvtx_ranges(path)
    assert len(ranges) == truth["nvtx_ranges"] and {r[2] for r in ranges} == {truth["nvtx_step_label"]}
    assert "OSRT_API" not in tables(connect(path))


def test_graph_replays_fill(files: dict[str, Path]) -> None:
    check_graph_replays_fill(files["graph_replays_fill"], dict(SCENARIOS["graph_replays_fill"].truth))


def check_graph_replays_fill(path: Path, truth: dict[str, Any]) -> None:
    assert meta(path, "META_DATA_CAPTURE")["PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE"] == truth["graph_trace_mode"]
    replays = rows(path, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE ORDER BY start")
    assert len(replays) == truth["graph_trace_rows"] == len(runtime_by_name(path, "cudaGraphLaunch%"))
    assert all(in_range(e - s, truth["replay_ns"]) for s, e in replays)
    iv = kernel_intervals(path)  # only the eager kernels outside the graphs are in the kernel table
    assert len(iv) == truth["kernel_count"] == len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert all(in_range(e - s, truth["eager_kernel_ns"]) for s, e in iv)
    assert "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables(connect(path)) and truth["memcpy_count"] == 0
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    busy, _, _ = union_stats(replays + iv)
    assert in_range(busy, truth["gpu_busy"])
    assert replays[-1][1] - replays[0][0] >= truth["capture_ns_min"]

def test_alloc_churn(files: dict[str, Path]) -> None:
    check_alloc_churn(files["alloc_churn"], dict(SCENARIOS["alloc_churn"].truth))


def check_alloc_churn(path: Path, truth: dict[str, Any]) -> None:
    iv = kernel_intervals(path)
    assert len(iv) == truth["kernel_count"] == len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert all(in_range(e - s, truth["kernel_ns"]) for s, e in iv)
    mallocs, frees = runtime_by_name(path, "cudaMalloc%"), runtime_by_name(path, "cudaFree%")
    assert len(mallocs) == truth["malloc_calls"] and len(frees) == truth["free_calls"]
    assert all(in_range(e - s, truth["malloc_call_ns"]) for s, e, *_ in mallocs)
    assert len(runtime_by_name(path, "%Synchronize%")) == truth["sync_calls"]
    t = tables(connect(path))
    assert "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" not in t and "NVTX_EVENTS" not in t
    # cudaFree is entered while the GPU runs the iteration's kernels and returns 40-150 us after they finished
    blocks = merge(iv, tolerance=truth["max_other_gap_ns"])
    assert len(blocks) == truth["iterations"]
    for (s, e, *_), (bs, be) in zip(frees, blocks):
        assert bs < s < be and in_range(e - be, truth["free_after_gpu_ns"])
    alloc = [(s, e) for s, e, *_ in mallocs + frees]
    assert in_range(sum(e - s for s, e in alloc) / sum(e - s for s, e in iv), truth["alloc_vs_kernel_time"])
    busy, _, _ = union_stats(iv)
    assert in_range(busy, truth["gpu_busy"])
    gaps = idle_gaps(iv)
    long = [(a, b) for a, b in gaps if b - a > truth["max_other_gap_ns"]]
    assert len(long) == truth["alloc_gaps"] and all(in_range(b - a, truth["alloc_gap_ns"]) for a, b in long)
    calls = merge(alloc)
    assert all(covered_ns(a, b, calls) > 0 for a, b in long)  # every idle gap holds a cudaMalloc/cudaFree
    assert in_range(sum(covered_ns(a, b, calls) for a, b in long) / sum(b - a for a, b in long),
                    truth["idle_in_alloc_calls"])


def test_tiny_kernels_queued(files: dict[str, Path]) -> None:
    check_tiny_kernels_queued(files["tiny_kernels_queued"], dict(SCENARIOS["tiny_kernels_queued"].truth))


def check_tiny_kernels_queued(path: Path, truth: dict[str, Any]) -> None:
    lk = rows(path, """SELECT k.start, k.end, r.start, r.end, s.value, k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k
                       JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                       JOIN StringIds s ON s.id = k.shortName ORDER BY k.start""")
    launches = runtime_by_name(path, truth["launch_api"])
    assert len(lk) == truth["kernel_count"] == len(launches) == truth["launch_calls"]
    assert all(ec == 1 and in_range(e - s, truth["launch_call_ns"]) for s, e, _, _, ec in launches)
    assert {r[5] for r in lk} == {truth["stream"]}
    names = Counter(r[4] for r in lk).most_common()
    assert tuple(n for n, _ in names) == truth["kernel_names"]
    assert tuple(c for _, c in names) == truth["kernel_name_counts"]
    assert all(in_range(ke - ks, truth["kernel_ns"]) for ks, ke, *_ in lk)
    assert in_range(statistics.mean(ke - ks for ks, ke, *_ in lk), truth["mean_kernel_ns"])
    # the host runs ahead: a kernel's launch call returns before the previous kernel ends
    ahead = sum(lk[i][3] < lk[i - 1][1] for i in range(1, len(lk))) / (len(lk) - 1)
    assert in_range(ahead, truth["queued_ahead_fraction"])
    busy, gaps, _ = union_stats([(ks, ke) for ks, ke, *_ in lk])
    assert in_range(busy, truth["gpu_busy"]) and in_range(1 - busy, truth["overhead_ratio"])
    assert in_range(statistics.mean(gaps), truth["mean_gap_ns"])
    queued = [g for g in gaps if in_range(g, truth["queued_gap_ns"])]
    assert in_range(len(queued) / len(gaps), truth["queued_gap_fraction"])
    syncs = runtime_by_name(path, "cuCtxSynchronize")
    assert len(syncs) == truth["ctx_syncs"] and {s[4] for s in syncs} == {1}
    sr = rows(path, "SELECT syncType, streamId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    assert len(sr) == truth["sync_rows"] and set(sr) == {(truth["sync_type"], 4294967295)}
    # the iteration boundaries: the last kernel of an iteration ends while the host waits in cuCtxSynchronize
    longer = [lk[i - 1][1] for i in range(1, len(lk)) if lk[i][0] - lk[i - 1][1] > truth["queued_gap_ns"][1]]
    assert sum(inside(t, [(s, e) for s, e, *_ in syncs]) for t in longer) == truth["iterations"] - 1


def test_hidden_copies(files: dict[str, Path]) -> None:
    check_hidden_copies(files["hidden_copies"], dict(SCENARIOS["hidden_copies"].truth))


def check_hidden_copies(path: Path, truth: dict[str, Any]) -> None:
    k = rows(path, "SELECT start, end, streamId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")
    assert len(k) == truth["kernel_count"] == len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert {s for *_, s in k} == {truth["compute_stream"]}
    assert all(in_range(e - s, truth["kernel_ns"]) for s, e, _ in k)
    iv = [(s, e) for s, e, _ in k]
    busy, gaps, _ = union_stats(iv)
    assert in_range(busy, truth["gpu_busy"]) and max(gaps) < truth["max_gap_ns"]
    cp = rows(path, """SELECT start, end, bytes, copyKind, srcKind, dstKind, streamId, correlationId
                       FROM CUPTI_ACTIVITY_KIND_MEMCPY""")
    assert len(cp) == truth["memcpy_count"] and sum(c[3] == 1 for c in cp) == truth["htod_count"]
    assert sum(c[4] == PINNED_KIND for c in cp) / len(cp) == truth["pinned_fraction"]
    assert {c[6] for c in cp} == {truth["copy_stream"]} != {truth["compute_stream"]}
    calls = {c: (s, e) for s, e, _, c, _ in runtime_by_name(path, "cudaMemcpyAsync%")}
    assert len(calls) == len(cp)
    merged = merge(iv)
    for s, e, b, *_, corr in cp:
        assert calls[corr][0] < s and calls[corr][1] < e  # asynchronous: the call returns before the copy ends
        assert in_range(b, truth["bytes_per_copy"]) and in_range(e - s, truth["copy_ns"])
        assert in_range(b / ((e - s) / 1e9), truth["memcpy_bandwidth_Bps"])
        assert inside(s, iv) and inside(e, iv)  # starts and ends while a kernel runs
        assert in_range(covered_ns(s, e, merged) / (e - s), truth["copy_under_kernels"])
    assert len(runtime_by_name(path, "cudaEventSynchronize%")) == truth["event_syncs"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE syncType = 1") == \
        truth["event_syncs"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]


def test_small_grid_decode(files: dict[str, Path]) -> None:
    check_small_grid_decode(files["small_grid_decode"], dict(SCENARIOS["small_grid_decode"].truth))


def check_small_grid_decode(path: Path, truth: dict[str, Any]) -> None:
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert one(path, "SELECT count(DISTINCT gridX * gridY * gridZ) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 1
    assert one(path, "SELECT min(gridX * gridY * gridZ) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["ctas_per_launch"]
    assert one(path, "SELECT smCount FROM TARGET_INFO_GPU") == truth["sm_count"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NULL") == 0
    assert len(runtime_by_name(path, "cudaGraphLaunch%")) == truth["graph_launches"]
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    ks = rows(path, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")
    busy = sum(e - s for s, e in ks)
    assert in_range(busy / (ks[-1][1] - ks[0][0]), truth["gpu_busy"])


def test_no_loop_load_syncs(files: dict[str, Path]) -> None:
    check_no_loop_load_syncs(files["no_loop_load_syncs"], dict(SCENARIOS["no_loop_load_syncs"].truth))


def check_no_loop_load_syncs(path: Path, truth: dict[str, Any]) -> None:
    ks = rows(path, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")
    assert len(ks) == truth["kernel_count"]
    first = ks[0][0]
    syncs = [s for s, _, _, _, _ in runtime_by_name(path, "cudaStreamSynchronize%")]
    assert sum(s < first for s in syncs) == truth["syncs_before_first_kernel"]
    assert sum(s >= first for s in syncs) == truth["syncs_after_first_kernel"]
    assert one(path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND start < {first}") == \
        truth["load_copies"]
    busy, _, _ = union_stats([(s, e) for s, e in ks])
    assert in_range(busy, truth["gpu_busy"])


def test_busy_gpu_sync_overhead(files: dict[str, Path]) -> None:
    check_busy_gpu_sync_overhead(files["busy_gpu_sync_overhead"], dict(SCENARIOS["busy_gpu_sync_overhead"].truth))


def check_busy_gpu_sync_overhead(path: Path, truth: dict[str, Any]) -> None:
    ks = rows(path, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")
    assert len(ks) == truth["kernel_count"]
    syncs = [(s, e) for s, e, _, _, _ in runtime_by_name(path, "cudaStreamSynchronize%")]
    assert len(syncs) == truth["stream_syncs"]
    busy, _, _ = union_stats([(s, e) for s, e in ks])
    assert in_range(busy, truth["gpu_busy"])
    # the idle gaps that open while the host is blocked in a sync, as a share of the kernels' window
    in_sync = sum(b[0] - a[1] for a, b in zip(ks, ks[1:]) if any(s <= a[1] < e for s, e in syncs))
    assert in_range(in_sync / (ks[-1][1] - ks[0][0]), truth["sync_idle_share"])


def test_first_launch_module_load(files: dict[str, Path]) -> None:
    check_first_launch_module_load(files["first_launch_module_load"], dict(SCENARIOS["first_launch_module_load"].truth))


def check_first_launch_module_load(path: Path, truth: dict[str, Any]) -> None:
    launches = runtime_by_name(path, "cudaLaunchKernel%")
    iv = kernel_intervals(path)
    assert len(iv) == truth["kernel_count"] == len(launches) == truth["launch_calls"]
    first, *rest = launches
    assert in_range(first[1] - first[0], truth["first_launch_ns"])
    assert all(in_range(e - s, truth["other_launch_ns"]) for s, e, *_ in rest)
    # the first kernel runs only once its launch (and the module load inside it) returned
    assert min(s for s, _ in iv) > first[1]
    syncs = runtime_by_name(path, "cudaStreamSynchronize%")
    assert len(syncs) == truth["stream_syncs"] == truth["iterations"]
    ends = [e for _, e, *_ in syncs]
    assert all(in_range(b - a, truth["iteration_ns"]) for a, b in zip(ends, ends[1:]))
    busy, _, _ = union_stats([(s, e) for s, e in iv if s > first[1]])
    assert in_range(busy, truth["loop_gpu_busy"])
    copies = rows(path, "SELECT start FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1")
    assert len(copies) == truth["htod_count"] and copies[0][0] < first[0]
    span = one(path, "SELECT duration FROM ANALYSIS_DETAILS")
    assert in_range((first[1] - first[0]) / span, truth["first_launch_share"])


def test_pinned_alloc_before_loop(files: dict[str, Path]) -> None:
    check_pinned_alloc_before_loop(files["pinned_alloc_before_loop"], dict(SCENARIOS["pinned_alloc_before_loop"].truth))


def check_pinned_alloc_before_loop(path: Path, truth: dict[str, Any]) -> None:
    launches = runtime_by_name(path, "cudaLaunchKernel%")
    iv = kernel_intervals(path)
    assert len(iv) == truth["kernel_count"] == len(launches) == truth["launch_calls"] == 3 * truth["iterations"]
    assert all(in_range(e - s, truth["kernel_ns"]) for s, e in iv)
    host = runtime_by_name(path, "cuMemHostAlloc")
    assert len(host) == 1 and in_range(host[0][1] - host[0][0], truth["host_alloc_ns"])
    assert host[0][4] == 1  # a driver API call (eventClass 1)
    device = runtime_by_name(path, "cudaMalloc%")
    assert len(device) == truth["device_allocs"] and len(host + device) == truth["allocs_before_first_launch"]
    assert all(e < launches[0][0] for _, e, *_ in host + device)
    copy = rows(path, "SELECT start, end, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1")
    assert len(copy) == 1 and copy[0][2] == truth["htod_bytes"] and copy[0][1] < host[0][0]  # the GPU ran before it
    busy, gaps, _ = union_stats(iv)
    assert in_range(busy, truth["loop_gpu_busy"]) and all(in_range(g, truth["loop_gap_ns"]) for g in gaps)


GAP_CAUSE_CHECKS = {"no_loop_load_syncs": check_no_loop_load_syncs,
                    "busy_gpu_sync_overhead": check_busy_gpu_sync_overhead,
                    "graph_host_gaps": check_graph_host_gaps, "healthy_graph_decode": check_healthy_graph_decode,
                    "graph_replays_fill": check_graph_replays_fill,
                    "alloc_churn": check_alloc_churn, "tiny_kernels_queued": check_tiny_kernels_queued,
                    "hidden_copies": check_hidden_copies, "small_grid_decode": check_small_grid_decode,
                    "first_launch_module_load": check_first_launch_module_load,
                    "pinned_alloc_before_loop": check_pinned_alloc_before_loop}


@pytest.mark.parametrize("name", slow_but(GAP_CAUSE_CHECKS, "hidden_copies"))
def test_gap_cause_truth_other_seed_and_scale(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.sqlite"
    sc = generate(name, path, seed=11, scale=2)
    assert sc.truth != SCENARIOS[name].truth
    GAP_CAUSE_CHECKS[name](path, dict(sc.truth))


# ------------------------------------------------------------------------------------------------------------
# phases and idle windows: a problem confined to part of the run
# ------------------------------------------------------------------------------------------------------------
def _overhead_by_range(path: Path, ranges: list[tuple[int, int, str, int, int]],
                       labels: tuple[str, ...]) -> dict[str, tuple[int, float]]:
    """{label: (kernels, idle between consecutive kernels of one range / their span, summed over the ranges)};
    a kernel belongs to the range its launching call starts in on the same thread (exactly one of ``labels``)."""
    per_range: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for ks, ke, api, tid, _ in launch_of_kernels(path):
        inside = [i for i, (s, e, lab, g, _) in enumerate(ranges) if lab in labels and g == tid and s <= api <= e]
        assert len(inside) == 1
        per_range[inside[0]].append((ks, ke))
    out = {}
    for label in labels:
        idle = span = count = 0
        for i, iv in per_range.items():
            if ranges[i][2] == label:
                _, gaps, sp = union_stats(iv)
                idle, span, count = idle + sum(gaps), span + sp, count + len(iv)
        out[label] = (count, idle / span)
    return out


def check_prefill_heavy_eager_decode(path: Path, truth: dict[str, Any]) -> None:
    ranges = nvtx_ranges(path)
    labels = Counter(r[2] for r in ranges)
    assert labels == {"prefill": truth["nvtx_prefill_ranges"], "decode": truth["nvtx_decode_ranges"],
                      truth["nvtx_forward_label"]: truth["nvtx_forward_ranges"]}
    dom = rows(path, "SELECT text FROM NVTX_EVENTS WHERE eventType = 75")
    assert dom == [(truth["nvtx_domain"],)]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == truth["memcpy_count"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    assert one(path, "SELECT count(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["device_count"]
    assert one(path, "SELECT count(*) FROM PROCESSES") == truth["process_count"]
    # prefill and decode alternate: each prefill is followed by decode_steps_per_iteration decode ranges
    order = [lab for _, _, lab, *_ in ranges if lab in ("prefill", "decode")]
    per = truth["decode_steps_per_iteration"]
    assert order == (["prefill"] + ["decode"] * per) * truth["iterations"]
    phase = _overhead_by_range(path, ranges, ("prefill", "decode"))
    assert phase["prefill"][0] == truth["prefill_kernels"] and phase["decode"][0] == truth["decode_kernels"]
    assert in_range(phase["prefill"][1], truth["prefill_overhead_ratio"])
    assert in_range(phase["decode"][1], truth["decode_overhead_ratio"])
    # the whole run looks well fed: gaps between consecutive kernels are a small share of the window
    busy, _, span = union_stats(kernel_intervals(path))
    assert in_range(1 - busy, truth["overhead_ratio"]) and in_range(busy, truth["gpu_busy"])
    assert 1 - busy <= 0.15 < 0.3 <= truth["decode_overhead_ratio"][0]
    decode_ns = sum(e - s for s, e, lab, *_ in ranges if lab == "decode")
    assert in_range(decode_ns / span, truth["decode_window_share"])
    durations: dict[str, list[int]] = defaultdict(list)
    for ks, ke, api, tid, _ in launch_of_kernels(path):
        durations["decode" if range_of(api, tid, ranges, "decode") else "prefill"].append(ke - ks)
    assert all(in_range(d, truth["decode_kernel_ns"]) for d in durations["decode"])
    assert all(in_range(d, truth["prefill_kernel_ns"]) for d in durations["prefill"])
    long = [d for d in durations["prefill"] if d >= truth["prefill_long_kernel_ns"][0]]
    assert len(long) == truth["prefill_long_kernels"]
    assert all(in_range(d, truth["prefill_long_kernel_ns"]) for d in long)


def _activity(path: Path) -> list[tuple[int, int]]:
    """(start, end) of every CUDA API call and every GPU activity record."""
    with connect(path) as con:
        t = set(tables(con))
    out: list[tuple[int, int]] = []
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                  "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        if table in t:
            out += rows(path, f'SELECT start, "end" FROM {table}')
    return out


def check_idle_server_bursts(path: Path, truth: dict[str, Any]) -> None:
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == truth["memcpy_count"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    assert rows(path, "SELECT name FROM PROCESSES WHERE pid IN (SELECT (globalPid >> 24) & 16777215 "
                      "FROM CUPTI_ACTIVITY_KIND_KERNEL)") == [(truth["process_name"],)]
    assert "vllm" in truth["process_name"]
    ranges = nvtx_ranges(path)
    assert len(ranges) == truth["nvtx_ranges"] and {r[2] for r in ranges} == {truth["nvtx_step_label"]}
    duration = one(path, "SELECT duration FROM ANALYSIS_DETAILS")
    assert meta(path, "META_DATA_CAPTURE")["PROCESS_0:ARGUMENT_1"] == "vllm.entrypoints.openai.api_server"
    # merge every API call and GPU record; the idle windows are the stretches >= 1 s of [0, duration] outside them
    iv = sorted(_activity(path))
    merged = [list(iv[0])]
    for s, e in iv[1:]:
        if s > merged[-1][1]:
            merged.append([s, e])
        else:
            merged[-1][1] = max(merged[-1][1], e)
    edges = [0] + [x for m in merged for x in m] + [duration]
    gaps = [(edges[i], edges[i + 1]) for i in range(0, len(edges), 2)]
    idle = [(s, e) for s, e in gaps if e - s >= truth["idle_window_min_ns"]]
    assert len(idle) == truth["idle_windows"] == truth["bursts"] + 1
    assert max(e - s for s, e in gaps if e - s < truth["idle_window_min_ns"]) < 1_000_000  # inside a burst
    assert idle[0][0] == 0 and idle[-1][1] == duration
    assert in_range(idle[0][1] - idle[0][0], truth["lead_quiet_ns"])
    assert in_range(idle[-1][1] - idle[-1][0], truth["tail_quiet_ns"])
    assert all(in_range(e - s, truth["quiet_between_ns"]) for s, e in idle[1:-1])
    assert len({e - s for s, e in idle[1:-1]}) == len(idle) - 2  # the quiet periods vary
    assert in_range(sum(e - s for s, e in idle) / duration, truth["idle_share"])
    # the step ranges lie in the bursts (they open/close a few us before/after the step's first/last CUDA call)
    assert all(min(e, ie) - max(s, is_) < 5_000 for s, e, *_ in ranges for is_, ie in idle)
    # each burst: steps_per_burst launch-bound eager decode steps
    kernels = sorted(kernel_intervals(path))
    for (_, b0), (b1, _) in zip(idle, idle[1:]):
        assert in_range(b1 - b0, truth["burst_ns"])
        ks = [(s, e) for s, e in kernels if b0 <= s and e <= b1]
        assert len(ks) == truth["steps_per_burst"] * gen.PER_STEP_32
        assert sum(b0 <= (s + e) // 2 <= b1 for s, e, *_ in ranges) == truth["steps_per_burst"]
        assert in_range(1 - union_stats(ks)[0], truth["burst_overhead_ratio"])
    assert in_range(1 - union_stats(kernels)[0], truth["overhead_ratio"])


def check_short_decode_after_prefills(path: Path, truth: dict[str, Any]) -> None:
    ranges = nvtx_ranges(path)
    labels = Counter(r[2] for r in ranges)
    assert labels == {"prefill": truth["nvtx_prefill_ranges"], "decode": truth["nvtx_decode_ranges"],
                      truth["nvtx_forward_label"]: truth["nvtx_forward_ranges"]}
    assert rows(path, "SELECT text FROM NVTX_EVENTS WHERE eventType = 75") == [(truth["nvtx_domain"],)]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == truth["memcpy_count"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    assert one(path, "SELECT count(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["device_count"]
    assert one(path, "SELECT count(*) FROM PROCESSES") == truth["process_count"]
    # every prefill comes first, then every decode step
    order = [lab for _, _, lab, *_ in ranges if lab in ("prefill", "decode")]
    assert order == ["prefill"] * truth["prefills"] + ["decode"] * truth["decode_steps"]
    phase = _overhead_by_range(path, ranges, ("prefill", "decode"))
    assert phase["prefill"][0] == truth["prefill_kernels"] and phase["decode"][0] == truth["decode_kernels"]
    assert in_range(phase["prefill"][1], truth["prefill_overhead_ratio"])
    assert in_range(phase["decode"][1], truth["decode_overhead_ratio"])
    assert all(in_range(e - s, truth["decode_step_ns"]) for s, e, lab, *_ in ranges if lab == "decode")
    # over the whole run the GPU is nearly always busy: the decode's launch gaps are a sliver of the window
    busy, _, span = union_stats(kernel_intervals(path))
    assert in_range(1 - busy, truth["overhead_ratio"]) and in_range(busy, truth["gpu_busy"])
    decode_ns = sum(e - s for s, e, lab, *_ in ranges if lab == "decode")
    assert in_range(decode_ns / span, truth["decode_window_share"])


def check_server_bursts(path: Path, truth: dict[str, Any]) -> None:
    """server_bursts_short_waits / server_bursts_epoll: bursts of launch-bound steps, quiet stretches between them
    (no CUDA call, no GPU record, no step range), and in the epoll scenario the thread in epoll_wait through them."""
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    ranges = sorted(nvtx_ranges(path))
    assert len(ranges) == truth["nvtx_ranges"] and {r[2] for r in ranges} == {truth["nvtx_step_label"]}
    iv = sorted(_activity(path) + [(s, e) for s, e, *_ in ranges])
    merged = [list(iv[0])]
    for s, e in iv[1:]:
        if s > merged[-1][1]:
            merged.append([s, e])
        else:
            merged[-1][1] = max(merged[-1][1], e)
    gaps = [b[0] - a[1] for a, b in zip(merged, merged[1:])]
    quiet = [g for g in gaps if g >= 1_000_000]
    assert len(quiet) == truth["quiet_stretches"] == truth["bursts"] - 1
    assert all(truth["quiet_ns"][0] <= g <= truth["quiet_ns"][1] + 200_000 for g in quiet)
    assert max(g for g in gaps if g < 1_000_000) < 100_000  # inside a burst: the pauses between steps
    periods = [b[0] - a[0] for a, b in zip(ranges, ranges[1:])]
    assert in_range(statistics.median(periods), truth["step_ns"])
    span = merged[-1][1] - merged[0][0]
    assert in_range(sum(quiet) / span, truth["wait_share"])
    kernels = sorted(kernel_intervals(path))
    assert in_range(1 - union_stats(kernels[:truth["steps_per_burst"] * gen.PER_STEP_32])[0],
                    truth["burst_overhead_ratio"])
    with connect(path) as con:
        traced = "OSRT_API" in tables(con)
    osrt = rows(path, "SELECT o.start, o.end, s.value, o.globalTid FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                      "WHERE o.eventClass = 27") if traced else []
    if "osrt_call" not in truth:
        assert not osrt  # no OS-runtime trace: nothing says what the thread did in the stretches
        return
    assert {r[2] for r in osrt} == {truth["osrt_call"]}
    assert {r[3] for r in osrt} == {r[3] for r in ranges}  # the engine thread that opens the steps
    assert one(path, "SELECT count(*) FROM OSRT_API WHERE eventClass IN (31, 32)") == truth["osrt_markers"]
    ends = [(a[1], b[0]) for a, b in zip(merged, merged[1:]) if b[0] - a[1] >= 1_000_000]
    for lo, hi in ends:
        covered = sum(min(e, hi) - max(s, lo) for s, e, *_ in osrt if s < hi and e > lo)
        assert in_range(covered / (hi - lo), truth["epoll_share"])


def _step_periods(ranges: list[tuple[int, int, str, int, int]]) -> list[int]:
    """From each step range's start to the next one's; the last step's is its own duration."""
    return [b[0] - a[0] for a, b in zip(ranges, ranges[1:])] + [ranges[-1][1] - ranges[-1][0]]


def _check_prefill_then_decode(path: Path, steps: list[tuple[int, int, str, int, int]], is_prefill: list[bool],
                               truth: dict[str, Any]) -> None:
    """Periods, decode overhead ratio and decode share of the GPU window of steps split into prefill and decode."""
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    assert one(path, "SELECT count(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["device_count"]
    assert one(path, "SELECT count(*) FROM PROCESSES") == truth["process_count"]
    periods = _step_periods(steps)
    assert all(in_range(p, truth["prefill_period_ns" if pre else "decode_period_ns"])
               for p, pre in zip(periods, is_prefill))
    # each step's loop iteration, up to the next step's start (the last one: to the end)
    ends = [b[0] - 1 for b in steps[1:]] + [2 ** 62]
    labelled = [(st, en, "prefill" if pre else "decode", tid, dom)
                for (st, _, _, tid, dom), en, pre in zip(steps, ends, is_prefill)]
    by_phase = _overhead_by_range(path, labelled, ("prefill", "decode"))
    assert in_range(by_phase["decode"][1], truth["decode_overhead_ratio"])
    _, _, span = union_stats(kernel_intervals(path))
    decode_ns = sum(p for p, pre in zip(periods, is_prefill) if not pre)
    assert in_range(decode_ns / span, truth["decode_window_share"])


def check_trtllm_forward_steps(path: Path, truth: dict[str, Any]) -> None:
    steps = [r for r in nvtx_ranges(path) if r[2].startswith("[Executor] _forward_step ")]
    assert len(steps) == truth["steps"]
    expected = [gen.trt_step_text(i, c, g) for i, (c, g) in enumerate(zip(truth["ctx_reqs"], truth["gen_reqs"]))]
    assert [r[2] for r in steps] == expected
    assert sum(c > 0 for c in truth["ctx_reqs"]) == truth["context_steps"]
    _check_prefill_then_decode(path, steps, [c > 0 for c in truth["ctx_reqs"]], truth)


def check_vllm_v1_forward_ranges(path: Path, truth: dict[str, Any]) -> None:
    ranges = nvtx_ranges(path)
    assert Counter(r[2] for r in ranges) == truth["nvtx_ranges"]
    steps = [r for r in ranges if r[2] == "gpu_model_runner: forward"]
    # no range names a phase: the prefill steps are the first ones, told apart only by their kernels
    assert len(steps) == truth["steps"]
    pre = [phase == "prefill" for phase in truth["step_phases"]]
    _check_prefill_then_decode(path, steps, pre, truth)
    forward = defaultdict(list)
    for ks, ke, api, tid, _ in launch_of_kernels(path):
        forward[next((i for i, (s, e, _, g, _) in enumerate(steps) if g == tid and s <= api <= e), None)].append(
            ke - ks)
    assert len(forward[None]) == truth["steps"] * (truth["kernels_per_step"] - truth["forward_kernels_per_step"])
    for i, durations in forward.items():
        if i is not None:
            assert len(durations) == truth["forward_kernels_per_step"]
            mean = sum(durations) / len(durations)
            assert in_range(mean, truth["prefill_mean_kernel_ns" if pre[i] else "decode_mean_kernel_ns"])


def _time_share(path: Path, names: tuple[str, ...]) -> float:
    """Share of the kernel and copy time (sums of durations) in the kernels of these demangled names."""
    with connect(path) as con:
        kernels = con.execute('SELECT s.value, k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k '
                              "JOIN StringIds s ON s.id = k.demangledName").fetchall()
        copies = con.execute('SELECT coalesce(sum("end" - start), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY').fetchone()[0]
    return sum(d for n, d in kernels if n in names) / (sum(d for _, d in kernels) + copies)


@pytest.mark.parametrize("name", ["eager_unfused_glue", "long_context_decode", "fp32_sgemm_a100", "bf16_xmma_a100",
                                  "fp32_gemm_turing"])
def test_operation_class_truth(files: dict[str, Path], name: str) -> None:
    """The share of the GPU time the scenario puts in one operation class, from the raw tables."""
    path, truth = files[name], SCENARIOS[name].truth
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert in_range(union_stats(sorted(kernel_intervals(path)))[0], truth["gpu_busy"])
    if name == "eager_unfused_glue":
        assert in_range(_time_share(path, truth["norm_elementwise_kernels"]), truth["norm_elementwise_share"])
    elif name == "long_context_decode":
        assert in_range(_time_share(path, truth["attention_kernels"]), truth["attention_share"])
    else:
        assert in_range(_time_share(path, truth["gemm_kernels"]), truth["gemm_share"])
        with connect(path) as con:
            assert con.execute("SELECT computeMajor, computeMinor FROM TARGET_INFO_GPU").fetchall() == [
                truth["compute_capability"]]


PHASE_CHECKS = {"prefill_heavy_eager_decode": check_prefill_heavy_eager_decode,
                "idle_server_bursts": check_idle_server_bursts, "server_bursts_short_waits": check_server_bursts,
                "server_bursts_epoll": check_server_bursts,
                "short_decode_after_prefills": check_short_decode_after_prefills,
                "trtllm_forward_steps": check_trtllm_forward_steps,
                "vllm_v1_forward_ranges": check_vllm_v1_forward_ranges}


@pytest.mark.parametrize("name", list(PHASE_CHECKS))
def test_phase_truth(files: dict[str, Path], name: str) -> None:
    PHASE_CHECKS[name](files[name], dict(SCENARIOS[name].truth))


@pytest.mark.parametrize("name", slow_but(PHASE_CHECKS, "short_decode_after_prefills"))
@pytest.mark.parametrize("seed", slow_but([1, 5, 11], 5))
def test_phase_truth_other_seeds(tmp_path: Path, name: str, seed: int) -> None:
    path = tmp_path / f"{name}.sqlite"
    sc = generate(name, path, seed=seed)
    PHASE_CHECKS[name](path, dict(sc.truth))
    assert path.stat().st_size < 3_000_000


@pytest.mark.parametrize("name", slow_but(PHASE_CHECKS, "short_decode_after_prefills"))
def test_phase_truth_scale(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.sqlite"
    sc = generate(name, path, seed=3, scale=2)
    assert sc.truth["kernel_count"] == 2 * SCENARIOS[name].truth["kernel_count"]
    PHASE_CHECKS[name](path, dict(sc.truth))


# ------------------------------------------------------------------------------------------------------------
# capture problems
# ------------------------------------------------------------------------------------------------------------
def _streams(path: Path) -> dict[str, str]:
    """ProcessStreams as {'stdout'|'stderr': content}."""
    out = {}
    for fname, content in rows(path, """SELECT f.value, c.value FROM ProcessStreams p JOIN StringIds f
                                        ON f.id = p.filenameId JOIN StringIds c ON c.id = p.contentId"""):
        assert re.fullmatch(r"/tmp/nvidia/nsight_systems/quadd_session_\d+/streams/pid_\d+_std(out|err)\.log", fname)
        out[fname.rsplit("_", 1)[1].split(".")[0]] = content
    return out


@pytest.mark.parametrize("name", CAPTURE)
def test_capture_problem_tables(files: dict[str, Path], name: str) -> None:
    path, truth = files[name], SCENARIOS[name].truth
    with connect(path) as con:
        t = tables(con)
    assert [x for x in t if not x.startswith("ENUM_")] == sorted(truth["tables"])
    assert one(path, "SELECT count(*) FROM TARGET_INFO_GPU") == truth["target_info_gpus"]

    def count(table: str) -> int:
        return one(path, f"SELECT count(*) FROM {table}") if table in t else 0

    assert count("PROCESSES") == truth["process_count"]
    assert count("CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]
    assert count("CUPTI_ACTIVITY_KIND_RUNTIME") == truth["api_calls"]
    assert count("CUPTI_ACTIVITY_KIND_MEMCPY") == truth["memcpy_count"]
    assert count("NVTX_EVENTS") == truth.get("nvtx_ranges", 0) + truth.get("nvtx_domain_creates", 0)
    duration = one(path, "SELECT duration FROM ANALYSIS_DETAILS")
    assert in_range(duration, truth["capture_ns"])
    assert meta(path, "META_DATA_CAPTURE")["PROCESS_0:COLLECT_CUDA_TRACE"] == truth["collect_cuda_trace"]
    # the program output nsys kept, and the diagnostic pointing at it
    assert set(_streams(path)) == {"stdout", "stderr"}
    diag = [txt for (txt,) in rows(path, "SELECT text FROM DIAGNOSTIC_EVENT ORDER BY timestamp")]
    assert diag[0] == "Profiling has started." and diag[-1] == "Profiling has stopped."
    assert any(d.startswith("Process was launched by the profiler") for d in diag)
    assert rows(path, "SELECT timestamp FROM DIAGNOSTIC_EVENT") == \
        rows(path, "SELECT timestamp FROM DIAGNOSTIC_EVENT ORDER BY timestamp")


def test_empty_capture(files: dict[str, Path]) -> None:
    path, truth = files["empty_capture"], SCENARIOS["empty_capture"].truth
    with connect(path) as con:
        t = tables(con)
    assert not [x for x in t if x.startswith(("CUPTI_", "NVTX_", "TARGET_INFO_CUDA_")) or x == "PROCESSES"]
    assert truth["stderr_contains"] in _streams(path)["stderr"]
    assert one(path, "SELECT count(*) FROM ThreadNames") >= 1


def test_nvtx_only(files: dict[str, Path]) -> None:
    path, truth = files["nvtx_only"], SCENARIOS["nvtx_only"].truth
    assert not [x for x in tables(connect(path)) if x.startswith(("CUPTI_", "TARGET_INFO_CUDA_"))]
    assert ("CAPTURE_EVENT_TYPE", "Cuda") not in rows(path, "SELECT name, value FROM META_DATA_CAPTURE")
    dom = rows(path, "SELECT start, end, text, domainId FROM NVTX_EVENTS WHERE eventType = 75")
    assert len(dom) == truth["nvtx_domain_creates"] and dom[0][2] == truth["nvtx_domain"] and dom[0][0] < 0
    ranges = nvtx_ranges(path)
    assert len(ranges) == truth["nvtx_ranges"]
    steps = [r for r in ranges if r[2] == truth["nvtx_step_label"]]
    layers = [r for r in ranges if r[4] == dom[0][3]]
    assert len(steps) == truth["iterations"] and len(layers) == truth["nvtx_layer_ranges"]
    assert all(r[4] == 0 for r in steps) and len(steps) + len(layers) == len(ranges)
    assert one(path, "SELECT count(*) FROM NVTX_EVENTS WHERE text IS NOT NULL AND eventType = 59") == 0
    per_step = Counter(next(i for i, (s, e, *_) in enumerate(steps) if s <= ls and le <= e) for ls, le, *_ in layers)
    assert set(per_step.values()) == {truth["layers_per_iteration"]}
    assert all(lab.startswith("/") for _, _, lab, _, _ in layers)


def test_cuda_api_only(files: dict[str, Path]) -> None:
    path, truth = files["cuda_api_only"], SCENARIOS["cuda_api_only"].truth
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in tables(connect(path))
    assert len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert len(runtime_by_name(path, "cudaMemcpyAsync%")) == truth["memcpy_api_calls"]
    assert len(runtime_by_name(path, "cudaMalloc%")) == truth["malloc_calls"]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    cp = rows(path, "SELECT copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert sum(k == 1 for k, _ in cp) == truth["htod_count"] and sum(b for _, b in cp) == truth["memcpy_bytes"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") == truth["sync_rows"]
    # launches after the last flushed activity record have nothing on the GPU side
    last = one(path, "SELECT max(end) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    assert all(s > last for s, *_ in runtime_by_name(path, "cudaLaunchKernel%"))


def test_tiny_capture(files: dict[str, Path]) -> None:
    path, truth = files["tiny_capture"], SCENARIOS["tiny_capture"].truth
    assert truth["capture_ns_min"] <= one(path, "SELECT duration FROM ANALYSIS_DETAILS") < 100_000_000
    lk = launch_of_kernels(path)
    assert len(lk) == truth["kernel_count"] == len(runtime_by_name(path, "cudaLaunchKernel%")) == truth["launch_calls"]
    assert all(ks > api for ks, _, api, _, _ in lk)
    names = [n for (n,) in rows(path, """SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                                        ON s.id = k.shortName ORDER BY k.start""")]
    assert tuple(names) == truth["kernel_names"]
    assert in_range(sum(e - s for s, e, *_ in lk), truth["kernel_time_ns"])
    cp = rows(path, "SELECT copyKind, srcKind, dstKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    assert cp == [(2, 2, 1, truth["memcpy_bytes"])]
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == truth["stream_syncs"]
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") == truth["sync_rows"]
    m = meta(path, "META_DATA_CAPTURE")
    assert m["PROCESS_0:ARGUMENT_1"] == truth["command"]
    assert _streams(path)["stdout"] == "16.0\n"


# ------------------------------------------------------------------------------------------------------------
# determinism, scale, command line, large exports, committed examples
# ------------------------------------------------------------------------------------------------------------
def _dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with connect(path) as con:
        return {t: con.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables(con)}


def test_determinism(tmp_path: Path, files: dict[str, Path]) -> None:
    for name in ("graph_decode_graph", "pageable_copies", "empty_capture", "tiny_capture"):  # byte-identical
        again = tmp_path / f"{name}.sqlite"
        generate(name, again, seed=0)
        assert again.read_bytes() == files[name].read_bytes()
    other = tmp_path / "seed1" / "graph_decode_graph.sqlite"  # same file name: it is recorded in the metadata
    generate("graph_decode_graph", other, seed=1)
    a, b = _dump(files["graph_decode_graph"]), _dump(other)
    assert a.keys() == b.keys() and a["CUPTI_ACTIVITY_KIND_KERNEL"] != b["CUPTI_ACTIVITY_KIND_KERNEL"]
    assert len(a["CUPTI_ACTIVITY_KIND_KERNEL"]) == len(b["CUPTI_ACTIVITY_KIND_KERNEL"])
    generate("graph_decode_graph", other, seed=0)  # overwrites the existing file
    assert _dump(other) == a


def test_other_seed_and_scale_keep_truth(tmp_path: Path) -> None:
    p = tmp_path / "old_schema_2022.sqlite"
    sc = generate("old_schema_2022", p, seed=7)
    check_eager(p, dict(sc.truth))
    p2 = tmp_path / "sync_storm.sqlite"
    sc2 = generate("sync_storm", p2, seed=3, scale=2)
    assert sc2.truth["kernel_count"] == 2 * SCENARIOS["sync_storm"].truth["kernel_count"]
    assert one(p2, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == sc2.truth["kernel_count"]
    assert one(p2, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") == sc2.truth["sync_rows"]


@pytest.mark.parametrize("name", ["model_load_decode", "model_load_no_nvtx", "model_load_pcie_loop",
                                  "model_load_only"])
def test_model_load_truth(files: dict[str, Path], name: str) -> None:
    """The model load the start-up scenarios open with: 16 synchronous 256 MiB pageable HtoD copies at ~4.3 GB/s,
    each after a cudaMalloc, before any kernel or graph replay, taking the stated share of the capture."""
    path, truth = files[name], SCENARIOS[name].truth
    with connect(path) as con:
        present = set(tables(con))
    compute = [t for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE") if t in present]
    first_compute = min(one(path, f"SELECT min(start) FROM {t}") for t in compute)
    load = rows(path, "SELECT start, end, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 0 "
                      "ORDER BY start LIMIT ?", (truth["load_copies"],))
    assert sum(b for *_, b in load) == truth["load_bytes"] and max(e for _, e, _ in load) < first_compute
    assert all(in_range(b / (e - s) * 1e9, truth["load_bandwidth_Bps"]) for s, e, b in load)
    assert len(runtime_by_name(path, "cudaMalloc%")) == truth["load_copies"]
    span = one(path, "SELECT duration FROM ANALYSIS_DETAILS")
    assert in_range(max(e for _, e, _ in load) / span, truth["startup_fraction"])
    if name == "model_load_no_nvtx":
        assert "NVTX_EVENTS" not in present
    else:
        init = [r for r in nvtx_ranges(path) if r[2] == "init_model"]
        assert len(init) == 1 and all(init[0][0] <= s and e <= init[0][1] for s, e, _ in load)
    if "warmup_kernel_count" in truth:
        warm = [r for r in nvtx_ranges(path) if r[2] == "warmup"][0]
        assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= ? AND start < ?",
                   (warm[0], warm[1])) == truth["warmup_kernel_count"]
        assert len(runtime_by_name(path, "cudaStreamBeginCapture%") + runtime_by_name(path, "cudaGraphInstantiate%")) \
            == truth["graph_captures"]
    if "graph_launches" in truth:
        assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE") == truth["graph_launches"]
    if "kernel_count" in truth:
        assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == truth["kernel_count"]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["--list"]) == 0
    listed = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    # the single-export scenarios, then the multi-rank runs (fixtures/runs.py, tests/test_multirank.py)
    assert [x[0] for x in listed] == NAMES + list(RUN_SCENARIOS) and all(len(x) == 3 for x in listed)
    out = tmp_path / "one.sqlite"
    assert main(["sync_storm", "-o", str(out), "--seed", "3"]) == 0
    assert one(out, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == SCENARIOS["sync_storm"].truth["kernel_count"]
    out2 = tmp_path / "two.sqlite"
    assert main(["healthy_prefill", "-o", str(out2), "--scale", "2"]) == 0
    assert one(out2, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 2 * SCENARIOS["healthy_prefill"].truth[
        "kernel_count"]
    big = tmp_path / "big.sqlite"
    assert main(["large", "--kernels", "1000", "-o", str(big)]) == 0
    assert one(big, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 1000
    with pytest.raises(SystemExit):
        main(["not_a_scenario", "-o", str(out)])
    with pytest.raises(SystemExit):
        main(["eager_decode"])  # no -o
    # --all writes DIR/<name>.sqlite for every scenario (the generation itself is covered by the fixture above)
    calls: list[tuple[str, Path, int, int]] = []

    def fake_generate(name: str, path: Path, *, seed: int = 0, scale: int = 1) -> Scenario:
        calls.append((name, Path(path), seed, scale))
        Path(path).write_bytes(b"")
        return SCENARIOS[name]

    def fake_generate_run(name: str, directory: Path, *, seed: int = 0, scale: int = 1) -> RunScenario:
        calls.append((name, Path(directory), seed, scale))
        Path(directory).mkdir(parents=True)
        return RUN_SCENARIOS[name]

    monkeypatch.setattr(gen, "generate", fake_generate)
    monkeypatch.setattr(runs, "generate_run", fake_generate_run)
    alld = tmp_path / "all"
    assert main(["--all", str(alld), "--seed", "5"]) == 0
    assert [c[0] for c in calls] == NAMES + list(RUN_SCENARIOS)  # multi-rank runs as DIR/<name>/rank<N>.sqlite
    assert all(p == alld / (f"{n}.sqlite" if n in SCENARIOS else n) and seed == 5 and scale == 1
               for n, p, seed, scale in calls)
    assert sorted(p.stem for p in alld.glob("*.sqlite")) == sorted(NAMES)


def test_module_entry_point(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "nsys_diagnose.fixtures.generator", "--list"], capture_output=True,
                       text=True, check=True)
    assert r.stdout.split("\t", 1)[0] == NAMES[0]


def test_generate_large(tmp_path: Path) -> None:
    n = 20_000
    path = tmp_path / "large.sqlite"
    info = generate_large(path, kernels=n, seed=0)
    assert info["kernel_count"] == n
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == n
    assert len(runtime_by_name(path, "cudaLaunchKernel_v7000")) == n
    assert one(path, """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                        ON r.correlationId = k.correlationId AND r.globalTid >> 24 = k.globalPid >> 24
                        WHERE r.start < k.start""") == n
    steps = info["steps"]
    assert steps == -(-n // info["kernels_per_step"]) and 150 <= info["kernels_per_step"] <= 250
    assert len(nvtx_ranges(path)) == steps
    assert len(runtime_by_name(path, "cudaStreamSynchronize%")) == steps
    assert one(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") == steps
    busy, _, _ = union_stats(kernel_intervals(path))
    assert 0.25 < busy < 0.6
    with connect(path) as con:
        # no index but the ones a PRIMARY KEY of the real table implies (SAMPLING_CALLCHAINS (id, stackDepth))
        assert not con.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                               "AND name NOT LIKE 'sqlite_autoindex_%'").fetchall()
        assert {"StringIds", "TARGET_INFO_GPU", "META_DATA_EXPORT", "PROCESSES"} <= set(tables(con))


@pytest.mark.parametrize("name", ["eager_decode", "graph_decode_node", "healthy_prefill"])
def test_committed_examples_are_current(files: dict[str, Path], name: str) -> None:
    example = EXAMPLES / f"{name}.sqlite"
    assert example.is_file(), f"missing {example}; regenerate with nsys-diagnose-fixture {name} -o {example}"
    assert example.stat().st_size < 1_100_000
    assert _dump(example) == _dump(files[name])
