"""The single-sort facts checked against a plain Python oracle on every scenario and real export.

_timeline computes busy time, gaps and communication overlap from running maxima in one sort instead of
merging intervals; these tests merge the intervals the obvious way in Python and demand the same numbers."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from nsys_diagnose.base.vocabulary import IDLE_CAUSES
from nsys_diagnose.fixtures.generator import SCENARIOS
from nsys_diagnose.reading.export import open_export

from nsys_diagnose.facts.window import steady_start
from conftest import REAL_EXPORTS, analysis, scenario_analysis

COMM = ("nccl", "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter",
        "cross_device_reduce", "alltoall")


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def _overlap(s: int, e: int, union: list[tuple[int, int]]) -> int:
    return sum(max(0, min(e, ue) - max(s, us)) for us, ue in union)


def _waits(path: Path) -> list[tuple[int, int]]:
    """The quiet stretches of a waiting server as _server_idle finds them (their detection, from the steps and the
    OS waits, is tested in test_server_idle.py): the oracle takes them as given and checks the interval arithmetic
    around them."""
    from nsys_diagnose.cli.facts import needed
    from nsys_diagnose.facts.loading import load_facts
    from nsys_diagnose.facts.compute import compute_facts

    with open_export(path) as export:
        found = compute_facts(export, facts=needed(load_facts(), "_server_idle"), helpers={"_server_idle"})
    return [(r["start_ns"], r["end_ns"]) for r in found.rows("_server_idle")]


def _oracle(export, since: int | None = None, waits: list[tuple[int, int]] = ()) -> dict:
    """The same quantities by plain interval merging in Python; `since`: the steady window's start when the facts
    judge the work after a start-up (engine/facts/window.py: an operation or call belongs to it when it starts
    there); `waits`: the quiet stretches left out of the windows (_waits)."""
    ops = [op for op in export.query("""
        SELECT device_id, start_ns, end_ns, 'kernel', lower(coalesce(name, '')) FROM kernels
        WHERE end_ns >= start_ns AND device_id IS NOT NULL
        UNION ALL SELECT device_id, start_ns, end_ns, 'graph', '' FROM graph_launches
        WHERE end_ns >= start_ns AND device_id IS NOT NULL
        UNION ALL SELECT device_id, start_ns, end_ns, 'copy', '' FROM memcpys
        WHERE end_ns >= start_ns AND device_id IS NOT NULL
        UNION ALL SELECT device_id, start_ns, end_ns, 'copy', '' FROM memsets
        WHERE end_ns >= start_ns AND device_id IS NOT NULL""")
           if since is None or op[1] >= since]
    by_device: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    for device, s, e, kind, name in ops:
        d = by_device[device]
        d["all"].append((s, e))
        if kind in ("kernel", "graph"):
            d["compute"].append((s, e))
            is_comm = kind == "kernel" and any(w in name for w in COMM)
            d["comm" if is_comm else "noncomm"].append((s, e))
        else:
            d["copies"].append((s, e))
    def idle(union: list[tuple[int, int]]) -> int:
        # each gap between the intervals, but a gap holding a wait counts only from the end of its last wait
        return sum(b[0] - max([a[1]] + [we for ws, we in waits if a[1] <= ws and we <= b[0]])
                   for a, b in zip(union, union[1:]))

    out = {}
    for device, d in by_device.items():
        all_u, compute_u = _union(d["all"]), _union(d["compute"])
        out[device] = {
            "busy_ns": _length(all_u),
            "compute_busy_ns": _length(compute_u),
            "idle_gaps": len(all_u) - 1,
            "idle_ns": idle(all_u),
            "compute_gap_ns": idle(compute_u),
            "comm_ns": _length(_union(d["comm"])),
            "noncomm_ns": _length(_union(d["noncomm"])),
            "stall_ns": sum(max(0, (e - s) - _overlap(s, e, compute_u)) for s, e in d["copies"]),
        }
    return out


def _check(path: Path) -> None:
    facts = analysis(path)[0]  # the facts every test module reads, computed once per session
    since = steady_start(facts.rows("startup")) if "startup" in facts.results else None
    waits = _waits(path)
    with open_export(path) as export:
        oracle = _oracle(export, since, waits)
    util = {r["device_id"]: r for r in facts.rows("gpu_utilization")}
    assert set(util) == set(oracle)
    for device, want in oracle.items():
        u = util[device]
        assert u["busy_ns"] == want["busy_ns"], device
        assert u["compute_busy_ns"] == want["compute_busy_ns"], device
        assert u["window_ns"] - u["busy_ns"] == want["idle_ns"], device
        idle = [r for r in facts.rows("gpu_starvation") if r["device_id"] == device]
        assert idle, device
        bins = [r for r in facts.rows("utilization_timeline") if r["device_id"] == device]
        busy_in_bins = sum(r["busy_fraction"] * (r["bin_end_ns"] - r["bin_start_ns"]) for r in bins)
        assert busy_in_bins == pytest.approx(want["compute_busy_ns"], rel=1e-9, abs=len(bins))
        # every idle gap has exactly one cause: the causes add up to the idle time
        assert sum(u[c.column] for c in IDLE_CAUSES) == want["idle_ns"], device
        assert u["copy_only_ns"] == want["busy_ns"] - want["compute_busy_ns"], device
        if want["compute_busy_ns"]:
            gaps = next(r for r in facts.rows("kernel_gaps") if r["device_id"] == device and r["stream_id"] is None)
            assert gaps["total_gap_ns"] == want["compute_gap_ns"], device
            comm = next(r for r in facts.rows("communication") if r["device_id"] == device)
            assert comm["comm_ns"] == want["comm_ns"], device
            assert comm["compute_ns"] == want["noncomm_ns"], device
            assert comm["exposed_comm_ns"] == want["compute_busy_ns"] - want["noncomm_ns"], device
    stalls = defaultdict(int)
    for r in facts.rows("transfer_overview"):
        stalls[r["device_id"]] += r["stall_ns"] or 0
    for device, want in oracle.items():
        assert stalls.get(device, 0) == want["stall_ns"], device


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_single_sort_facts_match_interval_merging_on_scenarios(name):
    _check(Path(scenario_analysis(name)[1].profile.path))


@pytest.mark.real_exports
@pytest.mark.parametrize("path", REAL_EXPORTS, ids=lambda p: p.name.split("__")[0])
def test_single_sort_facts_match_interval_merging_on_real_exports(path):
    _check(path)
