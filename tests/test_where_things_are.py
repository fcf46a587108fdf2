"""Reports that say where things are: the NVTX ranges and OS-runtime calls that take the time, the single worst
events with the moment they started (to find them on the Nsight Systems timeline), and the launch configuration
of the top kernels. One small synthetic export whose every event is placed by hand, plus cached scenarios."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.fixtures import _kernels as K
from nsys_diagnose.fixtures import generator as gen
from nsys_diagnose.fixtures._export import ERA_2024, H100_SXM, Proc
from nsys_diagnose.reading.export import open_export
from nsys_diagnose.reports.render import render

from conftest import analysis, real, requires_real, scenario_analysis, sqlite_ro

US = 1_000
MS = 1_000_000
T0 = 2_000 * MS  # 2 s into the profiling session
PID, WORKER = 48213, 48299
HTOD, PAGEABLE, DEVICE = 1, 0, 2
SMALL = dataclasses.replace(K.MUL, grid=(4, 2, 1), block=(128, 1, 1))    # 8 CTAs of 128 threads
LARGE = dataclasses.replace(K.MUL, grid=(64, 1, 1), block=(16, 16, 1))   # 64 CTAs of 256 threads
POLL = 6 * MS
MARKS: dict[str, int] = {}  # moments _build placed, for the assertions


def _build(x, p: Proc) -> None:
    """On the main thread: three short launches in the small configuration and two long ones in the large (the
    large one has fewer executions but more time), a 6 ms host pause (an OS-runtime poll) before the fourth
    kernel, a 2 ms pageable copy, a 5 ms cudaStreamSynchronize and a 1.5 ms cudaMalloc. NVTX 'step' ranges on
    the main thread; 'load' ranges in domain 'io' and OS-runtime reads on a worker thread that launches nothing."""
    x.nvtx(p, -5 * MS, None, text="io", event_type=gen.NVTX_DOMAIN_CREATE, domain=1)
    t = T0
    x.runtime(p, "cudaMalloc_v3020", t, t + 1500 * US)
    t += 1600 * US
    for i, (spec, dur) in enumerate([(SMALL, 10 * US), (SMALL, 10 * US), (SMALL, 10 * US),
                                     (LARGE, 40 * US), (LARGE, 40 * US)]):
        if i == 3:  # the GPU idles while the host polls
            gen._osrt(x, p, "poll", t, t + POLL, ret=1)
            t += POLL
            MARKS["gap_end"] = t + 10 * US
        corr = x.runtime(p, "cudaLaunchKernel_v7000", t, t + 5 * US)
        x.kernel(p, spec, t + 10 * US, t + 10 * US + dur, corr)
        if i == 2:  # the GPU goes idle when the third kernel ends
            MARKS["gap_start"] = t + 10 * US + dur
        x.nvtx(p, t, t + 20 * US + dur, text="step")
        t += 30 * US + dur
    corr = x.runtime(p, "cudaMemcpyAsync_v3020", t, t + 5 * US)
    x.memcpy(p, t + 10 * US, t + 2010 * US, corr, 4 << 20, HTOD, PAGEABLE, DEVICE)
    x.runtime(p, "cudaStreamSynchronize_v3020", t + 10 * US, t + 5010 * US)
    t += 5100 * US
    corr = x.runtime(p, "cudaLaunchKernel_v7000", t, t + 5 * US)
    x.kernel(p, SMALL, t + 10 * US, t + 20 * US, corr)
    for k in range(3):  # the worker loads files; its time is not the launching thread's
        x.nvtx(p, T0 + k * 2 * MS, T0 + k * 2 * MS + MS, text="load", domain=1, tid=WORKER)
        gen._osrt(x, p, "read", T0 + k * 2 * MS, T0 + k * 2 * MS + 500 * US, tid=WORKER)


@pytest.fixture(scope="module")
def placed(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("where") / "placed.sqlite"
    x = gen._new_export(ERA_2024, H100_SXM, 1, nvtx=True, command=("python3", ["serve.py"]))
    p = Proc(PID, "python3", threads={PID: "python3", WORKER: "loader"})
    x.procs.append(p)
    _build(x, p)
    gen._finish(x, path)
    return path


def _rows(placed: Path, fact: str) -> list[dict]:
    facts, _ = analysis(placed)
    return facts.rows(fact)


def facts_path(scenario: str) -> Path:
    """The export of a cached scenario analysis."""
    _, report = scenario_analysis(scenario)
    return Path(report.profile.path)


# -- kernel_summary: the dominant launch configuration ------------------------------------------------------------

def test_the_dominant_configuration_is_the_one_with_the_most_time_not_the_most_launches(placed):
    (mul,) = _rows(placed, "kernel_summary")
    assert (mul["grid_size"], mul["block_size"], mul["config_count"]) == (64, 256, 2)
    assert mul["config_share"] == pytest.approx(80 / 120)  # 2 x 40 µs of 4 x 10 + 2 x 40 µs


def test_the_configuration_agrees_with_the_raw_kernel_table_of_a_scenario():
    facts, _ = scenario_analysis("eager_decode")
    path = facts_path("eager_decode")
    with sqlite_ro(path) as con:
        raw = {name: (grid, block) for name, grid, block in con.execute(
            "SELECT s.value, k.gridX * k.gridY * k.gridZ, k.blockX * k.blockY * k.blockZ "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName GROUP BY 1, 2, 3")}
    rows = facts.rows("kernel_summary")
    assert rows and all((k["grid_size"], k["block_size"]) == raw[k["name"]] for k in rows)
    assert all(k["config_count"] == 1 and k["config_share"] == 1 for k in rows)


# -- worst_offenders ----------------------------------------------------------------------------------------------

def test_the_worst_events_carry_when_they_started_and_why(placed):
    rows = _rows(placed, "worst_offenders")
    gap = next(r for r in rows if r["kind"] == "idle_gap" and r["rank"] == 1)
    # the poll before the fourth kernel: the GPU went idle when the third kernel ended
    assert (gap["start_ns"], gap["dur_ns"]) == (MARKS["gap_start"], MARKS["gap_end"] - MARKS["gap_start"])
    assert (gap["cause"], gap["name"], gap["device_id"], gap["tid"]) == ("host", "kernel", 0, PID)
    copy = next(r for r in rows if r["kind"] == "copy")
    assert (copy["name"], copy["bytes"], copy["dur_ns"], copy["tid"]) == ("HtoD pageable→device", 4 << 20, 2 * MS, PID)
    sync = next(r for r in rows if r["kind"] == "sync")
    assert (sync["name"], sync["dur_ns"]) == ("cudaStreamSynchronize", 5 * MS)
    calls = [r["name"] for r in rows if r["kind"] == "api_call"]
    assert calls[0] == "cudaMalloc" and "cudaStreamSynchronize" not in calls  # a sync is listed once, as a sync
    for r in rows:
        assert r["start_s"] == pytest.approx(r["start_ns"] / 1e9)
    by_kind = {}
    for r in rows:
        by_kind.setdefault((r["kind"], r["device_id"] if r["kind"] == "idle_gap" else None), []).append(r)
    for group in by_kind.values():
        assert [r["rank"] for r in group] == list(range(1, len(group) + 1)) and len(group) <= 5
        assert [r["dur_ns"] for r in group] == sorted((r["dur_ns"] for r in group), reverse=True)


def test_the_number_per_kind_is_a_fact_param(placed):
    wanted = load_facts()
    closure: dict = {}

    def need(name: str) -> None:
        if name not in closure:
            closure[name] = wanted[name]
            for dep in wanted[name].needs:
                need(dep)

    need("worst_offenders")
    with open_export(placed, cache=False) as export:
        rows = compute_facts(export, facts=closure, params={"worst_per_kind": 1}).rows("worst_offenders")
    assert sorted(r["kind"] for r in rows) == ["api_call", "copy", "idle_gap", "sync"]


# -- nvtx_summary -------------------------------------------------------------------------------------------------

def test_nvtx_ranges_are_summed_per_domain_label_and_thread(placed):
    rows = {(r["domain"], r["name"], r["tid"]): r for r in _rows(placed, "nvtx_summary")}
    assert set(rows) == {(None, "step", PID), ("io", "load", WORKER)}
    load = rows[("io", "load", WORKER)]
    assert (load["count"], load["total_ns"], load["max_ns"]) == (3, 3 * MS, MS)
    step = rows[(None, "step", PID)]
    assert (step["count"], step["min_ns"], step["max_ns"]) == (5, 30 * US, 60 * US)
    assert 0 < step["share_of_capture"] < load["share_of_capture"] < 1


def test_an_nvtx_only_capture_reports_its_ranges_besides_the_capture_error():
    facts, report = scenario_analysis("nvtx_only")
    path = facts_path("nvtx_only")
    with sqlite_ro(path) as con:
        raw_count, raw_ns = con.execute(
            "SELECT count(*), sum(e.\"end\" - e.start) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
            "WHERE s.value = 'poolformer_forward'").fetchone()
    top = facts.rows("nvtx_summary")[0]
    assert (top["name"], top["domain"], top["count"], top["total_ns"]) == ("poolformer_forward", None, raw_count,
                                                                        raw_ns)
    assert report.verdict.primary == "capture"
    assert json.loads(render(report, "json"))["facts"]["nvtx_summary"][0]["name"] == "poolformer_forward"
    for fmt in ("md", "html"):
        text = render(report, fmt)
        assert "NVTX ranges" in text and "poolformer" in text and "NVTX ranges but no CUDA activity" in text, fmt


# -- osrt_summary -------------------------------------------------------------------------------------------------

def test_os_runtime_calls_are_listed_for_the_launching_thread_only(placed):
    rows = _rows(placed, "osrt_summary")
    assert [(r["tid"], r["name"], r["count"], r["total_ns"]) for r in rows] == [(PID, "poll", 1, POLL)]
    assert 0 < rows[0]["share_of_thread"] < 1


def test_without_os_runtime_tracing_the_summary_is_skipped_with_the_reason():
    facts, report = scenario_analysis("eager_decode")
    assert facts["osrt_summary"].rows == [] and "--trace=osrt" in facts["osrt_summary"].skipped
    assert "OS-runtime calls of the threads" not in render(report, "md")


# -- the reports --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["md", "html"])
def test_reports_show_where_the_worst_events_are(placed, fmt):
    _, report = analysis(placed)
    text = render(report, fmt)
    assert "Worst offenders" in text and "OS-runtime calls of the threads that launch GPU work" in text
    assert f"at {MARKS['gap_start'] / 1e9:.6f} s" in text
    assert re.search(r"64 × 256 \(66\.7 % of its time\)", text), "grid × block of the top kernel"


@requires_real
def test_a_real_nvtx_only_capture_lists_its_ranges():
    facts, report = analysis(real("tensorrt-nvtx-only"))
    rows = facts.rows("nvtx_summary")
    assert rows and all(r["count"] > 0 for r in rows)
    assert "NVTX ranges" in render(report, "md")


@requires_real
def test_the_dominant_configuration_agrees_with_the_raw_kernel_table_of_a_real_export():
    # a two-GPU PyTorch run whose kernels launch with several grids (31 names with more than one)
    path = real("h100_2gpu_1s")
    facts, _ = analysis(path)
    with sqlite_ro(path) as con:
        per_config = con.execute(
            "SELECT s.value, k.gridX * k.gridY * k.gridZ, k.blockX * k.blockY * k.blockZ, sum(k.\"end\" - k.start) "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName GROUP BY 1, 2, 3").fetchall()
    configs: dict[str, list[tuple[int, int, int]]] = {}
    for name, grid, block, ns in per_config:
        configs.setdefault(name, []).append((ns, grid, block))
    rows = facts.rows("kernel_summary")
    assert sum(k["config_count"] > 1 for k in rows) > 10
    for k in rows:
        ns, grid, block = max(configs[k["name"]], key=lambda c: (c[0], -c[1], -c[2]))
        assert (k["grid_size"], k["block_size"], k["config_count"]) == (grid, block, len(configs[k["name"]])), k["name"]
        assert k["config_share"] == pytest.approx(ns / k["total_ns"])
