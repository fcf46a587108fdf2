"""A capture that opens with a one-off start-up (model load, warm-up): the start-up is found, reported apart with its
numbers, and the rules judge the steady window after it; a capture that is only start-up is judged as it is."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.diagnosis.config import Config, ConfigError, apply_set, load_config_file
from nsys_diagnose.facts.compute import _define_phases
from nsys_diagnose.fixtures.generator import PER_STEP_32, SCENARIOS, generate
from nsys_diagnose.reports.render import render

from conftest import REAL_DIR, analysis, requires_real, scenario_analysis, slow_but

GIB4 = 16 * (256 << 20)  # the fixtures' model: 16 tensors of 256 MiB
# the scenarios that open with one-off work before their loop
OPEN_WITH_START_UP = {"model_load_decode", "model_load_no_nvtx", "model_load_pcie_loop", "model_load_only",
                      "first_launch_module_load", "pinned_alloc_before_loop"}


def test_model_load_is_reported_apart_and_the_loop_gets_the_verdict() -> None:
    facts, report = scenario_analysis("model_load_decode")
    row = facts.first("startup")
    assert row["found_by"] == "nvtx"
    assert (row["load_copy_count"], row["load_bytes"], row["pageable_share"]) == (16, GIB4, 1.0)
    assert 4.1 < row["load_gbps"] < 4.5
    assert 0.9e9 < row["load_ns"] < 1.2e9
    assert 0.3 < row["startup_fraction"] < 0.5
    # warm-up: 3 eager decode steps, then the graph captured and instantiated
    assert row["warmup_kernel_count"] == 3 * PER_STEP_32 and row["graph_capture_count"] == 2
    assert row["judged_after"] and row["steady_op_count"] == 150
    # the verdict is the steady loop's: a healthy CUDA-graph decode, not the model load's PCIe stall
    assert report.verdict.primary is None
    assert not any(f.category == "pcie-bound" for f in report.findings)
    assert f"This verdict judges the {row['steady_ns'] / 1e9:.2f} s after a one-off start-up" in report.verdict.headline
    # the judged window is the steady one: no pageable copy left, the GPU window is the loop's
    transfer = facts.first("transfer_overview")
    assert transfer["pageable_bytes"] == 0 and transfer["pcie_bytes"] < 1 << 20
    gpu = facts.first("gpu_utilization")
    assert gpu["window_ns"] <= row["steady_ns"] and gpu["utilization"] > 0.9
    assert report.startup is not None and report.startup.judged_after
    assert "model load: 4.0 GiB of host-to-device copies, 100 % pageable, at 4.3 GB/s" in report.startup.line
    assert f"warm-up: {3 * PER_STEP_32} kernels, 2 CUDA-graph captures" in report.startup.line


@pytest.mark.slow
def test_without_start_up_detection_the_same_capture_reads_pcie_bound(tmp_path: Path) -> None:
    """What the start-up detection changes: with it off (a start-up must take more than the whole capture), the
    model load is judged as the workload."""
    path = tmp_path / "model_load_decode.sqlite"
    generate("model_load_decode", path)
    config = Config()
    apply_set(config, "facts.startup_min_share=1")
    report = diagnose(path, config, cache=False)
    assert report.startup is None
    assert report.verdict.primary == "pcie-bound"


@pytest.mark.slow
def test_start_up_found_from_shape_without_nvtx() -> None:
    facts, report = scenario_analysis("model_load_no_nvtx")
    row = facts.first("startup")
    assert row["found_by"] == "shape" and row["judged_after"]
    assert row["load_bytes"] >= GIB4 and row["pageable_share"] > 0.999 and row["warmup_ns"] == 0
    assert 0.3 < row["startup_fraction"] < 0.5
    assert report.verdict.primary is None
    assert "host-to-device copies before the first kernel" in report.verdict.headline


@pytest.mark.slow
def test_copies_inside_the_loop_stay_pcie_bound() -> None:
    facts, report = scenario_analysis("model_load_pcie_loop")
    row = facts.first("startup")
    assert row["found_by"] == "nvtx" and row["judged_after"] and row["load_bytes"] == GIB4
    assert report.verdict.primary == "pcie-bound"
    # the finding counts the loop's 40 copies (10 GiB), not the model load's
    transfer = facts.first("transfer_overview")
    assert transfer["pcie_count"] == 40 and transfer["pcie_bytes"] == 40 * (256 << 20)


def test_copies_from_the_first_moment_are_no_start_up() -> None:
    facts, report = scenario_analysis("pageable_copies")
    assert facts.rows("startup") == [] and report.startup is None
    assert report.verdict.primary == "pcie-bound"
    assert "start-up" not in report.verdict.headline


@pytest.mark.slow
def test_a_capture_of_the_start_up_alone_is_judged_as_it_is() -> None:
    facts, report = scenario_analysis("model_load_only")
    row = facts.first("startup")
    assert row["found_by"] == "nvtx" and not row["judged_after"] and row["startup_fraction"] > 0.9
    assert report.verdict.primary == "pcie-bound"
    assert "The capture is only start-up" in report.verdict.headline
    assert "this verdict judges the start-up itself" in report.verdict.headline
    assert facts.first("transfer_overview")["pcie_bytes"] == GIB4  # nothing was cut
    assert report.startup is not None and "whole capture is judged" in report.startup.line


@pytest.mark.parametrize("fmt", ["terminal", "md", "html", "json"])
def test_every_format_reports_the_start_up(fmt: str) -> None:
    report = scenario_analysis("model_load_decode")[1]
    text = render(report, fmt)
    assert "4.0 GiB of host-to-device copies, 100 % pageable, at 4.3 GB/s" in text
    assert "after it" in text


@pytest.mark.parametrize(("text", "kind"), [
    ("init_model", "load"), ("load_model", "load"), ("Loading weights", "load"), ("model_init", "load"),
    ("setup", "load"), ("initialize", "load"), ("warmup", "warmup"), ("warm-up", "warmup"),
    ("torch.compile", "warmup"), ("cuda_graph_capture", "warmup"), ("capture_graphs", "warmup"),
    ("profile_run", "warmup"),
    ("benchmark_loop", None), ("execute_model", None), ("decode", None), ("preload_weights", None),
    ("reinit", None), ("offload", None), ("download", None), ("recompile_cache", None),
])
def test_start_up_patterns_are_word_bounded(text: str, kind: str | None) -> None:
    with duckdb.connect() as con:
        _define_phases(con, None)
        assert con.execute("SELECT startup_of(?)", [text]).fetchone()[0] == kind


@pytest.mark.slow
def test_start_up_patterns_are_configurable(tmp_path: Path) -> None:
    config_file = tmp_path / "diagnose.yaml"
    config_file.write_text('startup: {load: "(?i)^weights_in$"}\n')
    config = load_config_file(config_file)
    path = tmp_path / "model_load_decode.sqlite"
    generate("model_load_decode", path)
    report = diagnose(path, config, cache=False)
    # init_model no longer reads as start-up: only the copies before the first kernel are found, from shape
    assert report.startup is not None and report.startup.found_by == "shape" and report.startup.warmup_ns == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text('startup: {prefill: "x"}\n')
    with pytest.raises(ConfigError, match="the start-up kinds are load and warmup"):
        load_config_file(bad)



def test_tokens_per_second_count_the_steady_window_only(tmp_path: Path) -> None:
    path = tmp_path / "model_load_decode.sqlite"
    generate("model_load_decode", path)
    report = diagnose(path, tokens=150 * 256, cache=False)  # 150 steps of batch 256
    assert report.startup is not None
    assert report.throughput.duration_ns == report.startup.steady_ns < report.profile.duration_ns * 0.6
    assert report.throughput.tokens_per_s == pytest.approx(150 * 256 / report.startup.steady_ns * 1e9)


def test_a_fact_shown_alone_covers_the_window_diagnose_judges() -> None:
    """`diagnose facts show transfer_overview` computes the start-up too, so it shows the steady window's rows."""
    from nsys_diagnose.cli.facts import needed
    from nsys_diagnose.facts.loading import load_facts

    assert "startup" in needed(load_facts(), "transfer_overview")


@pytest.mark.slow
def test_each_phase_is_judged_inside_the_steady_window(tmp_path: Path) -> None:
    """The per-phase facts come from the steady window too: the warm-up's eager steps, in no phase range, never
    join the loop's own unlabelled step in the phase 'other'."""
    import random

    from nsys_diagnose.fixtures import generator as g

    rng = random.Random("startup-phases")
    x = g._new_export(g.ERA_2024, g.H100_SXM, 1)
    p = g.Proc(48213, "python3")
    x.procs.append(p)
    forward_id = g._vllm_domain(x, p, rng)
    h = g.Host(x, p, rng, g._t0(rng))
    start = h.t
    g._load_weights(h, g.ML_TENSORS)
    h.nvtx(start, text="init_model")
    start = h.t
    for _ in range(3):
        g.eager_decode_step(h, g.LLAMA_LAYERS, label=None)
    h.nvtx(start, text="warmup")
    g.prefill_step(h, forward_id)
    for _ in range(10):
        g.eager_decode_step(h, g.LLAMA_LAYERS, batch=1, label="decode")
    g.eager_decode_step(h, g.LLAMA_LAYERS, label=None)  # the loop's one step outside every phase range
    path = tmp_path / "load_prefill_decode.sqlite"
    g._finish(x, path)
    facts, report = analysis(path)
    assert facts.first("startup")["judged_after"]
    assert facts.first("startup")["warmup_kernel_count"] == 3 * PER_STEP_32
    assert set(facts.phases) == {"prefill", "decode", "other"}
    assert facts.phases["other"].first("gpu_utilization")["kernel_count"] == PER_STEP_32
    launches = {r["name"]: r["call_count"] for r in facts.phases["other"].rows("launch_api")}
    assert launches.get("cudaLaunchKernel") == PER_STEP_32
    assert facts.phases["decode"].first("gpu_utilization")["kernel_count"] == 10 * PER_STEP_32
    assert report.verdict.primary != "pcie-bound"


def test_a_slow_first_launch_is_start_up_and_the_loop_is_judged_alone() -> None:
    """Without NVTX: a 16 ms first launch (the kernel's module loaded inside it, CUDA lazy loading) before a 2 ms
    per-iteration loop is start-up; the loop after it is judged alone, busy, not the load's idle GPU."""
    facts, report = scenario_analysis("first_launch_module_load")
    row = facts.first("startup")
    assert row["found_by"] == "shape" and row["judged_after"] and row["module_load_count"] == 1
    assert 15.5e6 <= row["first_launch_ns"] <= 16.5e6
    assert row["steady_op_count"] == 79  # every kernel but the one the slow launch issued
    assert facts.first("gpu_utilization")["utilization"] > 0.95  # 55 % when the load is judged with the loop
    assert report.verdict.primary is None
    assert report.startup is not None and "first launch 16.0 ms (module load)" in report.startup.line
    assert "found from its shape: first launch 16.0 ms (module load)" in report.verdict.headline


def test_a_pinned_allocation_before_the_loop_is_start_up_not_allocation_churn() -> None:
    facts, report = scenario_analysis("pinned_alloc_before_loop")
    row = facts.first("startup")
    assert row["found_by"] == "shape" and row["judged_after"] and row["setup_call"] == "cuMemHostAlloc"
    assert 23.5e6 <= row["setup_call_ns"] <= 24.5e6
    assert not any(f.rule == "allocator-churn" for f in report.findings)
    assert report.verdict.primary == "launch-bound"
    assert report.startup is not None and "cuMemHostAlloc 24.1 ms" in report.startup.line


@pytest.mark.parametrize("name", slow_but(
    [n for n in SCENARIOS if n not in OPEN_WITH_START_UP], "eager_decode"))
def test_a_steady_program_gets_no_start_up(name: str) -> None:
    """No scenario without one-off work before its loop is cut: the whole capture stays judged."""
    facts, report = scenario_analysis(name)
    assert facts.rows("startup") == [] and report.startup is None


@requires_real
def test_real_exports_with_one_off_set_up_get_a_start_up() -> None:
    """The real OpenACC run opens with a 24.8 ms cuMemHostAlloc and a module load before its 1,934-kernel loop; the
    Rodinia Gaussian run's set-up before its loop is under 5 % of the capture and is not cut."""
    openacc = REAL_DIR / "PolPuigPuy__OpenACC_Project__report12__legacy-nvhpc21.2_RTX3080_openacc.sqlite"
    facts, report = analysis(openacc)
    row = facts.first("startup")
    assert row["found_by"] == "shape" and row["setup_call"] == "cuMemHostAlloc" and row["steady_op_count"] == 1934
    assert report.startup is not None and "cuMemHostAlloc 24.8 ms" in report.startup.line
    rodinia = REAL_DIR / "kmcho2019__Rodinia_Gaussian__report2__2022.4.2_7xRTX3090_launch-sync-bound.sqlite"
    assert analysis(rodinia)[0].rows("startup") == []
