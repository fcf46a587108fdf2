"""kernel_occupancy: CTAs per launch against the SM count, and the small-grid aggregates, on fixture scenarios."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.fixtures.generator import LLAMA_LAYERS, SG_STEPS, generate
from nsys_diagnose.reading.export import open_export

from conftest import REAL_DIR, analysis, requires_real, scenario_analysis


def _rows(name: str) -> list[dict]:
    facts, _ = scenario_analysis(name)
    return facts.results["kernel_occupancy"].rows


def test_small_grid_decode_by_hand() -> None:
    rows = _rows("small_grid_decode")
    # four kernel names, all launching 8 CTAs on the H100's 132 SMs
    assert [r["short_name"] for r in rows] == ["gemv2T_kernel_val", "flash_fwd_splitkv_kernel",
                                               "fused_add_rms_norm_kernel", "act_and_mul_kernel"]
    assert [r["kernel_rank"] for r in rows] == [1, 2, 3, 4]
    launches = {r["short_name"]: r["launches"] for r in rows}
    # per layer 4 GEMVs, 1 attention, 2 norms, 1 activation; plus one lm_head GEMV per step
    assert launches == {"gemv2T_kernel_val": (4 * LLAMA_LAYERS + 1) * SG_STEPS,
                        "flash_fwd_splitkv_kernel": LLAMA_LAYERS * SG_STEPS,
                        "fused_add_rms_norm_kernel": 2 * LLAMA_LAYERS * SG_STEPS,
                        "act_and_mul_kernel": LLAMA_LAYERS * SG_STEPS}
    for r in rows:
        assert r["sm_count"] == 132 and r["ctas_per_launch"] == 8
        assert r["ctas_per_sm"] == pytest.approx(8 / 132)  # 0.0606
        assert r["sm_share"] == pytest.approx(8 / 132)
        assert r["is_small_grid"] is True and r["is_communication"] is False
        assert r["small_grid_time_share"] == pytest.approx(1.0)
        assert r["small_grid_sm_share"] == pytest.approx(8 / 132)
        assert r["small_grid_kernel_count"] == 4
        assert r["device_kernel_count"] == sum(launches.values())
    top = rows[0]
    assert sum(r["total_ns"] for r in rows) == top["device_kernel_ns"] == top["small_grid_ns"]
    assert sum(r["kernel_time_share"] for r in rows) == pytest.approx(1.0)
    # the unused SM time: kernel time x (1 - 8/132), over the device window
    assert top["small_grid_unused_fraction"] == pytest.approx(
        top["device_kernel_ns"] * (1 - 8 / 132) / top["window_ns"])
    assert 0.8 < top["small_grid_unused_fraction"] < 0.9
    listed = top["small_grid_kernels"]
    assert [k["name"] for k in listed] == ["gemv2T_kernel_val", "flash_fwd_splitkv_kernel",
                                           "fused_add_rms_norm_kernel"]  # top 3 by time
    assert all(k["ctas"] == 8 and k["sm_share"] == pytest.approx(8 / 132) for k in listed)
    assert listed[0]["time_share"] == pytest.approx(rows[0]["kernel_time_share"])


def test_large_grids_are_not_small() -> None:
    rows = _rows("tiny_kernels_queued")  # OpenACC kernels of 1024 CTAs
    assert rows and all(r["ctas_per_launch"] == 1024 for r in rows)
    for r in rows:
        assert r["ctas_per_sm"] == pytest.approx(1024 / 132)
        assert r["sm_share"] == 1.0 and r["is_small_grid"] is False
        assert r["small_grid_time_share"] == 0 and r["small_grid_unused_fraction"] == 0
        assert r["small_grid_sm_share"] is None and r["small_grid_kernels"] == []


@pytest.mark.slow
def test_small_grids_rule_fires_only_on_the_small_grid_scenario() -> None:
    _, report = scenario_analysis("small_grid_decode")
    assert report.verdict.primary == "occupancy"
    fired = [f for f in report.findings if f.rule == "small-grids"]
    assert len(fired) == 1 and fired[0].subject == "GPU 0" and 0.8 < fired[0].impact < 0.9
    for name in ("eager_decode", "graph_decode_node", "healthy_prefill"):
        _, report = scenario_analysis(name)
        assert not [f for f in report.findings if f.rule == "small-grids"], name


@pytest.mark.slow
def test_unknown_sm_count_skips_small_grids_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "no_sm.sqlite"
    generate("small_grid_decode", path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE TARGET_INFO_GPU SET smCount = NULL")
    with open_export(path) as export:
        facts = compute_facts(export, facts=load_facts())
    result = facts.results["kernel_occupancy"]
    assert result.rows == []
    assert result.skipped == "the export records no devices.sm_count (Streaming multiprocessors)"
    _, report = analysis(path)
    assert [s.reason for s in report.skipped if s.rule == "small-grids"] == [result.skipped]
    assert report.verdict.rule != "small-grids"


@requires_real
def test_a_real_export_without_sm_count_says_why_small_grids_was_not_judged() -> None:
    path = next(REAL_DIR.glob("GindaChen__nsys-ai__h100_2gpu_1s*.sqlite"))
    _, report = analysis(path)
    reasons = [s.reason for s in report.skipped if s.rule == "small-grids"]
    assert reasons == ["the export records no devices.sm_count (Streaming multiprocessors)"]
