"""End to end: `diagnose facts list` and `diagnose facts show FACT PROFILE`, as a rule author runs them."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_in_process import run_cli

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"
PACK = REPO / "examples" / "team-rules"


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    # in the test process: tests/test_cli.py runs the command line end to end in a subprocess
    return run_cli(*args, cwd=cwd, drop_env=("NO_COLOR",))


def one_error(done: subprocess.CompletedProcess, *parts: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("diagnose: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    for part in parts:
        assert part in done.stderr


def show_json(*args: str | Path) -> dict:
    done = run("facts", "show", *args, "-f", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_list_shows_every_fact_with_its_doc_columns_params_and_kind():
    done = run("facts", "list")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    blocks = {block.split()[0]: block for block in out.strip().split("\n\n")}
    assert "(bundled)" in blocks["launch_overhead"] and "One row per GPU that ran kernels" in blocks["launch_overhead"]
    assert "columns: device_id, kernel_count" in blocks["launch_overhead"]
    assert "params:  gap_threshold_ns=10000" in blocks["kernel_gaps"]
    assert "(bundled; helper, materialized table)" in blocks["_timeline"]
    assert "(bundled; helper, view)" in blocks["_gpu_ops"]
    assert "cross-rank" in blocks["rank_balance"]
    assert all(len(line) <= 100 for line in out.splitlines())


@pytest.mark.slow
def test_list_includes_team_facts_and_speaks_json():
    done = run("facts", "list", "--rule-dir", PACK, "-f", "json")
    assert done.returncode == 0, done.stderr
    facts = {f["name"]: f for f in json.loads(done.stdout)}
    team = facts["acme_decode_steps"]
    assert team["source"] == "team" and team["path"].endswith("acme_decode_steps.sql") and not team["helper"]
    assert [c["name"] for c in team["columns"]][:2] == ["pid", "step_count"]
    assert facts["_timeline"]["helper"] and facts["kernel_gaps"]["params"] == {"gap_threshold_ns": 10000}
    assert {"column": "overhead_ratio", "test": "range", "args": ["0", "1"]} in facts["launch_overhead"]["checks"]
    before = run("facts", "--rule-dir", PACK, "list")  # the option also goes before the subcommand
    assert "acme_decode_steps  (team)" in before.stdout and str(PACK) in before.stdout


def test_show_prints_an_aligned_table():
    done = run("facts", "show", "launch_overhead", EXAMPLE)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["device_id", "kernel_count", "mean_kernel_ns", "mean_gap_ns", "median_gap_ns",
                                "total_gap_ns", "overhead_ratio", "launch_idle_ns", "launch_idle_share",
                                "launch_idle_fraction", "graph_share", "window_ns", "launch_gap_allocation_ns",
                                "launch_gap_allocation_share", "launch_gap_sync_ns", "launch_gap_sync_share"]
    assert lines[1].split()[:2] == ["0", "7325"]
    assert len(lines[0]) == len(lines[1])  # columns padded to one width
    assert lines[-1] == "(1 row)"


@pytest.mark.slow
def test_show_json_and_csv_carry_the_rows_diagnose_reports():
    report = json.loads(run(EXAMPLE, "-f", "json").stdout)
    data = show_json("kernel_gaps", EXAMPLE)
    assert data["fact"] == "kernel_gaps" and data["skipped"] is None
    assert data["rows"] == report["facts"]["kernel_gaps"] and data["row_count"] == len(data["rows"])
    done = run("facts", "show", "kernel_gaps", EXAMPLE, "-f", "csv")
    assert done.returncode == 0, done.stderr
    table = list(csv.DictReader(io.StringIO(done.stdout)))
    assert list(table[0]) == data["columns"]
    assert [int(r["gap_count"]) for r in table] == [r["gap_count"] for r in data["rows"]]
    assert table[0]["stream_id"] == "" and data["rows"][0]["stream_id"] is None  # NULL is an empty field


@pytest.mark.slow
def test_fact_params_come_from_set_and_config(tmp_path):
    default = show_json("kernel_gaps", EXAMPLE)["rows"][0]["gaps_over_threshold"]
    lower = show_json("kernel_gaps", EXAMPLE, "--set", "facts.gap_threshold_ns=1")["rows"][0]
    assert lower["gaps_over_threshold"] == lower["gap_count"] > default
    config = tmp_path / "team.yaml"
    config.write_text("facts: {gap_threshold_ns: 1}\n")
    assert show_json("kernel_gaps", EXAMPLE, "--config", config)["rows"][0] == lower
    (tmp_path / "diagnose.yaml").write_text("facts: {gap_threshold_ns: 1}\n")
    done = run("facts", "show", "kernel_gaps", EXAMPLE, "-f", "json", cwd=tmp_path)
    assert json.loads(done.stdout)["rows"][0] == lower


@pytest.mark.slow
def test_show_computes_team_facts_and_helpers(tmp_path):
    from nsys_diagnose.fixtures.generator import generate

    generate("prefill_decode_nvtx", tmp_path / "nvtx.sqlite")
    team = show_json("acme_decode_steps", tmp_path / "nvtx.sqlite", "--rule-dir", PACK)
    assert team["columns"][:2] == ["pid", "step_count"] and team["rows"][0]["step_count"] > 0
    helper = show_json("_gpu_ops", EXAMPLE, "--limit", "3")
    assert len(helper["rows"]) == 3 and helper["row_count"] > 7000
    table = run("facts", "show", "_gpu_ops", EXAMPLE, "--limit", "2")
    assert table.stdout.splitlines()[-1].startswith("(2 of ") and len(table.stdout.splitlines()) == 4


@pytest.mark.slow
def test_show_writes_to_a_file_but_never_over_its_input(tmp_path):
    target = tmp_path / "rows.csv"
    done = run("facts", "show", "summary", EXAMPLE, "-f", "csv", "-o", target)
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert target.read_text().startswith("used_devices,duration_ns,")
    copy = tmp_path / "run.sqlite"
    shutil.copy(EXAMPLE, copy)
    before = copy.read_bytes()
    one_error(run("facts", "show", "summary", copy, "-o", copy), "the input export")
    assert copy.read_bytes() == before


@pytest.mark.slow
def test_the_rows_of_a_cross_rank_fact_come_from_a_run(tmp_path):
    from nsys_diagnose.fixtures.runs import generate_run

    generate_run("multi_rank_straggler", tmp_path / "run")
    data = show_json("rank_balance", tmp_path / "run", "--no-cache", "-q")
    assert sorted(r["rank"] for r in data["rows"]) == [0, 1, 2, 3]
    assert [r["rank"] for r in data["rows"] if r["is_straggler"]] == [2]


@pytest.mark.parametrize("args, parts", [
    (["launch_overhed", "{example}"], ["no fact 'launch_overhed'; did you mean 'launch_overhead'?"]),
    pytest.param(["nothing_like_it", "{example}"],
                 ["no fact 'nothing_like_it'; `diagnose facts list` shows them all"], marks=pytest.mark.slow),
    pytest.param(["summary", "/nonexistent/run.sqlite"],
                 ["/nonexistent/run.sqlite: no such file"], marks=pytest.mark.slow),
    pytest.param(["summary", "{example}", "{example}"],
                 ["fact 'summary' is computed over one export; give one PROFILE, not 2"], marks=pytest.mark.slow),
    pytest.param(["kernel_gaps", "{example}", "--set", "facts.gap_treshold_ns=1"],
                 ["did you mean 'gap_threshold_ns'"], marks=pytest.mark.slow),
    pytest.param(["kernel_gaps", "{example}", "--set", "facts.gap_threshold_ns=lots"],
                 ["expected a number"], marks=pytest.mark.slow),
    pytest.param(["kernel_gaps", "{example}", "--set", "lauch-bound.min_kernels=1"],
                 ["did you mean 'launch-bound'"], marks=pytest.mark.slow),
    pytest.param(["summary", "{example}", "--rule-dir", "/nonexistent/pack"],
                 ["rule directory /nonexistent/pack does not exist"], marks=pytest.mark.slow),
])
def test_bad_input_is_one_sentence_and_exit_2(args, parts):
    one_error(run("facts", "show", *[a.format(example=EXAMPLE) for a in args]), *parts)


@pytest.mark.slow
def test_usage_errors_exit_2_with_the_usage_line():
    for args in (["facts"], ["facts", "show", "summary"], ["facts", "show", "summary", str(EXAMPLE), "-f", "xml"],
                 ["facts", "show", "summary", str(EXAMPLE), "--limit", "0"]):
        done = run(*args)
        assert done.returncode == 2 and done.stderr.startswith("usage: diagnose facts"), (args, done.stderr)


@pytest.mark.slow
def test_a_broken_team_fact_is_one_sentence(tmp_path):
    (tmp_path / "bad.sql").write_text("-- @fact acme_bad\n-- @column x X.\n-- @check y not_null\nSELECT 1 AS x\n")
    one_error(run("facts", "list", "--rule-dir", tmp_path), "bad.sql:3: @check names column 'y'")
