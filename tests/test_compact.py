"""The facts' in-memory tables are compressed once they grow (engine/facts/compact.py): they take a fraction of the
memory, answer exactly as before, and a checkpoint that cannot run now never stops the diagnosis."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_parallel_facts import _all_rows
from nsys_diagnose.base.duck import offline_connection
from nsys_diagnose.facts import compact as compact_module
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts import parallel
from nsys_diagnose.facts.compact import Compactor, table_bytes
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.fixtures.generator import generate
from nsys_diagnose.reading.export import open_export

# A timeline-like table: sorted start times, small device ids, flags, a phase label.
TIMELINE = ("CREATE TABLE t AS SELECT i % 2 AS device_id, 1000 * i AS start_ns, 1000 * i + 700 AS end_ns, "
            "i % 11 = 0 AS is_comm, CASE WHEN i % 16 = 0 THEN 'prefill' ELSE 'decode' END AS phase "
            "FROM range(1000000) r(i)")
PROBE = ("SELECT device_id, sum(end_ns - start_ns), count(*) FILTER (WHERE is_comm), count(DISTINCT phase) "
         "FROM t GROUP BY ALL ORDER BY 1")


def test_a_grown_table_is_compressed_and_answers_the_same() -> None:
    con = offline_connection()
    compact = Compactor(con, after_rows=1000)
    con.execute(TIMELINE)
    before, answer = table_bytes(con), con.execute(PROBE).fetchall()
    assert compact(con)
    assert table_bytes(con) < before / 4, (before, table_bytes(con))
    assert con.execute(PROBE).fetchall() == answer
    assert not compact(con)  # nothing written since: no second checkpoint


def test_tables_below_the_threshold_are_left_alone() -> None:
    con = offline_connection()
    compact = Compactor(con, after_rows=10_000_000)
    con.execute(TIMELINE)
    before = table_bytes(con)
    assert not compact(con)
    assert table_bytes(con) == before


def test_a_checkpoint_blocked_by_another_writer_is_skipped_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compact_module, "_RETRY_S", 0)
    con = offline_connection()
    compact = Compactor(con, after_rows=1000)
    con.execute(TIMELINE)
    other = con.cursor()
    other.execute("BEGIN")
    other.execute("CREATE TABLE u AS SELECT 1 AS x")
    assert not compact(con)
    other.execute("COMMIT")
    assert compact(con)  # the next fact compresses what is still uncompressed
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 1_000_000


def test_facts_over_compressed_tables_are_the_facts_over_uncompressed_ones(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "prefill_heavy_eager_decode.sqlite"
    generate("prefill_heavy_eager_decode", path)
    monkeypatch.setattr(parallel, "MAX_SIDE_BY_SIDE", 1)  # one fact at a time, as on a large capture
    fact_defs = load_facts()
    found = {}
    checkpoints = {}
    original = Compactor.__call__
    for after_rows in (0, 1 << 40):  # after every fact, or never
        monkeypatch.setattr(compact_module, "COMPACT_AFTER_ROWS", after_rows)
        calls: list[bool] = []

        def counting(self: Compactor, con: object) -> bool:
            did = original(self, con)
            calls.append(did)
            return did

        monkeypatch.setattr(Compactor, "__call__", counting)
        with open_export(path, threads=2) as export:
            found[after_rows] = compute_facts(export, facts=fact_defs)
        checkpoints[after_rows] = sum(calls)
    assert checkpoints[0] > 10 and checkpoints[1 << 40] == 0, checkpoints
    assert set(found[0].phases) == {"prefill", "decode"}  # the phases' copies were compressed too
    assert _all_rows(found[0]) == _all_rows(found[1 << 40])
