"""The what-if replay on a sample of the steps: a stratum of more than facts.whatif_sample_steps steps is sampled
the same way every run, every sampled step replays as it does in the whole replay, the 95 % interval of each
median holds the exact median, and the projection and the finding's cost say they come from a sample; a smaller
stratum, or one whose steps are not tight around their median, is replayed whole."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from conftest import scenario_analysis

from nsys_diagnose.diagnosis.whatif import replay_row, saving, what_if
from nsys_diagnose.facts.compute import FactSet, compute_facts
from nsys_diagnose.reading.export import open_export

SAMPLE = 100
EXACT = 10**9  # more steps than any export holds: every step replayed
ANY_SPREAD = 10**9  # facts.whatif_sample_tolerance that samples steps however spread


def _facts(scenario: str, sample: int, tolerance: float = ANY_SPREAD) -> FactSet:
    from conftest import _SCENARIO_DIR

    scenario_analysis(scenario)  # generates the export
    path: Path = _SCENARIO_DIR[0] / f"{scenario}.sqlite"
    with open_export(path) as export:
        return compute_facts(export, params={"whatif_sample_steps": sample, "whatif_sample_tolerance": tolerance},
                             helpers=["_whatif_steps"])


def _key(row: dict[str, Any]) -> tuple[Any, Any]:
    return row["device_id"], row["step_id"]


def test_a_stratum_over_the_sample_size_is_sampled_deterministically_and_exactly() -> None:
    sampled, again, exact = _facts("sync_storm", SAMPLE), _facts("sync_storm", SAMPLE), _facts("sync_storm", EXACT)
    steps, whole = sampled.rows("_whatif_steps"), exact.rows("_whatif_steps")
    total = len(whole)
    assert total > SAMPLE  # the scenario's steps outnumber the sample
    # the same export gives the same sample
    assert [_key(r) for r in steps] == [_key(r) for r in again.rows("_whatif_steps")]
    assert sum(r["device_sampled"] for r in steps) == SAMPLE
    assert all(r["device_steps"] == total for r in steps)
    # every k-th step in time order: from the first step to one near the last, evenly spaced
    order = sorted(whole, key=lambda r: r["step_id"])
    ranks = sorted(order.index(next(w for w in order if _key(w) == _key(r))) for r in steps if r["device_sampled"])
    assert ranks[0] == 0 and ranks[-1] >= total - total // SAMPLE - 1
    assert max(b - a for a, b in zip(ranks, ranks[1:])) <= -(-total // SAMPLE)
    # a sampled step replays exactly as in the replay of every step
    by_key = {_key(r): r for r in whole}
    columns = ("measured_ns", "sync_ns", "launch_gaps_ns", "host_gaps_ns", "fused_ns", "batch_low_ns")
    assert all({c: r[c] for c in columns} == {c: by_key[_key(r)][c] for c in columns} for r in steps)


def test_the_interval_holds_the_exact_median_and_the_projection_says_it_is_a_sample() -> None:
    sampled, exact = _facts("sync_storm", SAMPLE), _facts("sync_storm", EXACT)
    sample = next(r for r in sampled.rows("whatif_sample") if r["phase"] is None)
    assert sample["sampled"] and sample["steps"] == SAMPLE and sample["steps_total"] > SAMPLE
    whole = exact.rows("_whatif_steps")
    for stem, column in (("measured", "measured_ns"), ("sync", "sync_ns")):
        median = statistics.median(r[column] for r in whole)
        assert sample[f"{stem}_step_low_ns"] <= median <= sample[f"{stem}_step_high_ns"], stem
    row = replay_row(sampled, 0, None)
    assert row is not None
    line = what_if("sync", row)
    assert line is not None
    assert f"median over a sample of {SAMPLE} of {sample['steps_total']:,} steps" in line.line
    assert "95 % interval of the median step" in line.line
    assert any("sample" in a for a in line.assumptions)  # the HTML table shows the assumptions


def test_a_stratum_within_the_sample_size_is_replayed_whole_and_says_nothing() -> None:
    facts = _facts("eager_decode", SAMPLE)
    samples = facts.rows("whatif_sample")
    assert samples and all(not r["sampled"] and r["steps"] == r["steps_total"] for r in samples)
    assert all(r["measured_step_low_ns"] is None for r in samples)
    row = replay_row(facts, 0, None)
    assert row is not None
    projection = what_if("launch-gaps", row)
    assert projection is not None and "sample" not in projection.line


def test_a_finding_whose_cost_comes_from_a_sample_states_an_interval_holding_the_exact_cost() -> None:
    sampled, exact = _facts("sync_storm", SAMPLE), _facts("sync_storm", EXACT)
    sampled_row, exact_row = replay_row(sampled, 0, None), replay_row(exact, 0, None)
    assert sampled_row is not None and exact_row is not None
    estimate, truth = saving("sync", sampled_row, 1.0), saving("sync", exact_row, 1.0)
    assert estimate is not None and truth is not None and truth.cost > 0.05
    assert truth.cost_interval is None  # every step replayed: the cost is exact and says nothing more
    assert estimate.cost_interval is not None
    low, high = estimate.cost_interval
    assert low <= truth.cost <= high and low <= estimate.cost <= high


def test_steps_spread_around_their_median_are_replayed_whole_so_the_costs_stay_exact() -> None:
    # sync_storm's steps jitter by a few per cent: between the quantiles where a sample of 100 reads its interval
    # of the median they lie about 6 % of the median apart, more than the default 1 % tolerance
    spread, exact = _facts("sync_storm", SAMPLE, tolerance=0.01), _facts("sync_storm", EXACT)
    samples = spread.rows("whatif_sample")
    assert samples and all(not r["sampled"] and r["steps"] == r["steps_total"] > SAMPLE for r in samples)
    assert spread.rows("whatif_replay") == exact.rows("whatif_replay")
    # a looser tolerance lets the same stratum be sampled
    loose = next(r for r in _facts("sync_storm", SAMPLE, tolerance=0.1).rows("whatif_sample") if r["phase"] is None)
    assert loose["sampled"] and loose["steps"] == SAMPLE
