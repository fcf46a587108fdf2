"""A phase's share in the verdict and its NVTX range's share of the capture are two quantities: the verdict's is
of the run's GPU window (the GPU windows the phases split, each phase owning the idle gap before each of its
operations, so the time between its ranges too), the NVTX table's is the time the ranges were open over the
capture. The report names each by what it is a share of, so a reader sees two measures, not a contradiction."""

from __future__ import annotations

import re

import pytest

from nsys_diagnose.reports.render import render

from conftest import scenario_analysis

PHASED = ("prefill_decode_nvtx", "short_decode_after_prefills", "trtllm_forward_steps")


def _window(facts) -> int:
    return sum(r["window_ns"] for r in facts.rows("gpu_utilization"))


@pytest.mark.parametrize("scenario", PHASED)
def test_each_phase_line_gives_its_share_of_the_runs_gpu_window(scenario: str) -> None:
    facts, report = scenario_analysis(scenario)
    for line in report.verdict.phases:
        share = _window(facts.phases[line.phase]) / _window(facts)
        said = re.search(r"(\d+) % of the run's GPU window", line.line)
        assert said is not None, line.line
        assert int(said.group(1)) == round(share * 100)
        # the finding's cost to the run is taken of the same share
        if line.impact is not None and line.run_impact is not None:
            assert line.run_impact == pytest.approx(line.impact * share)


def test_the_nvtx_table_says_its_share_is_of_the_capture_and_not_the_phases() -> None:
    facts, report = scenario_analysis("prefill_decode_nvtx")
    nvtx = {r["name"]: r["share_of_capture"] for r in facts.rows("nvtx_summary")}
    decode = next(p for p in report.verdict.phases if p.phase == "decode")
    verdict_share = _window(facts.phases["decode"]) / _window(facts)
    # two quantities: the decode ranges were open 70 % of the capture, decode owns 71 % of the GPU window
    assert round(nvtx["decode"] * 100) != round(verdict_share * 100)
    assert "71 % of the run's GPU window" in decode.line
    for fmt in ("md", "html"):
        text = render(report, fmt).replace("&#39;", "'")
        nvtx_section = text[text.index("NVTX ranges"):]
        assert "Share of capture: how long a label's ranges were open, over the capture's traced time" in nvtx_section
