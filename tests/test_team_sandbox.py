"""Team SQL is semi-trusted: it runs where no file-reading function exists (a DuckDB instance without the SQLite
extension, external access off, configuration locked) and within bounds of time, memory, rows and text. What the
run would refuse, `rules check` refuses first. Whatever a team fact returns, the report is written."""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from nsys_diagnose.facts import compute as factrun
from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.diagnosis.config import Config
from nsys_diagnose.base.errors import DiagnoseError

from cli_in_process import run_cli

pytestmark = pytest.mark.slow(reason="team SQL pushed to its limits (time, memory, rows, text, files), a diagnosis "
                                     "each")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"
SECRET = "TOP-SECRET-db-password-hunter2"

RULE = """\
id: acme/leak
title: A team rule over a team fact
category: capture
severity: warning
fact: team_fact
when:
  - device_id >= 0
message: "{{ row }}"
why: Because.
remediation: [Nothing.]
"""


def _pack(tmp_path: Path, select: str, columns: str = "device_id") -> Path:
    d = tmp_path / "pack"
    d.mkdir(exist_ok=True)
    (d / "leak.yaml").write_text(RULE)
    header = "".join(f"-- @column {c} Whatever.\n" for c in columns.split())
    (d / "team_fact.sql").write_text(f"-- @fact team_fact\n-- @doc A team fact.\n{header}{select}\n")
    return d


def _run(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own: for the bounds on memory, whose use is measured or could hurt this one."""
    return subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Private files of every kind a table function could read: a credentials database, text, CSV, JSON, Parquet."""
    d = tmp_path_factory.mktemp("secrets")
    with sqlite3.connect(d / "credentials.sqlite") as con:
        con.execute("CREATE TABLE t (device_id INTEGER, secret TEXT)")
        con.execute("INSERT INTO t VALUES (0, ?)", (SECRET,))
    (d / "secret.txt").write_text(SECRET)
    (d / "secret.csv").write_text(f"device_id,secret\n0,{SECRET}\n")
    (d / "secret.json").write_text(json.dumps([{"device_id": 0, "secret": SECRET}]))
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 0 AS device_id, '{SECRET}' AS secret) TO '{d / 'secret.parquet'}' (FORMAT parquet)")
    con.close()
    for f in d.iterdir():
        f.chmod(0o600)
    return d


ESCAPES = {
    "sqlite_scan": "SELECT device_id, secret FROM sqlite_scan('{d}/credentials.sqlite', 't')",
    "sqlite_attach": "SELECT 0 AS device_id, * FROM sqlite_attach('{d}/credentials.sqlite')",
    "read_text": "SELECT 0 AS device_id, content FROM read_text('{d}/secret.txt')",
    "read_blob": "SELECT 0 AS device_id, content FROM read_blob('{d}/secret.txt')",
    "read_csv": "SELECT * FROM read_csv('{d}/secret.csv')",
    "read_csv_auto": "SELECT * FROM read_csv_auto('{d}/secret.csv')",
    "read_json": "SELECT * FROM read_json('{d}/secret.json')",
    "read_json_auto": "SELECT * FROM read_json_auto('{d}/secret.json')",
    "read_parquet": "SELECT * FROM read_parquet('{d}/secret.parquet')",
    "glob": "SELECT 0 AS device_id, file FROM glob('{d}/*')",
    "query": "SELECT * FROM query('SELECT 0 AS device_id, content FROM read_text(''{d}/secret.txt'')')",
    "query_table": "SELECT * FROM query_table('{d}/secret.csv')",
    "csv by name": "SELECT * FROM '{d}/secret.csv'",
    "parquet by name": "SELECT * FROM '{d}/secret.parquet'",
    "json by name": "SELECT * FROM '{d}/secret.json'",
    "sqlite by name": "SELECT * FROM '{d}/credentials.sqlite'",
}


@pytest.mark.parametrize("what", sorted(ESCAPES))
def test_team_sql_reads_no_file(tmp_path, secrets_dir, what):
    sql = ESCAPES[what].format(d=secrets_dir)
    pack = _pack(tmp_path, sql, "device_id secret")
    done = run_cli(EXAMPLE, "--rule-dir", pack, "--no-cache", "-f", "json")
    assert SECRET not in done.stdout + done.stderr
    assert done.returncode == 2, done.stdout[:500]
    assert done.stderr.startswith("diagnose: error: ") and done.stderr.count("\n") == 1
    assert "team_fact" in done.stderr and "Traceback" not in done.stderr
    check = run_cli("rules", "check", pack)  # refused before any profile is read
    assert check.returncode == 2, check.stdout
    assert "team_fact" in check.stdout and SECRET not in check.stdout + check.stderr


def test_rules_check_accepts_a_sound_team_fact(tmp_path):
    pack = _pack(tmp_path, "SELECT device_id, count(*) AS kernel_count FROM kernels GROUP BY device_id",
                 "device_id kernel_count")
    check = run_cli("rules", "check", pack)
    assert check.returncode == 0, check.stdout + check.stderr


def test_rules_check_catches_a_wrong_column(tmp_path):
    pack = _pack(tmp_path, "SELECT device_idd AS device_id FROM kernels")
    check = run_cli("rules", "check", pack)
    assert check.returncode == 2 and "device_idd" in check.stdout


def test_a_team_fact_returning_millions_of_rows_is_refused(tmp_path):
    pack = _pack(tmp_path, "SELECT range AS device_id FROM range(20000000)")
    started = time.monotonic()
    done = _run(EXAMPLE, "--rule-dir", pack, "--no-cache", "-q")
    assert done.returncode == 2, done.stdout[:300]
    assert "returns 20,000,000 rows" in done.stderr and "team_fact" in done.stderr
    assert time.monotonic() - started < 60
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1_500_000  # KiB: never pulled into Python


def test_a_team_fact_that_exhausts_memory_is_one_sentence(tmp_path):
    """A recursive CTE that doubles a string each step: DuckDB's memory limit stops it."""
    pack = _pack(tmp_path, "WITH RECURSIVE r(n, s) AS (SELECT 0, 'x' UNION ALL SELECT n + 1, s || s FROM r "
                           "WHERE n < 40) SELECT max(n) AS device_id FROM r")
    done = _run(EXAMPLE, "--rule-dir", pack, "--no-cache", "-q", timeout=120)
    assert done.returncode == 2, done.stdout[:300]
    assert done.stderr.count("\n") == 1 and "team_fact" in done.stderr and "Traceback" not in done.stderr
    assert "memory" in done.stderr


def test_a_team_fact_that_runs_forever_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(factrun, "TEAM_LIMITS", factrun.TeamLimits(seconds=2.0))
    pack = _pack(tmp_path, "WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM r) "
                           "SELECT max(n) AS device_id FROM r")
    started = time.monotonic()
    with pytest.raises(DiagnoseError, match=r"team fact 'team_fact' ran longer than 2 s"):
        diagnose(EXAMPLE, Config(rule_dirs=[pack]), cache=False)
    assert time.monotonic() - started < 30


def test_a_team_fact_with_huge_text_is_refused(tmp_path):
    pack = _pack(tmp_path, "SELECT 0 AS device_id, repeat('x', 1000000) AS note", "device_id note")
    done = run_cli(EXAMPLE, "--rule-dir", pack, "--no-cache", "-q")
    assert done.returncode == 2 and "text value of 1,000,000 bytes" in done.stderr


def test_any_value_a_team_fact_returns_reaches_the_reports(tmp_path):
    """BLOBs, decimals, dates, intervals, UUIDs, lists and structs: the JSON report is written, not a traceback."""
    pack = _pack(tmp_path, "SELECT 0 AS device_id, '\\xAA\\x00abc'::BLOB AS raw, 1.25::DECIMAL(9, 2) AS price, "
                           "DATE '2026-11-30' AS day, INTERVAL 90 SECOND AS wait, "
                           "'3d8e1d4f-8d8a-4c1e-9f4e-6f2b2a1b0c9d'::UUID AS id, [1, 2] AS xs, {'a': 1} AS st",
                 "device_id raw price day wait id xs st")
    done = run_cli(EXAMPLE, "--rule-dir", pack, "--no-cache", "-f", "json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["facts"]["team_fact"]
    assert row == {"device_id": 0, "raw": "\\xAA\\x00abc", "price": 1.25, "day": "2026-11-30", "wait": 90.0,
                   "id": "3d8e1d4f-8d8a-4c1e-9f4e-6f2b2a1b0c9d", "xs": [1, 2], "st": {"a": 1}}
    for fmt in ("md", "html", "terminal"):
        assert run_cli(EXAMPLE, "--rule-dir", pack, "--no-cache", "-f", fmt).returncode == 0


# What team SQL could read besides the canonical views and the facts: DuckDB's settings and catalog (the cache's
# path, the temp and secret directories), the internal state of the cache (its seal and fingerprint), and the same
# through pragmas, the PostgreSQL catalog or another query run from a string.
STATE_READS = {
    "canon._state": ("SELECT 0 AS device_id, value AS note FROM canon._state", "the table canon._state"),
    "_state": ("SELECT 0 AS device_id, value AS note FROM _state", "'_state', which is neither"),
    "main.kernels": ("SELECT device_id, name AS note FROM main.kernels", "the table main.kernels"),
    "duckdb_settings()": ("SELECT 0 AS device_id, value AS note FROM duckdb_settings()",
                          "the table function duckdb_settings()"),
    "duckdb_databases()": ("SELECT 0 AS device_id, path AS note FROM duckdb_databases()",
                           "the table function duckdb_databases()"),
    "duckdb_settings in a subquery": ("SELECT device_id, (SELECT max(value) FROM duckdb_settings()) AS note "
                                      "FROM devices", "the table function duckdb_settings()"),
    "duckdb_tables view": ("SELECT 0 AS device_id, sql AS note FROM duckdb_tables", "'duckdb_tables'"),
    "current_setting": ("SELECT 0 AS device_id, current_setting('temp_directory') AS note",
                        "the function current_setting()"),
    "pg_catalog current_database": ("SELECT 0 AS device_id, pg_catalog.current_database() AS note",
                                    "the function current_database()"),
    "information_schema": ("SELECT 0 AS device_id, table_name AS note FROM information_schema.tables",
                           "the table information_schema.tables"),
    "sqlite_master": ("SELECT 0 AS device_id, sql AS note FROM sqlite_master", "'sqlite_master'"),
    "pragma": ("PRAGMA database_list", "stopped by the sandbox"),
    "pragma_ table function": ("SELECT 0 AS device_id, file AS note FROM pragma_database_list()",
                               "the table function pragma_database_list()"),
    "query() of the state": ("SELECT * FROM query('SELECT 0 AS device_id, value AS note FROM canon._state')",
                             "the table function query()"),
    "DESCRIBE": ("SELECT 0 AS device_id, column_name AS note FROM (DESCRIBE kernels)", "DESCRIBE, SHOW or SUMMARIZE"),
    "a CTE in a subquery is not in scope outside": (
        "SELECT device_id, (WITH s AS (SELECT 1) SELECT 'x' FROM s) AS note FROM s", "'s', which is neither"),
}


@pytest.mark.parametrize("what", sorted(STATE_READS))
def test_team_sql_reads_no_settings_catalog_or_internal_state(tmp_path, what):
    sql, says = STATE_READS[what]
    pack = _pack(tmp_path, sql, "device_id note")
    check = run_cli("rules", "check", pack)
    assert check.returncode == 2, check.stdout
    (problem,) = [line for line in check.stdout.splitlines() if "team_fact" in line]
    assert "was stopped by the sandbox" in problem and says in problem, problem
    assert "team SQL may read only the canonical views (kernels," in problem  # what is allowed
    done = run_cli(EXAMPLE, "--rule-dir", pack, "--no-cache", "-f", "json")
    assert done.returncode == 2, done.stdout[:500]
    assert done.stderr.startswith("diagnose: error: ") and done.stderr.count("\n") == 1
    assert "was stopped by the sandbox" in done.stderr and says in done.stderr and "(needed by rule acme/leak)" in \
        done.stderr
    for secret in ("fingerprint", "seal", "temp_directory =", "secret_directory", str(Path.home() / ".cache")):
        assert secret not in done.stdout + check.stdout.replace(str(pack), "")


def test_the_sandbox_allows_what_team_facts_need(tmp_path):
    """CTEs (recursive too), the facts, the runner's macros, range and unnest: no false refusal."""
    sql = ("-- @needs summary\n"
           "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3), "
           "k AS (SELECT device_id, count(*) AS c FROM kernels GROUP BY device_id) "
           "SELECT k.device_id, op_class_of('gemm') || phase_of('decode') || string_agg(r.range::VARCHAR, ',') "
           "|| max(u.x) AS note FROM k, range(2) r, n, summary, unnest([1]) u(x) "
           "GROUP BY k.device_id")
    pack = _pack(tmp_path, sql, "device_id note")
    check = run_cli("rules", "check", pack)
    assert check.returncode == 0, check.stdout


def test_every_bundled_fact_would_pass_the_team_sandbox():
    """The guard refuses nothing the bundled facts (the model for team facts) read."""
    from nsys_diagnose.facts.loading import load_facts
    from nsys_diagnose.facts.team_sql import team_sql_problem

    facts = load_facts()
    assert [p for f in facts.values() if (p := team_sql_problem(f, facts))] == []


@pytest.mark.parametrize("statement, found", [("INSTALL httpfs", "INSTALL"), ("FORCE INSTALL httpfs", "FORCE INSTALL"),
                                              ("LOAD httpfs", "LOAD"), ("ATTACH 'x.db'", "ATTACH")])
def test_a_statement_that_is_no_select_is_named_as_written(tmp_path, statement, found):
    pack = _pack(tmp_path, statement)
    check = run_cli("rules", "check", pack)
    assert check.returncode == 2
    assert f"must be a single SELECT query over the canonical views and facts (found {found})" in check.stdout
