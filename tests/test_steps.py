"""Per-step statistics and phases inferred from the steps' shape (facts _steps, steps, phases; docs/measures.md
"Steps and phases"): a step's period and kernels against the generated exports' own records, TensorRT-LLM's
per-step batch, vLLM V1 steps with no phase word judged per inferred phase, and runs whose steps are all alike left
whole."""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path

import pytest

from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.diagnosis.config import Config, Setting
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.fixtures.generator import SCENARIOS
from nsys_diagnose.reading.export import open_export
from nsys_diagnose.reports.render import render

from conftest import scenario_analysis, scenario_path

TRT, V1 = "trtllm_forward_steps", "vllm_v1_forward_ranges"


@pytest.fixture(scope="module")
def exports() -> Path:
    paths = [scenario_path(name) for name in (TRT, V1, "eager_decode", "idle_server_bursts")]
    return paths[0].parent  # generated once per session, read only here


def _steps(path: Path, **params: float) -> list[dict]:
    with open_export(path, cache=False) as export:
        found = compute_facts(export, params=params or None, facts=load_facts(), helpers={"_steps"})
    return found.rows("_steps")


def _ranges(path: Path, text_like: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of the NVTX push/pop ranges whose text is LIKE `text_like`, in start order."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return con.execute("SELECT start, end, text FROM NVTX_EVENTS WHERE text LIKE ? ORDER BY start",
                           (text_like,)).fetchall()


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as DuckDB's quantile_cont."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _by_phase(facts) -> dict[str, dict]:
    return {r["phase"]: r for r in facts.rows("steps")}


@pytest.mark.slow
def test_tensorrt_llm_steps_carry_their_batch_and_their_period(exports: Path) -> None:
    truth = SCENARIOS[TRT].truth
    path = exports / f"{TRT}.sqlite"
    ranges = _ranges(path, "[Executor] _forward_step %")
    rows = _steps(path)
    assert len(rows) == len(ranges) == truth["steps"]
    assert [r["ctx_reqs"] for r in rows] == truth["ctx_reqs"]
    assert [r["gen_reqs"] for r in rows] == truth["gen_reqs"]
    assert [r["phase"] for r in rows] == ["prefill" if c else "decode" for c in truth["ctx_reqs"]]
    assert {r["phase_source"] for r in rows} == {"label"}
    assert {r["kernel_count"] for r in rows} == {truth["kernels_per_step"]}
    # the period by hand: from each range's start to the next one's; the last step's is its own duration
    periods = [b[0] - a[0] for a, b in zip(ranges, ranges[1:])] + [ranges[-1][1] - ranges[-1][0]]
    assert [r["period_ns"] for r in rows] == periods
    assert [r["dur_ns"] for r in rows] == [e - s for s, e, _ in ranges]

    facts, report = scenario_analysis(TRT)
    stats = _by_phase(facts)
    assert list(stats) == ["prefill", "decode", "all"]
    decode_periods = [p for p, c in zip(periods, truth["ctx_reqs"]) if c == 0]
    decode = stats["decode"]
    assert decode["step_count"] == truth["generation_steps"] == len(decode_periods)
    assert decode["median_step_ns"] == pytest.approx(statistics.median(decode_periods))
    assert decode["p90_step_ns"] == pytest.approx(_quantile(decode_periods, 0.9))
    assert decode["tpot_proxy_ns"] == decode["median_step_ns"] == stats["all"]["tpot_proxy_ns"]
    lo, hi = truth["decode_period_ns"]
    assert lo <= decode["median_step_ns"] <= hi
    assert decode["mean_batch"] == 3 and stats["prefill"]["mean_batch"] == 2  # 1+0, 1+1, 1+2 requests
    assert stats["all"]["mean_batch"] == pytest.approx((1 + 2 + 3 + 3 * 42) / 45)
    assert stats["prefill"]["prefill_step_ns"] == pytest.approx(statistics.median(
        [p for p, c in zip(periods, truth["ctx_reqs"]) if c]))
    lo, hi = truth["decode_busy_share"]
    assert lo <= decode["median_busy_share"] <= hi
    assert (decode["source"], decode["phase_source"]) == ("nvtx", "label")

    # the throughput model reads the same numbers, not the mean of the ranges' durations
    assert report.throughput.decode_steps == 42
    assert report.throughput.step_time_ns == pytest.approx(decode["median_step_ns"])
    assert report.throughput.steps_per_s == pytest.approx(1e9 / decode["median_step_ns"])


@pytest.mark.slow
def test_tensorrt_llm_labels_judge_decode_on_its_own() -> None:
    facts, report = scenario_analysis(TRT)
    assert set(facts.phases) == {"prefill", "decode"}
    launch = [f for f in report.findings if f.rule == "launch-bound"]
    assert [(f.phase, f.severity) for f in launch] == [("decode", "warning")]
    assert (report.verdict.primary, report.verdict.phase) == ("launch-bound", "decode")
    assert report.verdict.headline.startswith(
        "In decode (bounds time per output token): GPU starved by kernel-launch overhead")
    # the process that ran the work is trtllm-serve and the steps are the executor's: TensorRT-LLM's advice, not
    # that of the library whose kernel names it shares
    assert report.profile.stack.name == "tensorrt-llm"
    assert "cuda_graph" in launch[0].remediation[0] and not any("vLLM" in step for step in launch[0].remediation)


@pytest.mark.slow
def test_vllm_v1_steps_without_phase_words_get_inferred_phases(exports: Path) -> None:
    truth = SCENARIOS[V1].truth
    path = exports / f"{V1}.sqlite"
    forward = _ranges(path, "gpu_model_runner: forward")
    rows = _steps(path)
    assert len(rows) == len(forward) == truth["steps"]
    assert {r["text"] for r in rows} == {"gpu_model_runner: forward"}
    assert [r["phase"] for r in rows] == truth["step_phases"]
    assert {r["phase_source"] for r in rows} == {"inferred"}
    # the forward range holds the model's kernels; the sampler's two run in the 'sample' range after it
    assert {r["kernel_count"] for r in rows} == {truth["forward_kernels_per_step"]}
    # an eager forward range closes once its launches are queued: prefill and decode ranges last alike, the
    # prefill's period (which waits for its kernels in 'sample') is what tells them apart
    prefill = [r for r in rows if r["phase"] == "prefill"]
    decode = [r for r in rows if r["phase"] == "decode"]
    assert max(r["dur_ns"] for r in prefill) < 2 * statistics.median(r["dur_ns"] for r in decode)
    lo, hi = truth["prefill_period_ns"]
    assert all(lo <= r["period_ns"] <= hi for r in prefill)
    lo, hi = truth["prefill_mean_kernel_ns"]
    assert all(lo <= r["mean_kernel_ns"] <= hi for r in prefill)

    facts, report = scenario_analysis(V1)
    phases = {p["phase"]: p for p in facts.rows("phases")}
    assert set(phases) == {"prefill", "decode"}  # the sampler's kernels go with their step: no 'other'
    assert phases["prefill"]["inferred"] and phases["decode"]["inferred"]
    evidence = phases["prefill"]["inference_evidence"]
    ratio = statistics.median(r["period_ns"] for r in prefill) / statistics.median(r["period_ns"] for r in rows)
    assert evidence.startswith(f"{ratio:.1f}x the median step, mean kernel ")
    assert phases["decode"]["kernel_count"] == truth["decode_steps"] * truth["kernels_per_step"]
    stats = _by_phase(facts)
    assert (stats["decode"]["phase_source"], stats["decode"]["step_count"]) == ("inferred", truth["decode_steps"])

    launch = [f for f in report.findings if f.rule == "launch-bound"]
    assert [(f.phase, f.severity) for f in launch] == [("decode", "warning")]
    assert (report.verdict.primary, report.verdict.phase) == ("launch-bound", "decode")
    assert report.throughput.inferred is True


@pytest.mark.slow
def test_steps_that_are_all_alike_infer_nothing(exports: Path) -> None:
    rows = _steps(exports / "eager_decode.sqlite")  # 25 alike execute_model steps
    assert len(rows) == 25 and {(r["phase"], r["phase_source"]) for r in rows} == {(None, None)}
    facts, report = scenario_analysis("eager_decode")
    assert [r["phase"] for r in facts.rows("steps")] == ["all"]
    assert facts.rows("steps")[0]["tpot_proxy_ns"] is None  # no step is known to be decode
    assert not facts.phases and report.throughput is None
    assert report.verdict.primary == "launch-bound" and report.verdict.phase is None


@pytest.mark.slow
def test_too_few_steps_infer_nothing(exports: Path) -> None:
    rows = _steps(exports / f"{V1}.sqlite", step_infer_min_steps=100)
    assert {r["phase"] for r in rows} == {None}
    path = exports / f"{V1}.sqlite"
    report = diagnose(path, Config(fact_params={"step_infer_min_steps": Setting(100, "command line")}), cache=False)
    assert report.verdict.phase is None
    assert not any(p.get("inferred") for p in report.facts["phases"])


def test_a_quiet_stretch_is_no_part_of_the_step_before_it(exports: Path) -> None:
    rows = _steps(exports / "idle_server_bursts.sqlite")  # 5 bursts of 12 steps, 1.5-3 s of nothing between
    assert len(rows) == 60
    last_of_burst = [r for i, r in enumerate(rows) if i % 12 == 11]
    assert all(r["period_ns"] == r["dur_ns"] for r in last_of_burst)
    assert max(r["period_ns"] for r in rows) < 10_000_000


@pytest.mark.slow
def test_steps_appear_in_every_format() -> None:
    _, report = scenario_analysis(V1)
    text = render(report, "terminal")
    lines = [line.strip() for line in text.splitlines()]
    decode = next(line for line in lines if line.startswith("decode (inferred): 45 steps · median "))
    assert "GPU busy 37 %" in decode and "TPOT ≥ 4.2 ms" in decode
    assert any(line.startswith("inferred from shape: prefill steps ") for line in lines)
    md = render(report, "md")
    assert "### Steps" in md and "| decode (inferred) | 45 | 4.2 ms |" in md
    html = render(report, "html")
    assert '<section id="steps">' in html and "decode (inferred)</td>" in html
    data = json.loads(render(report, "json"))
    assert [r["phase"] for r in data["facts"]["steps"]] == ["prefill", "decode", "all"]
    assert data["throughput"]["decode_steps"] == 45 and data["throughput"]["inferred"] is True

    _, plain = scenario_analysis("eager_decode")  # no phases: one line for every step, no TPOT claim
    lines = [line.strip() for line in render(plain, "terminal").splitlines()]
    assert any(line.startswith("25 steps · median 4.2 ms") and "TPOT" not in line for line in lines)


@pytest.mark.parametrize("name", ["eager_decode", "graph_host_gaps", "sync_storm", "healthy_graph_decode"])
def test_alike_steps_keep_the_run_whole_and_its_verdict(name: str) -> None:
    # eager or graph-replayed decode steps, host gaps between graph replays, 1,999 steps between synchronisations:
    # no step stands out, so no phase is inferred and the verdict is the whole run's, as before steps existed
    facts, report = scenario_analysis(name)
    assert [r["phase"] for r in facts.rows("steps")] == ["all"]
    assert not any(p.get("inferred") for p in facts.rows("phases")) and not facts.phases
    assert report.verdict.primary == SCENARIOS[name].expected_primary
