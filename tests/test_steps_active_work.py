"""The steps judge the same active work as the rest of the report (facts _step_ranges, _steps, steps;
docs/measures.md "Steps and phases"): a step found from synchronisations that holds a quiet stretch of
_server_idle leaves it out of its time, and the spans after the last GPU work are no steps, so the steps' GPU-busy
share agrees with the GPU utilisation the verdict states."""

from __future__ import annotations

import pytest

from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.reading.export import open_export
from nsys_diagnose.reports.render import render

from conftest import REAL_DIR, analysis, requires_real

# A GEMM benchmark on Windows: a few syncs while it copies its inputs, 10 minutes of nothing, then 2,000
# launch + cudaEventSynchronize iterations and a shutdown (frees, a module unload, a final cuCtxSynchronize).
GEMM = "florianmattana__CUDA-Kernels__prof__2025.5.2_windows_RTX5070Ti-laptop_gemm.sqlite"


@requires_real
def test_a_sync_step_across_ten_idle_minutes_does_not_dilute_the_steps_busy_share() -> None:
    path = REAL_DIR / GEMM
    facts, report = analysis(path)
    idle = facts.first("server_idle")
    assert idle["stretch_count"] == 1 and idle["idle_fraction"] > 0.99
    utilization = facts.first("gpu_utilization")["utilization"]
    steps = facts.first("steps")
    # the loop keeps the GPU as busy as the verdict says (68.7 %), not 0.1 % of a 616 s capture
    assert steps["busy_share"] == pytest.approx(utilization, abs=0.01)
    assert steps["step_count"] == 2011  # the shutdown after the last kernel is no step

    with open_export(path, cache=False) as export:
        rows = compute_facts(export, facts=load_facts(), helpers={"_steps"}).rows("_steps")
    # every step's time lies in the active work; the one sync-to-sync span that holds the stretch keeps only the
    # 148 µs after it
    assert sum(r["period_ns"] for r in rows) <= idle["active_ns"]
    held = [r for r in rows if r["quiet_ns"] > 0]
    assert [r["quiet_ns"] for r in held] == [idle["idle_ns"]]
    assert held[0]["period_ns"] < 1_000_000

    md = render(report, "md")
    assert "| all steps | 2,011 | 285.8 µs | 367.6 µs | 69 % |" in md
    assert "The GPU is busy 68.7 % overall" in md
