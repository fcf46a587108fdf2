"""`diagnose --timings`: where one diagnosis spends its time, per stage and per fact (of the run and of each phase),
printed on standard error after the report, which it never changes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from cli_in_process import run_cli
from nsys_diagnose.fixtures.generator import generate
from nsys_diagnose.base.timings import Timings, render_timings

_LINE = re.compile(r"^(\S+)\s+(\S.*?)\s+(\d+\.\d{3})\s+(\d+\.\d%)?\s*([\d,]+|-)?\s*(\S+ ?[kMG]?B|-)?$")


def _table(err: str) -> dict[tuple[str, str], dict[str, str]]:
    """The timings table as {(scope, name): {wall, rows, spill}}."""
    out = {}
    for line in err.splitlines()[1:]:
        m = _LINE.match(line)
        if m:
            out[(m[1], m[2])] = {"wall": m[3], "rows": m[5], "spill": m[6]}
    return out


@pytest.fixture(scope="module")
def phased(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("timings") / "prefill_heavy_eager_decode.sqlite"
    generate("prefill_heavy_eager_decode", path)
    return path


@pytest.mark.slow
def test_timings_follow_the_report_and_leave_it_unchanged(phased: Path, tmp_path: Path) -> None:
    plain, timed = tmp_path / "plain.json", tmp_path / "timed.json"
    assert run_cli(phased, "-q", "--no-cache", "-o", plain).returncode == 0
    run = run_cli(phased, "-q", "--no-cache", "-o", timed, "--timings")
    assert run.returncode == 0 and run.stdout == ""
    assert plain.read_text(encoding="utf-8") == timed.read_text(encoding="utf-8")
    table = _table(run.stderr)
    for stage in ("load the rules and facts", "read the export", "compute the facts", "judge and build the report",
                  "render"):
        assert ("stage", stage) in table
    report = json.loads(timed.read_text(encoding="utf-8"))
    # Each fact of the run, with the rows it holds: the phases fact has one row per phase the report lists.
    assert table[("run", "phases")]["rows"] == f"{len(report['facts']['phases']):,}"
    assert ("run", "_idle_gaps") in table and ("run", "_timeline") in table
    # The per-phase facts under each phase the report judges, with the copy of the phase's rows.
    judged = set(report["phase_facts"])
    assert judged >= {"prefill", "decode"}
    for phase in judged:
        assert (phase, "gpu_utilization") in table and (phase, "(copy the phase's rows)") in table
        assert table[(phase, "gpu_utilization")]["rows"] == "1"
    assert run.stderr.rstrip().splitlines()[-1].startswith("total")


@pytest.mark.slow
def test_a_cached_rerun_shows_the_reused_facts(phased: Path, tmp_path: Path) -> None:
    args = (phased, "-q", "--cache-dir", tmp_path, "-o", tmp_path / "r.json", "--timings")
    assert run_cli(*args).returncode == 0
    again = run_cli(*args)
    assert again.returncode == 0
    table = _table(again.stderr)
    assert ("stage", "reuse the cached facts") in table
    assert not any(scope == "run" for scope, _ in table)  # no fact was computed again


def test_timings_list_each_stage_and_fact_after_the_report_on_standard_error(tmp_path: Path) -> None:
    """The happy path on a small export without phases; the phased case above also compares the report."""
    example = Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "eager_decode.sqlite"
    run = run_cli(example, "-q", "--no-cache", "-o", tmp_path / "r.json", "--timings")
    assert run.returncode == 0 and run.stdout == "" and (tmp_path / "r.json").is_file()
    table = _table(run.stderr)
    assert {("stage", "read the export"), ("stage", "compute the facts"), ("stage", "render")} <= set(table)
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert table[("run", "kernel_gaps")]["rows"] == f"{len(report['facts']['kernel_gaps']):,}"
    assert ("run", "_idle_gaps") in table
    assert not any(scope not in ("stage", "run") for scope, _ in table)  # no phases to judge
    assert run.stderr.rstrip().splitlines()[-1].startswith("total")


def test_timings_apply_to_one_profile(phased: Path, tmp_path: Path) -> None:
    run = run_cli(phased, phased, "-q", "--no-cache", "--timings")
    assert run.returncode == 2
    assert "--timings applies to one profile" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.slow
def test_every_fact_has_a_spill_value_when_facts_run_side_by_side(tmp_path: Path) -> None:
    """A small export computes its facts on parallel cursors that are closed after each batch of facts: the spill
    of every fact, of the run and of each phase, is still read (0 B is a value; "-" would mean it was not)."""
    example = Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "eager_decode.sqlite"
    run = run_cli(example, "-q", "--no-cache", "-o", tmp_path / "r.json", "--timings")
    assert run.returncode == 0, run.stderr
    facts = {key: row for key, row in _table(run.stderr).items() if key[0] != "stage"
             and not key[1].startswith("sum of")}
    assert len(facts) > 30
    assert [key for key, row in facts.items() if row["spill"] in (None, "-")] == []


@pytest.mark.slow
def test_spill_is_the_temporary_space_duckdb_used_while_the_fact_ran(tmp_path: Path) -> None:
    spill_dir = str(tmp_path / "spill")  # pytest's: removed with the session's other temporary files
    con = duckdb.connect(config={"memory_limit": "48MB", "temp_directory": spill_dir, "threads": 1})
    timings = Timings()
    timings.sample(con)
    try:
        with timings.fact(con, "run", "sort") as out:
            con.execute("CREATE TABLE s AS SELECT i, hash(i) AS h, 'row ' || i AS t FROM range(2000000) r(i) "
                        "ORDER BY h")
            out["rows"] = 2_000_000
        with timings.fact(con, "run", "count"):
            con.execute("SELECT count(*) FROM range(10)").fetchall()
    finally:
        timings.close()
        con.close()
    sort, count = timings.entries
    assert sort.spill_bytes and sort.spill_bytes > 1_000_000  # a sort of ~60 MB under a 48 MB limit spills
    assert count.spill_bytes is not None and count.spill_bytes <= sort.spill_bytes
    text = render_timings(timings, total_s=sort.wall_s + count.wall_s)
    assert "2,000,000" in text and "MB" in text


class _FakeSpill:
    """A connection whose cursor reports `bytes` of DuckDB temporary files, as duckdb_temporary_files() would."""

    def __init__(self) -> None:
        self.bytes = 0

    def cursor(self) -> _FakeSpill:
        return self

    def execute(self, _sql: str) -> _FakeSpill:
        return self

    def fetchone(self) -> tuple[int]:
        return (self.bytes,)

    def close(self) -> None:
        pass


def test_facts_side_by_side_that_end_in_the_other_order_keep_their_own_spill(monkeypatch) -> None:
    """Two facts run side by side (engine/facts/parallel.py) begin at the same spill, so their watches hold equal
    values; the second begun ends first, then the spill grows, then the first ends. Each fact must drop its own
    watch: the first is charged the spill that grew while it ran, and its end raises nothing (a 450 k-kernel export
    under a small memory limit crashed here with ValueError: list.remove(x): x not in list)."""
    monkeypatch.setattr("nsys_diagnose.base.timings.SPILL_SAMPLE_S", 3600)  # only the facts' own ends sample
    con = _FakeSpill()
    timings = Timings()
    timings.sample(con)
    try:
        first = timings.fact(con, "run", "first")
        second = timings.fact(con, "run", "second")
        first.__enter__()
        second.__enter__()
        second.__exit__(None, None, None)
        con.bytes = 5_000_000
        first.__exit__(None, None, None)
    finally:
        timings.close()
    spill = {t.name: t.spill_bytes for t in timings.entries}
    assert spill == {"second": 0, "first": 5_000_000}
