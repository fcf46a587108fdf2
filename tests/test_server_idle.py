"""A server waiting for requests: the quiet stretches (no GPU work, no CUDA call, no engine step) that are long
compared with the typical step, or spent by the engine thread in an OS wait, are found, reported, and left out of
every judged window, so the verdict is the one of the bursts of work; host work between steps stays host work."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.catalog import with_needs
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.fixtures.generator import SCENARIOS, generate
from nsys_diagnose.reading.export import open_export

from conftest import analysis, scenario_analysis


def test_bursts_between_long_waits_get_the_verdict_of_the_bursts() -> None:
    facts, report = scenario_analysis("idle_server_bursts")
    idle = facts.first("server_idle")
    assert idle["stretch_count"] == 4  # between the 5 bursts; the waits before and after lie outside the trace
    assert 0.9 < idle["idle_fraction"] < 1.0
    assert all(s >= 1_000_000_000 for s in (idle["longest_ns"], idle["idle_ns"] / 4))
    gpu = facts.first("gpu_utilization")
    # the window is the bursts' work only: ~5 x 50 ms, not the ~7.7 s from the first kernel to the last
    assert gpu["excluded_ns"] == pytest.approx(idle["idle_ns"], rel=0.01)
    assert 200e6 < gpu["window_ns"] < 320e6
    assert gpu["busy_ns"] + gpu["idle_ns"] == gpu["window_ns"]
    assert 0.3 < gpu["utilization"] < 0.5
    # hundreds of typical steps long: recognised by length alone, without any OS-runtime trace
    assert (idle["long_count"], idle["os_wait_count"], idle["off_cpu_count"]) == (4, 0, 0)
    assert idle["step_ns"] == pytest.approx(4.2e6, rel=0.1) and idle["long_min_ns"] == 20 * idle["step_ns"]
    assert report.verdict.rule == "launch-bound"
    assert "Waiting for requests 97 % of the capture (4 quiet stretches" in report.verdict.headline
    fired = {f.rule for f in report.findings}
    assert "server-idle" in fired and "gpu-starvation" not in fired
    assert facts.first("launch_overhead")["overhead_ratio"] == pytest.approx(0.63, abs=0.08)
    assert facts.first("gpu_starvation")["long_gap_count"] == 0


def _with_calls(tmp_path: Path, name: str, every_ns: int) -> dict:
    """server_idle of idle_server_bursts with a CUDA call named `name` every `every_ns` inside its first wait."""
    path = tmp_path / f"{name}_{every_ns}.sqlite"
    generate("idle_server_bursts", path)
    con = sqlite3.connect(path)
    with con:
        calls = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start").fetchall()
        last_end = calls[0][1]
        for start, end in calls[1:]:
            if start - last_end > 1_000_000_000:
                break
            last_end = max(last_end, end)
        lo, hi = last_end, start  # the first wait: from the end of the first burst to the start of the second
        name_id = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
        con.execute("INSERT INTO StringIds VALUES (?, ?)", (name_id, name))
        template = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1").fetchone()
        for i, t in enumerate(range(lo + every_ns, hi - 10_000, every_ns)):
            row = list(template)
            row[0], row[1], row[4], row[5] = t, t + 2_000, 10_000_000 + i, name_id
            con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({', '.join('?' * len(row))})", row)
    con.close()
    return analysis(path)[0].first("server_idle")


@pytest.mark.slow
def test_polling_does_not_end_a_wait_but_cuda_work_does(tmp_path: Path) -> None:
    untouched = scenario_analysis("idle_server_bursts")[0].first("server_idle")
    polled = _with_calls(tmp_path, "cudaEventQuery_v3020", every_ns=10_000_000)
    # an idle engine polling an event every 10 ms is still waiting for requests
    assert (polled["stretch_count"], polled["idle_ns"]) == (untouched["stretch_count"], untouched["idle_ns"])
    working = _with_calls(tmp_path, "cudaMalloc_v3020", every_ns=50_000_000)
    # a cudaMalloc every 50 ms (12 typical steps, below the 20 that make a wait) is work: the first wait is gone
    assert working["stretch_count"] == untouched["stretch_count"] - 1
    assert untouched["idle_ns"] - working["idle_ns"] >= 1_500_000_000
    sparse = _with_calls(tmp_path, "cudaMalloc_v3020", every_ns=700_000_000)
    # one every 0.7 s cuts the first wait (1.5-3 s) into pieces of ~170 typical steps: each is still a wait, and
    # only a remnant after the last call, shorter than 20 typical steps, goes back into the judged window
    assert sparse["stretch_count"] > untouched["stretch_count"]
    assert untouched["idle_ns"] - sparse["idle_ns"] < untouched["long_min_ns"]


def _server_idle(path: Path, **params: float) -> dict:
    """server_idle of an export, computed with these fact params and only the facts it needs."""
    facts = load_facts()
    needed = {name: facts[name] for name in with_needs(facts, ["server_idle"])}
    with open_export(path, cache=False) as export:
        return compute_facts(export, facts=needed, params=params).first("server_idle")


@pytest.mark.slow
def test_bursts_between_short_quiet_stretches_get_the_verdict_of_the_bursts() -> None:
    facts, report = scenario_analysis("server_bursts_short_waits")
    truth = SCENARIOS["server_bursts_short_waits"].truth
    idle = facts.first("server_idle")
    # 0.1-0.3 s, far below the old 1 s, but 20-70 typical steps of ~4.2 ms: waits by length, without any OS trace
    assert (idle["stretch_count"], idle["long_count"], idle["os_wait_count"]) == (truth["quiet_stretches"], 5, 0)
    lo, hi = truth["quiet_ns"]
    assert lo <= idle["idle_ns"] / idle["stretch_count"] <= hi + 1_000_000 and idle["longest_ns"] <= hi + 1_000_000
    assert truth["wait_share"][0] <= idle["idle_fraction"] <= truth["wait_share"][1]
    assert truth["step_ns"][0] <= idle["step_ns"] <= truth["step_ns"][1]
    # the judged window is the bursts' work: utilisation and the verdict are those of eager decode steps
    gpu = facts.first("gpu_utilization")
    assert gpu["excluded_ns"] == pytest.approx(idle["idle_ns"], rel=0.01)
    assert 0.3 < gpu["utilization"] < 0.5
    assert report.verdict.rule == "launch-bound"  # was host-bound at ~92 %, advice that could not help
    share = round(100 * idle["idle_fraction"])
    assert f"Waiting for requests {share} % of the capture (5 quiet stretches" in report.verdict.headline
    assert not any(f.rule == "host-bound" for f in report.findings)


@pytest.mark.slow
def test_bursts_between_stretches_spent_in_epoll_wait_get_the_verdict_of_the_bursts() -> None:
    facts, report = scenario_analysis("server_bursts_epoll")
    truth = SCENARIOS["server_bursts_epoll"].truth
    idle = facts.first("server_idle")
    # 20-70 ms is below 20 typical steps: only the engine thread's epoll_wait makes these stretches waits
    assert (idle["stretch_count"], idle["long_count"], idle["os_wait_count"]) == (truth["quiet_stretches"], 0, 6)
    assert idle["longest_ns"] < idle["long_min_ns"] and idle["wait_calls"] == "epoll_wait"
    assert truth["wait_share"][0] <= idle["idle_fraction"] <= truth["wait_share"][1]
    assert report.verdict.rule == "launch-bound"  # was host-bound at ~80 %
    share = round(100 * idle["idle_fraction"])
    assert (f"Waiting for requests {share} % of the capture (6 quiet stretches with no GPU work, no CUDA calls and "
            "no engine step; 6 with the issuing thread in epoll_wait)") in report.verdict.headline
    finding = next(f for f in report.findings if f.rule == "server-idle")
    assert "6 with the thread that issues the GPU work blocked in epoll_wait" in finding.message


def _without_osrt(tmp_path: Path, samples_every_ns: int | None = None, only_in_steps: bool = True,
                  scenario: str = "server_bursts_epoll") -> Path:
    """`scenario` without an OS-runtime trace; with samples_every_ns, CPU samples of the engine thread at that
    period, inside its step ranges only (off the CPU in the waits) or over the whole capture."""
    path = tmp_path / f"{scenario}_{samples_every_ns}_{only_in_steps}.sqlite"
    generate(scenario, path)
    with sqlite3.connect(path) as con:
        if con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'OSRT_API'").fetchone()[0]:
            con.execute("DELETE FROM OSRT_API")
        if samples_every_ns is not None:
            gtid = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1").fetchone()[0]
            steps = con.execute('SELECT start, "end" FROM NVTX_EVENTS WHERE "end" IS NOT NULL '
                                'ORDER BY start').fetchall()
            spans = steps if only_in_steps else [(steps[0][0], steps[-1][1])]
            times = [t for s, e in spans for t in range(s, e, samples_every_ns)]
            con.execute("CREATE TABLE COMPOSITE_EVENTS (id INTEGER NOT NULL PRIMARY KEY, start INTEGER NOT NULL, "
                        "cpu INTEGER, threadState INTEGER, globalTid INTEGER, cpuCycles INTEGER NOT NULL)")
            con.executemany("INSERT INTO COMPOSITE_EVENTS VALUES (?, ?, 3, 1, ?, 0)",
                            [(i, t, gtid) for i, t in enumerate(times, 1)])
    con.close()
    return path


@pytest.mark.slow
def test_a_short_stretch_needs_evidence_of_waiting(tmp_path: Path) -> None:
    # without the OS-runtime trace nothing says the thread waited: 20-70 ms stay in the judged window
    blind = _server_idle(_without_osrt(tmp_path))
    assert blind["stretch_count"] == 0
    # CPU samples of the engine thread every 1 ms in its steps and none in the stretches: it was off the CPU
    off_cpu = _server_idle(_without_osrt(tmp_path, 1_000_000))
    assert (off_cpu["stretch_count"], off_cpu["off_cpu_count"], off_cpu["os_wait_count"]) == (6, 6, 0)
    # sampled through the stretches as well, the thread was running: host work, not a wait
    on_cpu = _server_idle(_without_osrt(tmp_path, 1_000_000, only_in_steps=False))
    assert on_cpu["stretch_count"] == 0


@pytest.mark.slow
def test_a_long_stretch_with_the_thread_running_is_host_work(tmp_path: Path) -> None:
    # 0.1-0.3 s is 20-70 typical steps: a wait by length, and CPU samples only in the steps agree
    idle = _server_idle(_without_osrt(tmp_path, 1_000_000, scenario="server_bursts_short_waits"))
    assert (idle["stretch_count"], idle["long_count"] + idle["off_cpu_count"]) == (5, 5)
    # sampled every 1 ms through the stretches too, the engine thread was running: host work, however long
    busy = _server_idle(_without_osrt(tmp_path, 1_000_000, only_in_steps=False, scenario="server_bursts_short_waits"))
    assert busy["stretch_count"] == 0
    # from server_idle_min_ns on, a stretch always counts: the 1 s cap lowered to 0.2 s takes the longer ones back
    capped = _server_idle(_without_osrt(tmp_path, 1_000_000, only_in_steps=False, scenario="server_bursts_short_waits"),
                          server_idle_min_ns=200_000_000)
    assert 0 < capped["stretch_count"] == capped["long_count"] < 5 and capped["longest_ns"] >= 200_000_000


def test_host_work_between_steps_stays_host_bound() -> None:
    """graph_host_gaps: 2-5 ms of scheduling and detokenising after every 1.5 ms graph replay, a 0.5-1 ms poll()
    for new requests inside each; the engine is busy on the host, and following host-bound advice would help."""
    facts, report = scenario_analysis("graph_host_gaps")
    idle = facts.first("server_idle")
    assert idle["stretch_count"] == 0
    assert report.verdict.rule == "host-bound" and "Waiting" not in report.verdict.headline


def test_a_poll_between_steps_is_too_short_to_be_a_wait(tmp_path: Path) -> None:
    path = tmp_path / "graph_host_gaps.sqlite"
    generate("graph_host_gaps", path)
    # even if a 15 % share of poll() were enough, each pause is shorter than 3 typical steps (~15 ms)
    assert _server_idle(path, server_idle_wait_share=0.1)["stretch_count"] == 0
    # the length requirement is what keeps them host work: dropped, the polls would make 39 waits
    loose = _server_idle(path, server_idle_wait_share=0.1, server_idle_wait_steps=0, server_idle_wait_min_ns=1_000_000)
    assert (loose["stretch_count"], loose["os_wait_count"], loose["wait_calls"]) == (39, 39, "poll")


def test_the_html_window_says_it_leaves_the_quiet_stretches_out() -> None:
    """The per-GPU bar's window is first operation to last less the server's quiet stretches: the caption says so,
    or a 0.6 s window beside a 10 s stretch reads as a typo."""
    from nsys_diagnose.base.units import fmt_duration
    from nsys_diagnose.reports.render import render

    facts, report = scenario_analysis("idle_server_bursts")
    row = facts.rows("gpu_utilization")[0]
    assert row["excluded_ns"] > 0
    html = render(report, "html")
    assert f"less {fmt_duration(row['excluded_ns'])} of quiet stretches" in html
