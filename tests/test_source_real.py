"""Every real export opens, and the canonical views agree with direct counts of the nsys tables."""

from __future__ import annotations

import hashlib

import pytest

from nsys_diagnose.reading.canonical import VIEWS
from nsys_diagnose.reading.export import open_export

from conftest import REAL_EXPORTS, raw_count, real, requires_real, sqlite_ro, table_exists

pytestmark = requires_real


@pytest.fixture(scope="module", params=REAL_EXPORTS, ids=lambda p: p.name.split("__")[0])
def opened(request):
    with open_export(request.param) as export:
        yield request.param, export


def test_every_view_exists_with_the_canonical_columns(opened):
    _, export = opened
    for name, view in VIEWS.items():
        cols = [r[0] for r in export.query(f"SELECT column_name FROM duckdb_columns() WHERE table_name = '{name}' "
                                           f"AND database_name = current_database() ORDER BY column_index")]
        assert cols == view.column_names, name
        status = export.views[name]
        assert (status.rows == 0) == (status.reason is not None), (name, status)


@pytest.mark.parametrize("view, table, where", [
    ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL", ""),
    ("api_calls", "CUPTI_ACTIVITY_KIND_RUNTIME", ""),
    ("memcpys", "CUPTI_ACTIVITY_KIND_MEMCPY", ""),
    ("memsets", "CUPTI_ACTIVITY_KIND_MEMSET", ""),
    ("syncs", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", ""),
    ("nvtx_ranges", "NVTX_EVENTS", 'WHERE eventType IN (59, 60) AND "end" IS NOT NULL AND "end" >= start'),
])
def test_view_row_counts_match_the_export(opened, view, table, where):
    path, export = opened
    assert export.count(view) == raw_count(path, table, where)


def test_sums_of_durations_match_the_export(opened):
    path, export = opened
    with sqlite_ro(path) as con:
        for view, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpys", "CUPTI_ACTIVITY_KIND_MEMCPY")):
            if not table_exists(con, table):
                continue
            raw = con.execute(f'SELECT coalesce(sum("end" - start), 0) FROM "{table}"').fetchone()[0]
            ours = export.query(f"SELECT coalesce(sum(dur_ns), 0) FROM {view}")[0][0]
            assert ours == raw, view


def test_used_devices_are_the_devices_that_did_work(opened):
    path, export = opened
    with sqlite_ro(path) as con:
        used: set[int] = set()
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if table_exists(con, table):
                used |= {r[0] for r in con.execute(f'SELECT DISTINCT deviceId FROM "{table}"')}
    assert set(export.used_devices) == used


def test_opening_never_modifies_the_export(tmp_path):
    source = real("Rodinia")
    before = hashlib.sha256(source.read_bytes()).hexdigest()
    listing = sorted(p.name for p in source.parent.iterdir())
    with open_export(source) as export:
        assert export.count("kernels") == 8190
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in source.parent.iterdir()) == listing


# --- decoding, checked against facts stated in SOURCES.md --------------------------------------

def test_pid_and_tid_are_unpacked_from_global_ids():
    path = real("Rodinia")
    with sqlite_ro(path) as con:
        gtid, = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1").fetchone()
        names = {r[0] for r in con.execute("SELECT name FROM PROCESSES")}
    with open_export(path) as export:
        pids = {r[0] for r in export.query("SELECT DISTINCT pid FROM kernels")}
        assert pids == {(gtid >> 24) & 0xFFFFFF}
        assert all(p < 1 << 24 for p in pids)  # the hardware-id bits are masked off
        tids = {r[0] for r in export.query("SELECT DISTINCT tid FROM api_calls")}
        assert (gtid & 0xFFFFFF) in tids
        proc = export.query("SELECT name FROM processes WHERE pid = ?", [next(iter(pids))])
        assert proc and proc[0][0] in names


def test_api_names_lose_their_version_suffix_and_get_a_class():
    with open_export(real("Rodinia")) as export:
        counts = dict(export.query("SELECT name, count(*) FROM api_calls GROUP BY name"))
        assert counts["cudaLaunchKernel"] == 8190
        assert counts["cudaThreadSynchronize"] == 8190
        assert not any("_v" in n for n in counts)
        classes = dict(export.query("SELECT api_class, count(*) FROM api_calls GROUP BY 1"))
        assert classes == {"runtime": 16392, "driver": 1}
    with open_export(real("PolPuigPuy")) as export:  # legacy driver-API OpenACC capture
        counts = dict(export.query("SELECT name, count(*) FROM api_calls GROUP BY name"))
        assert counts["cuLaunchKernel"] == 1934
        assert counts["cuMemcpyHtoDAsync"] == 1949
        assert export.query("SELECT DISTINCT api_class FROM api_calls") == [("driver",)]


def test_nvtx_text_comes_from_inline_text_or_string_ids():
    path = real("YoonKyonghwan")  # TensorRT: push/pop via textId, start/end inline, 2 domains
    with open_export(path) as export:
        assert export.count("kernels") == 0 and export.views["kernels"].reason
        kinds = dict(export.query("SELECT range_kind, count(*) FROM nvtx_ranges GROUP BY 1"))
        assert kinds == {"push_pop": 19552, "start_end": 2444}
        assert export.query("SELECT count(*) FROM nvtx_ranges WHERE text IS NULL")[0][0] == 0
        domains = {r[0] for r in export.query("SELECT DISTINCT domain FROM nvtx_ranges")}
        assert {"TensorRT", "myelin-exec"} <= domains
    with open_export(real("memfusion")) as export:  # registered strings only
        assert export.count("nvtx_ranges") == 59
        assert export.query("SELECT count(*) FROM nvtx_ranges WHERE text IS NULL OR text = ''")[0][0] == 0


def test_graph_trace_mode_is_read_from_capture_options():
    with open_export(real("NVIDIA__Fuser__report1__2025")) as export:
        assert export.info.graph_trace_setting == "graph"
        assert export.info.nsys_version == "2025.1.1.110"
        assert export.info.metadata_table == "META_DATA_EXPORT"
    with open_export(real("Rodinia")) as export:  # 2022.4 records no such option
        assert export.info.graph_trace_setting is None
        assert export.info.metadata_table == "EXPORT_META_DATA"
        assert export.info.nsys_version == "2022.4.2.1"


def test_only_devices_that_did_work_count_as_used():
    with open_export(real("NVIDIA__Fuser__report1__2024")) as export:  # 8 H100 listed, 1 used
        assert export.count("devices") == 8
        assert export.used_devices == [0]
        name, sm, bw = export.query("SELECT name, sm_count, memory_bandwidth_bytes_per_s FROM devices "
                                    "WHERE device_id = 0")[0]
        assert name == "NVIDIA H100 80GB HBM3" and sm == 132 and bw > 1e12
    with open_export(real("florianmattana")) as export:  # Windows: iGPU and render driver listed
        assert export.used_devices == [0]
        assert "RTX 5070" in export.query("SELECT name FROM devices WHERE used")[0][0]
    with open_export(real("mfu_2gpu")) as export:  # derived slice: no TARGET_INFO_GPU at all
        assert export.used_devices == [0, 1]
    with open_export(real("PolPuigPuy")) as export:  # legacy GPU tables in kB/s and kHz
        sm, bw, clk = export.query("SELECT sm_count, memory_bandwidth_bytes_per_s, clock_rate_hz FROM devices")[0]
        assert sm == 68 and bw == 760_080_000_000 and clk == 1_740_000_000


def test_memcpy_kinds_are_decoded_to_words():
    with open_export(real("RajaATAli")) as export:
        rows = dict((f"{k}/{s}", n) for k, s, n in export.query(
            "SELECT copy_kind, CASE WHEN copy_kind = 'HtoD' THEN src_mem ELSE dst_mem END, count(*) "
            "FROM memcpys GROUP BY ALL"))
        assert rows == {"HtoD/pageable": 100, "DtoH/pageable": 100}
    with open_export(real("Perlmutter")) as export:
        rows = dict(export.query("SELECT copy_kind, count(*) FROM memcpys WHERE is_uvm GROUP BY 1"))
        assert rows == {"UVM HtoD": 2048, "UVM DtoH": 12288}


def test_sync_rows_carry_the_blocking_api_name():
    with open_export(real("Rodinia")) as export:
        rows = export.query("SELECT api_name, count(*) FROM syncs GROUP BY 1")
        assert rows == [("cudaThreadSynchronize", 8190)]


def test_empty_and_kernel_less_exports_say_why_views_are_empty():
    with open_export(real("amir-ghz")) as export:
        assert export.info.nsys_version is None
        for view in ("kernels", "api_calls", "memcpys", "nvtx_ranges"):
            assert export.count(view) == 0
            assert "no " in export.views[view].reason
    with open_export(real("unschlagbar")) as export:
        assert export.count("kernels") == 0 and export.count("api_calls") == 2789
        assert "CUPTI_ACTIVITY_KIND_KERNEL" in export.views["kernels"].reason


def test_text_with_invalid_utf8_does_not_stop_the_reader():
    # TARGET_INFO_SYSTEM_ENV of these files holds non-UTF-8 bytes; StringIds may too in other captures.
    for fragment in ("MohanadOdema", "YoonKyonghwan", "amir-ghz", "Rodinia"):
        with open_export(real(fragment)) as export:
            assert export.count("devices") >= 1


@requires_real
@pytest.mark.parametrize("path", REAL_EXPORTS, ids=lambda p: p.name[:40])
def test_correlation_ids_are_unique_per_process(path):
    """Facts join GPU work to its API call on (pid, correlation_id) without deduplicating (_issuing_calls):
    that relies on CUPTI numbering every call of a process with its own id, which every real export obeys."""
    with open_export(path) as export:
        rows, distinct = export.query(
            "SELECT count(*), count(DISTINCT (pid, correlation_id)) FROM api_calls "
            "WHERE correlation_id IS NOT NULL AND correlation_id <> 0")[0]
    assert rows == distinct
