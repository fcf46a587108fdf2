"""Every idle gap gets one cause from what the issuing host thread did, and every format shows them all."""

from __future__ import annotations

import json

import pytest

from conftest import scenario_analysis, slow_but
from nsys_diagnose.reports.render import render
from nsys_diagnose.base.vocabulary import IDLE_CAUSES, WINDOW_PARTS


def _idle(name: str) -> dict[str, float]:
    facts, _ = scenario_analysis(name)
    gpu = facts.rows("gpu_utilization")[0]
    total = gpu["idle_ns"]
    return {c.key: gpu[c.column] / total for c in IDLE_CAUSES}


@pytest.mark.parametrize("scenario, cause, share", slow_but([
    ("eager_decode", "launch", 0.95),        # the host is inside or between launch calls, a few µs each
    ("sync_storm", "sync", 0.9),             # a device sync after every kernel, next launch right after it
    ("alloc_churn", "allocation", 0.9),      # cudaMalloc / cudaFree in every iteration
    ("graph_host_gaps", "host", 0.95),       # milliseconds of scheduling between CUDA-graph steps
    ("tiny_kernels_queued", "gpu-side", 0.9),  # the host is ahead; 2 µs gaps between 3 µs kernels
    ("uvm_migration_storm", "uvm", 0.5),
], "eager_decode"))
def test_each_scenario_idles_for_the_reason_it_was_built_for(scenario, cause, share):
    idle = _idle(scenario)
    assert idle[cause] >= share, idle


@pytest.mark.slow
def test_the_window_parts_add_up_to_the_window():
    for name in ("eager_decode", "pageable_copies", "graph_host_gaps", "hidden_copies"):
        facts, report = scenario_analysis(name)
        for gpu, window in zip(facts.rows("gpu_utilization"), report.window):
            assert sum(p.ns for p in window.parts) == gpu["window_ns"]
            assert [p.key for p in window.parts] == [p.key for p in WINDOW_PARTS]


def test_gpu_utilisation_counts_kernels_only_and_copies_get_their_own_share():
    facts, report = scenario_analysis("pageable_copies")
    gpu = facts.rows("gpu_utilization")[0]
    assert gpu["utilization"] < 0.02 and gpu["copy_only_fraction"] > 0.9
    metrics = {m.key: m.value for m in report.key_metrics}
    assert metrics["gpu_utilization"] < 0.02 and metrics["copy_only_fraction"] > 0.9
    assert metrics["gpu_active_fraction"] > 0.9


def test_host_work_is_named_by_its_nvtx_ranges_and_os_calls():
    facts, _ = scenario_analysis("graph_host_gaps")
    row = facts.rows("host_idle")[0]
    assert [r["name"] for r in row["top_ranges"]] == ["schedule", "process_outputs"]
    assert row["top_os_calls"][0]["name"] == "poll" and 0.1 < row["os_call_share"] < 0.5
    assert row["graph_share"] == 1.0


def test_gaps_that_end_in_the_programs_own_prefetches_while_it_prints_are_host_work_not_page_faults():
    facts, report = scenario_analysis("uvm_prefetch_host_print")
    idle = _idle("uvm_prefetch_host_print")
    assert idle["host"] >= 0.9 and idle["uvm"] == 0, idle
    assert report.verdict.primary == "host-bound" and report.verdict.rule == "host-bound"
    row = facts.rows("host_idle")[0]
    assert row["top_functions"][0]["module"].endswith("libc.so.6")
    assert {f["name"] for f in row["top_functions"]} <= {"__printf_fp_l", "_IO_vfprintf", "__mpn_divrem", "hack_digit"}


def test_a_sync_followed_by_long_host_work_is_host_work():
    # graph_host_gaps synchronises once per step, then schedules for milliseconds: the sync is not the cause
    idle = _idle("graph_host_gaps")
    assert idle["sync"] < 0.01


@pytest.mark.parametrize("fmt", ["terminal", "md", "html", "json"])
def test_every_format_shows_every_part_of_the_window(fmt):
    _, report = scenario_analysis("tiny_kernels_queued")
    text = render(report, fmt)
    if fmt == "json":
        parts = json.loads(text)["window"][0]["parts"]
        assert [p["key"] for p in parts] == [p.key for p in WINDOW_PARTS]
        return
    labels = [p.short for p in WINDOW_PARTS] if fmt == "terminal" else [p.label for p in WINDOW_PARTS]
    for label in labels:
        assert label in text, (fmt, label)


def _overlap_oracle(calls, gap_start, gap_end):
    """Time of [gap_start, gap_end] the thread spent in calls, by class, the slow obvious way: walk the calls in
    (start, end, class) order; each counts from the latest return of the calls before it (so nested or repeated
    calls never count twice) to its own return."""
    spent = {"launch": 0, "sync": 0, "allocation": 0}
    covered = None
    for start, end, api_class in sorted(calls):
        own_start = start if covered is None else max(start, covered)
        covered = end if covered is None else max(covered, end)
        spent[api_class] += max(min(end, gap_end) - max(own_start, gap_start), 0)
    return spent


def _no_migrations_or_samples(con) -> None:
    """The canonical views _idle_gaps reads for gaps that end in a migration, empty."""
    con.execute("CREATE TABLE memcpys (device_id INTEGER, start_ns BIGINT, is_uvm BOOLEAN, migration_cause INTEGER)")
    con.execute("CREATE TABLE cpu_samples (ts_ns BIGINT, global_tid BIGINT, module VARCHAR, kernel_mode BOOLEAN)")


@pytest.mark.parametrize("seed", range(6))
def test_time_in_calls_during_each_gap_matches_a_brute_force_count_with_nested_and_repeated_calls(seed):
    """The per-gap split of the issuing thread's time (_idle_gaps) is computed by a bucketed join for speed; on
    random calls, including calls nested in others, exact repeats and calls longer than many buckets, it must
    equal the obvious computation."""
    import random

    import duckdb

    from nsys_diagnose.facts.loading import load_facts
    from nsys_diagnose.facts.catalog import render_sql

    rng = random.Random(seed)
    classes = ["launch", "sync", "allocation"]
    con = duckdb.connect()
    con.execute("CREATE TABLE api_calls (global_tid BIGINT, start_ns BIGINT, end_ns BIGINT, name_id BIGINT)")
    con.execute("CREATE VIEW _api_calls_by_id AS SELECT * FROM api_calls")  # as the runner defines it
    con.execute("CREATE TABLE _api_classes AS SELECT * FROM (VALUES (0, 'launch'), (1, 'sync'), (2, 'allocation')) "
                "t(name_id, api_class)")
    calls: dict[int, list[tuple[int, int, str]]] = {1: [], 2: []}
    for tid in calls:
        t = 0
        for _ in range(rng.randint(20, 120)):
            t += rng.randint(0, 3_000)
            start, end = t, t + rng.choice([0, rng.randint(1, 2_000), rng.randint(1, 40_000)])
            kind = rng.randrange(3)
            picked = [(start, end, kind)]
            if rng.random() < 0.2:   # a driver call inside it, of another class
                inner = rng.randint(start, end)
                picked.append((inner, rng.randint(inner, end + 3_000), rng.randrange(3)))
            if rng.random() < 0.1:   # the very same interval twice
                picked.append((start, end, rng.randrange(3)))
            for s, e, k in picked:
                calls[tid].append((s, e, classes[k]))
                con.execute("INSERT INTO api_calls VALUES (?, ?, ?, ?)", [tid, s, e, k])
            t = max(t, end) if rng.random() < 0.7 else t
    span = max(e for c in calls.values() for _, e, _ in c)
    _no_migrations_or_samples(con)
    con.execute("CREATE TABLE _timeline (device_id INTEGER, start_ns BIGINT, prev_end_ns BIGINT, is_graph BOOLEAN, "
                "is_compute BOOLEAN, is_memset BOOLEAN, is_uvm BOOLEAN, pid BIGINT, global_tid BIGINT, "
                "api_start_ns BIGINT, api_end_ns BIGINT, follows_sync BOOLEAN, sync_return_ns BIGINT, phase VARCHAR)")
    gaps = []
    for device in (0, 1):
        t = 0
        while t < span:
            gap_start = t + rng.randint(0, 2_000)
            gap_end = gap_start + rng.choice([rng.randint(1, 500), rng.randint(1, 60_000)])
            tid = rng.choice([1, 2])
            gaps.append((device, gap_start, gap_end, tid))
            con.execute("INSERT INTO _timeline VALUES "
                        "(?, ?, ?, false, true, false, false, 1, ?, ?, ?, false, NULL, NULL)",
                        [device, gap_end, gap_start, tid, gap_start - 10, gap_end - 5])
            t = gap_end + rng.randint(1, 1_000)
    facts = load_facts(None)
    query = render_sql(facts["_idle_gaps"])
    got = {(r[0], r[1]): r[2:] for r in con.execute(
        f"SELECT device_id, gap_end_ns, sync_ns, allocation_ns, launch_ns, host_ns FROM ({query})").fetchall()}
    assert len(got) == len(gaps)
    for device, gap_start, gap_end, tid in gaps:
        spent = _overlap_oracle(calls[tid], gap_start, gap_end)
        expected = (spent["sync"], spent["allocation"], spent["launch"], gap_end - gap_start - sum(spent.values()))
        assert got[(device, gap_end)] == expected, (seed, device, gap_start, gap_end, tid)


def test_a_burst_of_calls_before_long_gaps_stays_cheap_and_exact():
    """A thread that issued all its work in a few microseconds while the GPU then idled through a hundred seconds
    of gaps: the time buckets are sized over calls and gaps together, so each gap falls into a few of them (sized
    over the calls alone, every gap would be listed in a hundred million)."""
    import duckdb

    from nsys_diagnose.facts.loading import load_facts
    from nsys_diagnose.facts.catalog import render_sql

    con = duckdb.connect()
    con.execute("CREATE TABLE _api_classes AS SELECT 0 AS name_id, 'launch' AS api_class")
    con.execute("CREATE TABLE api_calls AS SELECT 1::BIGINT AS global_tid, range * 1000 AS start_ns, "
                "range * 1000 + 900 AS end_ns, 0::BIGINT AS name_id FROM range(10)")
    con.execute("CREATE VIEW _api_calls_by_id AS SELECT * FROM api_calls")  # as the runner defines it
    _no_migrations_or_samples(con)
    con.execute("CREATE TABLE _timeline AS SELECT 0 AS device_id, (range + 1) * 100_000_000 AS start_ns, "
                "range * 100_000_000 + 500 AS prev_end_ns, false AS is_graph, true AS is_compute, false AS is_memset, "
                "false AS is_uvm, 1::BIGINT AS pid, 1::BIGINT AS global_tid, 0::BIGINT AS api_start_ns, "
                "9_900::BIGINT AS api_end_ns, false AS follows_sync, NULL::BIGINT AS sync_return_ns, "
                "NULL::VARCHAR AS phase FROM range(1000)")
    rows = con.execute(f"SELECT gap_start_ns, launch_ns, host_ns FROM ({render_sql(load_facts(None)['_idle_gaps'])}) "
                       "ORDER BY gap_start_ns").fetchall()
    assert len(rows) == 1000
    calls = [(i * 1000, i * 1000 + 900, "launch") for i in range(10)]
    for gap_start, launch_ns, host_ns in rows:
        gap_end = gap_start - 500 + 100_000_000
        assert launch_ns == _overlap_oracle(calls, gap_start, gap_end)["launch"]
        assert launch_ns + host_ns == gap_end - gap_start
