"""GPU metrics: the name table, both export formats, the device mapping, and metrics per phase."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nsys_diagnose.facts.compute import metric_names
from nsys_diagnose.fixtures._nsys_schema import DOCUMENTED_DDL
from nsys_diagnose.fixtures.generator import generate

from conftest import analysis, scenario_analysis

JUDGED = {"sm_active", "sm_issue", "tensor_active", "dram_read", "dram_write", "dram_total", "pcie_rx", "pcie_tx",
          "nvlink_rx", "nvlink_tx", "gr_active", "warps_in_flight", "unallocated_warps"}


def test_the_name_table_maps_each_name_once_and_says_where_it_was_seen() -> None:
    rows = metric_names()
    keys = [r["name"].strip().lower() for r in rows]
    assert len(keys) == len(set(keys)), "a name listed twice"
    assert all(r["source"] and r["nsys"] and r["canonical"] for r in rows)
    by_name = {r["name"]: r for r in rows}
    # the drift the table exists for: one canonical metric, every era's name
    for names, canonical in ((("SM Active", "SM Active [Throughput %]", "SMs Active [Throughput %]"), "sm_active"),
                             (("DRAM Read Throughput", "DRAM Read Bandwidth [Throughput %]"), "dram_read"),
                             (("Tensor Active / FP16 Active", "Tensor Active [Throughput %]"), "tensor_active"),
                             (("PCIe RX Throughput", "PCIe RX Throughput [Throughput %]"), "pcie_rx")):
        assert {by_name[n]["canonical"] for n in names} == {canonical}
        assert all(by_name[n]["unit"] == "percent" for n in names)
    # averages, warps per cycle and clocks are known but never averaged with the shares of peak
    assert by_name["Compute Warps in Flight [Avg]"]["unit"] != "percent"
    assert {r["canonical"] for r in rows if r["unit"] == "percent"} >= JUDGED


def _summary(name: str) -> list[dict]:
    return scenario_analysis(name)[0].rows("gpu_metrics_summary")


@pytest.mark.slow
@pytest.mark.parametrize("name, chip", [("metrics_2022_tu10x", "TU102"), ("metrics_2022_ga100", "GA100"),
                                        ("metrics_2022_gh100", "GH100")])
def test_2022_exports_keep_their_metrics_in_generic_events_and_are_read(name: str, chip: str) -> None:
    facts, report = scenario_analysis(name)
    [row] = facts.rows("gpu_metrics_summary")
    assert row["chip"] == chip and row["unknown_metrics"] is None
    assert row["kernel_samples"] >= 10 and row["sm_active_pct"] is not None and row["tensor_active_pct"] is not None
    assert row["known_metrics"] >= 6
    assert "memory-bound" not in {o.rule for o in report.skipped}


def test_each_gpu_gets_its_own_metrics_and_the_saturated_one_is_named() -> None:
    facts, report = scenario_analysis("nvlink_saturated_tp2")
    rows = {r["device_id"]: r for r in facts.rows("gpu_metrics_summary")}
    assert set(rows) == {0, 1}
    assert rows[1]["nvlink_rx_pct"] > 60 > rows[0]["nvlink_rx_pct"]
    found = [f for f in report.findings if f.rule == "interconnect-saturated"]
    assert [f.subject for f in found] == ["GPU 1"] and not found[0].also_on


def test_a_gemm_heavy_fp32_prefill_with_idle_tensor_cores_gets_that_as_its_primary_cause() -> None:
    """The kernel names (fp32-gemms) and the GPU metrics (tensor-cores-idle) say the same: one finding, both proofs."""
    _, report = scenario_analysis("tensor_idle_fp32_prefill")
    assert (report.verdict.primary, report.verdict.rule) == ("compute-bound", "fp32-gemms")
    finding = next(f for f in report.findings if f.rule == "fp32-gemms")
    assert finding.agrees == ["tensor-cores-idle"]
    assert "TF32" in " ".join(finding.remediation) and "bf16" in " ".join(finding.remediation)


@pytest.mark.slow
def test_sparse_samples_tell_the_frequency_to_use() -> None:
    [row] = _summary("metrics_coarse_decode")
    assert row["sample_period_ns"] == pytest.approx(1_000_000, rel=0.01)
    finding = next(f for f in scenario_analysis("metrics_coarse_decode")[1].findings if f.rule == "metrics-too-coarse")
    assert row["suggested_frequency_hz"] == pytest.approx(2e9 / row["median_kernel_ns"], abs=1)
    # kernels of a few µs are shorter than even the fastest sampling (200 kHz): the advice is Nsight Compute
    assert row["suggested_frequency_hz"] > 200_000 and "Nsight Compute (ncu)" in finding.message
    # a slower eager loop is told the rate to use
    from nsys_diagnose.diagnosis.rules import load_rules
    from nsys_diagnose.diagnosis.evaluate import evaluate
    from nsys_diagnose.diagnosis.ruleset import RuleSet
    from nsys_diagnose.facts.loading import load_facts
    from nsys_diagnose.facts.compute import FactResult, FactSet
    facts = scenario_analysis("metrics_coarse_decode")[0]
    slower = dict(row, median_kernel_ns=40_000, period_per_kernel=25.0, suggested_frequency_hz=50_000)
    fact_set = FactSet({"gpu_metrics_summary": FactResult(facts["gpu_metrics_summary"].fact,
                                                          facts["gpu_metrics_summary"].columns, [slower])})
    rule = load_rules(load_facts())["metrics-too-coarse"]
    [told] = evaluate(RuleSet.resolve({rule.id: rule}), fact_set).findings
    assert "--gpu-metrics-frequency=50000 (two samples per median kernel)" in told.message


def _with_metrics(tmp_path: Path) -> Path:
    """prefill_heavy_eager_decode with GPU metrics sampled every 100 µs: tensor cores busy under the prefill's
    GEMMs, DRAM busy under the decode's small kernels."""
    path = tmp_path / "phased_metrics.sqlite"
    generate("prefill_heavy_eager_decode", path)
    con = sqlite3.connect(path)
    with con:
        for table in ("TARGET_INFO_GPU_METRICS", "GPU_METRICS"):
            con.execute(DOCUMENTED_DDL[table][0])
        names = ["SMs Active [Throughput %]", "SM Issue [Throughput %]", "Tensor Active [Throughput %]",
                 "DRAM Read Bandwidth [Throughput %]"]
        type_id = 0x1000100000000
        con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, 'GPU 0', ?, ?)",
                        [(type_id, type_id, i, n) for i, n in enumerate(names)])
        kernels = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start").fetchall()
        rows, k = [], 0
        for ts in range(kernels[0][0], kernels[-1][1], 100_000):
            while k < len(kernels) and kernels[k][1] < ts:
                k += 1
            if k == len(kernels) or kernels[k][0] > ts:
                continue
            long_kernel = kernels[k][1] - kernels[k][0] > 100_000  # the prefill's GEMMs and attention
            values = (95, 60, 70, 20) if long_kernel else (60, 15, 5, 65)
            rows += [(ts, type_id, i, v) for i, v in enumerate(values)]
        con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)", rows)
    con.close()
    return path


@pytest.mark.slow
def test_metrics_are_reported_per_phase(tmp_path: Path) -> None:
    facts, report = analysis(_with_metrics(tmp_path))
    prefill = facts.phases["prefill"].first("gpu_metrics_summary")
    decode = facts.phases["decode"].first("gpu_metrics_summary")
    assert prefill["tensor_active_pct"] > 60 and decode["tensor_active_pct"] < 10
    assert decode["dram_read_pct"] > 60 > prefill["dram_read_pct"]
    assert report.phase_facts["decode"]["gpu_metrics_summary"][0]["dram_read_pct"] == decode["dram_read_pct"]
    from nsys_diagnose.reports.render import render
    assert "| decode · GPU 0 |" in render(report, "md")
