"""Facts that do not need each other run side by side (engine/facts/parallel.py): the diagnosis is the same as
one fact at a time, a fact never starts before the facts it needs, and a failure or Ctrl-C stops every query."""

from __future__ import annotations

import _thread
import signal
import threading
import time
from pathlib import Path

import duckdb
import pytest

from conftest import rounded
from nsys_diagnose.facts.catalog import Fact, FactError
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts import parallel
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.facts.parallel import SIDE_BY_SIDE_MAX_OPERATIONS, run_facts, side_by_side
from nsys_diagnose.fixtures.generator import generate
from nsys_diagnose.reading.export import open_export

# Long enough that a query which is not interrupted cannot finish while the test waits.
ENDLESS = "SELECT count(*) FROM range(1000000000000) a WHERE a.range % 7 = 3"


def _fact(name: str, *needs: str) -> Fact:
    return Fact(name=name, sql="", path=f"{name}.sql", needs=list(needs))


def _all_rows(facts) -> dict:
    rows = {name: result.rows for name, result in facts.results.items()}
    for phase, scoped in facts.phases.items():
        rows.update({f"{phase}/{name}": result.rows for name, result in scoped.results.items()})
    # 12 significant digits: DuckDB's parallel sums may differ in the last bit from run to run, one fact at a
    # time or not.
    return rounded(rows, 12)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["eager_decode", "prefill_heavy_eager_decode", "multi_gpu_straggler"])
def test_facts_side_by_side_are_the_facts_one_at_a_time(scenario: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / f"{scenario}.sqlite"
    generate(scenario, path)
    fact_defs = load_facts()
    found = {}
    for workers in (1, 2):
        monkeypatch.setattr(parallel, "MAX_SIDE_BY_SIDE", workers)
        with open_export(path, threads=2) as export:
            found[workers] = compute_facts(export, facts=fact_defs)
    assert _all_rows(found[2]) == _all_rows(found[1])
    assert found[2].first("summary")["kernel_count"] > 0
    if scenario == "prefill_heavy_eager_decode":
        assert set(found[2].phases) == {"prefill", "decode"}  # the per-phase facts ran side by side too


def test_a_fact_starts_only_after_the_facts_it_needs_and_independent_ones_overlap() -> None:
    con = duckdb.connect()
    facts = [_fact("a"), _fact("b"), _fact("c", "a", "b"), _fact("d", "c")]
    both_running = threading.Barrier(2, timeout=10)
    spans: dict[str, tuple[float, float]] = {}

    def work(cursor, fact: Fact) -> str:
        begin = time.monotonic()
        if fact.name in ("a", "b"):
            both_running.wait()  # breaks (and fails the test) unless a and b run at the same time
        value = cursor.execute("SELECT ?", [fact.name]).fetchone()[0]
        spans[fact.name] = (begin, time.monotonic())
        return value

    out = run_facts(con, facts, work, workers=2)
    assert out == {"a": "a", "b": "b", "c": "c", "d": "d"}
    assert spans["c"][0] >= max(spans["a"][1], spans["b"][1])
    assert spans["d"][0] >= spans["c"][1]


def test_the_first_failure_interrupts_the_query_running_beside_it() -> None:
    con = duckdb.connect()
    con.execute("SET threads = 2")
    started = threading.Event()

    def work(cursor, fact: Fact) -> None:
        if fact.name == "endless":
            started.set()
            cursor.execute(ENDLESS).fetchall()
        else:
            started.wait(10)
            time.sleep(0.2)  # the endless query is running by now
            raise FactError("broken.sql: fact 'broken' failed: no such column", "broken")

    begin = time.monotonic()
    with pytest.raises(FactError, match="no such column"):
        run_facts(con, [_fact("endless"), _fact("broken")], work, workers=2)
    assert time.monotonic() - begin < 10
    assert not [t for t in threading.enumerate() if t.name.startswith("fact")]


def test_ctrl_c_interrupts_every_query_and_leaves_no_worker() -> None:
    con = duckdb.connect()
    con.execute("SET threads = 2")
    running = threading.Barrier(3, timeout=10)

    def work(cursor, fact: Fact) -> None:
        running.wait()
        cursor.execute(ENDLESS).fetchall()

    def press_ctrl_c() -> None:
        running.wait()
        time.sleep(0.3)
        _thread.interrupt_main()

    # Python's own Ctrl-C handler for this test: importing the command line installs one that only records a
    # Ctrl-C during start-up, and whether another test imported it first must not decide what this test sees.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        presser = threading.Thread(target=press_ctrl_c)
        presser.start()
        begin = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            run_facts(con, [_fact("one"), _fact("two"), _fact("three", "one")], work, workers=2)
        presser.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - begin < 10
    assert not [t for t in threading.enumerate() if t.name.startswith("fact")]
    assert con.execute("SELECT 42").fetchone()[0] == 42  # the connection still works


def test_big_exports_and_single_threads_run_one_fact_at_a_time() -> None:
    assert side_by_side(2, 1_000) == 2
    assert side_by_side(8, 1_000) == 2
    assert side_by_side(1, 1_000) == 1
    assert side_by_side(2, SIDE_BY_SIDE_MAX_OPERATIONS) == 1


def test_duckdb_runs_one_thread_per_cpu_the_process_may_use() -> None:
    """A run pinned to fewer CPUs (taskset, a cpuset, a Slurm allocation) gets that many DuckDB threads: DuckDB's
    own default counts every CPU of the machine and would oversubscribe the ones the run has."""
    import os
    import subprocess
    import sys

    cpu = min(os.sched_getaffinity(0))
    code = ("import os; from nsys_diagnose.base.duck import offline_connection as c; "
            f"os.sched_setaffinity(0, {{{cpu}}}); "
            "print(c().execute(\"SELECT current_setting('threads')\").fetchone()[0], "
            "c(threads=3).execute(\"SELECT current_setting('threads')\").fetchone()[0])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "3"]  # an explicit count still wins
