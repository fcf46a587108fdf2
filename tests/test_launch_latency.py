"""slow-launch-calls judges the median launch latency (launch_api.p50_ns): a few launch calls that block for
milliseconds (a full launch queue, lazy module loading) inflate the mean of thousands of fast ones, and must
not make it fire; launches that are slow as a rule must. Small synthetic exports built with the fixture
generator's export writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_diagnose.fixtures import _kernels as K
from nsys_diagnose.fixtures import generator as gen
from nsys_diagnose.fixtures._export import ERA_2024, H100_SXM, Proc

from conftest import analysis

US = 1_000


def _launches(path: Path, call_ns: list[int]) -> Path:
    """One cudaLaunchKernel call of each duration, one after the other, each launching a 20 µs kernel."""
    x = gen._new_export(ERA_2024, H100_SXM, 1, nvtx=False, command=("python3", ["launches.py"]))
    p = Proc(48213, "python3")
    x.procs.append(p)
    t = 1_000_000_000
    for dur in call_ns:
        corr = x.runtime(p, "cudaLaunchKernel_v7000", t, t + dur)
        x.kernel(p, K.MUL, t + dur + 2 * US, t + dur + 22 * US, corr)
        t += dur + 30 * US
    gen._finish(x, path)
    return path


@pytest.mark.parametrize(
    ("calls", "fires"),
    [pytest.param([6 * US] * 300 + [10_000 * US] * 5, False, id="few-outliers"),  # mean ≈ 170 µs, median 6 µs
     pytest.param([40 * US] * 300, True, id="slow-as-a-rule", marks=pytest.mark.slow)])  # every launch 40 µs
def test_slow_launch_calls_judges_the_median_not_the_mean(tmp_path, calls, fires):
    facts, report = analysis(_launches(tmp_path / "launches.sqlite", calls))
    (row,) = facts.rows("launch_api")
    assert row["call_count"] == len(calls)
    found = [f for f in report.findings if f.rule == "slow-launch-calls"]
    if fires:
        assert row["p50_ns"] == 40 * US
        assert [f.subject for f in found] == ["cudaLaunchKernel"]
        assert "take 40.0 µs each at the median" in found[0].message
    else:
        assert row["mean_ns"] > 20 * US * 8 and row["p50_ns"] == 6 * US
        assert not found
