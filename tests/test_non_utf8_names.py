"""Profiles and directories whose names are not valid UTF-8 (bytes Python keeps in a str as surrogate escapes,
https://peps.python.org/pep-0383/): `diagnose`, `compare`, `batch`, a multi-rank run and `facts show` read them, and
name them with a backslash escape (`na\\xffme.sqlite`) in every format and message, never with a
UnicodeEncodeError; in a batch such a profile is a row like any other. The profiles themselves are only read."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest

from nsys_diagnose.fixtures.runs import generate_run
from nsys_diagnose.base.text import printable, shown_path

from cli_in_process import run_cli

REPO = Path(__file__).resolve().parents[1]
EAGER = REPO / "fixtures" / "examples" / "eager_decode.sqlite"
DIAGNOSE = Path(sys.executable).parent / "diagnose"
RAW = b"na\xffme.sqlite"
NAME = os.fsdecode(RAW)          # "na\udcffme.sqlite"
SHOWN = "na\\xffme.sqlite"       # how reports and messages name it
BROKEN = os.fsdecode(b"bro\xfeken.sqlite")


@pytest.fixture(autouse=True)
def _cache_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("NSYS_DIAGNOSE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()


@pytest.fixture
def odd(tmp_path) -> Path:
    """A directory holding the eager_decode example under a name that is not UTF-8."""
    directory = tmp_path / "work"
    directory.mkdir()
    shutil.copy(EAGER, directory / NAME)
    return directory


def cli(*args: str, cwd: Path):
    return run_cli(*args, cwd=cwd, drop_env=("NO_COLOR",))


def test_printable_shows_undecodable_bytes_as_backslash_escapes():
    assert printable(NAME) == SHOWN and shown_path(b"/runs/" + RAW) == "/runs/" + SHOWN
    assert shown_path(Path("/runs") / NAME) == "/runs/" + SHOWN
    assert printable("héllo ✓ rank0.sqlite") == "héllo ✓ rank0.sqlite"
    assert printable("a\ud800b") == "a\\ud800b"  # a lone surrogate no file name decoded into


def test_diagnose_names_the_profile_in_every_format(odd):
    before = (odd / NAME).read_bytes()
    p = cli(NAME, "--no-cache", cwd=odd)
    assert p.returncode == 0, p.stderr
    assert "nsys-diagnose" in p.stdout.splitlines()[0] and SHOWN in p.stdout.splitlines()[0]
    p.stdout.encode("utf-8")  # strict: what a UTF-8 terminal can take
    p = cli(NAME, "--no-cache", "-o", "r.md", "-o", "r.json", "-o", "r.html", "-o", "r.txt", cwd=odd)
    assert p.returncode == 0, p.stderr
    texts = {ext: (odd / f"r.{ext}").read_bytes().decode("utf-8") for ext in ("md", "json", "html", "txt")}
    assert json.loads(texts["json"])["profile"]["path"] == SHOWN
    assert SHOWN.replace("\\", "\\\\") in texts["md"]  # Markdown escapes the backslash itself
    assert SHOWN in texts["html"] and SHOWN in texts["txt"]
    p = cli(NAME, "--no-cache", "-f", "json", cwd=odd)
    assert p.returncode == 0 and json.loads(p.stdout)["profile"]["path"] == SHOWN
    assert (odd / NAME).read_bytes() == before


def test_diagnose_with_a_cache_and_facts_show(odd):
    for _ in range(2):  # builds the cache, then reuses it
        p = cli(NAME, "-f", "md", cwd=odd)
        assert p.returncode == 0, p.stderr
    assert len(os.listdir(odd.parent / "cache")) > 1  # the key and the profile's cache
    p = cli("facts", "show", "gpu_utilization", NAME, cwd=odd)
    assert p.returncode == 0 and "(1 row)" in p.stdout, p.stderr


@pytest.mark.slow
def test_terminal_report_on_a_real_standard_output(odd, tmp_path):
    env = {**os.environ, "NSYS_DIAGNOSE_CACHE_DIR": str(tmp_path / "cache"), "LC_ALL": "C.UTF-8"}
    p = subprocess.run([str(DIAGNOSE), NAME, "--no-cache"], cwd=odd, env=env, capture_output=True)
    assert p.returncode == 0, p.stderr
    assert SHOWN in p.stdout.decode("utf-8") and b"Traceback" not in p.stderr


def test_compare_names_both_profiles(odd):
    shutil.copy(EAGER, odd / "ok.sqlite")
    p = cli("compare", "ok.sqlite", NAME, "--no-cache", "-o", "-", "-o", "c.json", "-o", "c.md", "-o", "c.html",
            cwd=odd)
    assert p.returncode == 0, p.stderr
    assert json.loads((odd / "c.json").read_text(encoding="utf-8"))["after"]["path"] == SHOWN
    assert SHOWN in (odd / "c.html").read_text(encoding="utf-8") and SHOWN in p.stdout
    assert SHOWN.replace("\\", "\\\\") in (odd / "c.md").read_text(encoding="utf-8")


def test_batch_rows_for_odd_names_good_and_broken(odd):
    (odd / BROKEN).write_bytes(b"not an export\n" * 10)
    for results in ("r.jsonl", "r.csv"):
        p = cli("batch", ".", "--out", results, "--jobs", "1", cwd=odd)
        assert p.returncode == 2, p.stderr  # one profile failed; its row says why
        assert "na\\xffme.sqlite: launch-bound" in p.stderr and "\\udc" not in p.stderr
    lines = (odd / "r.jsonl").read_text(encoding="utf-8").splitlines()
    rows = {r["path"]: r for r in map(json.loads, lines)}
    assert rows[SHOWN]["status"] == "ok" and rows[SHOWN]["verdict"] == "launch-bound"
    broken = rows["bro\\xfeken.sqlite"]
    assert broken["status"] == "error" and broken["error"].startswith(
        "bro\\xfeken.sqlite is neither an nsys SQLite export nor a PyTorch-profiler trace")
    with open(odd / "r.csv", encoding="utf-8", newline="") as fh:
        assert {r["path"]: r["status"] for r in csv.DictReader(fh)} == {SHOWN: "ok", "bro\\xfeken.sqlite": "error"}
    assert duckdb.sql(f"SELECT count(*) FROM '{odd / 'r.jsonl'}'").fetchone() == (2,)
    p = cli(BROKEN, cwd=odd)  # alone: the same sentence, naming it the same way
    assert p.returncode == 2 and p.stderr == f"diagnose: error: {broken['error']}\n"


def test_batch_writes_results_into_a_directory_with_an_odd_name(odd):
    out = odd / os.fsdecode(b"out\xff")
    out.mkdir()
    p = cli("batch", NAME, "--out", str(out / "r.jsonl"), cwd=odd)
    assert p.returncode == 0, p.stderr
    assert json.loads((out / "r.jsonl").read_text(encoding="utf-8"))["path"] == SHOWN
    assert os.listdir(out) == ["r.jsonl"]


@pytest.mark.slow
def test_a_run_of_ranks_with_odd_names(tmp_path):
    generate_run("multi_rank_balanced", tmp_path / "gen")
    run = tmp_path / os.fsdecode(b"r\xffun")
    run.mkdir()
    for r in (0, 1):
        shutil.copy(tmp_path / "gen" / f"rank{r}.sqlite", run / os.fsdecode(b"job\xff_rank%d.sqlite" % r))
    p = cli(run.name, "--no-cache", "-f", "json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["source"] == "r\\xffun" and [r["file"] for r in report["ranks"]] == [
        "job\\xff_rank0.sqlite", "job\\xff_rank1.sqlite"]
    p = cli("facts", "show", "rank_balance", run.name, cwd=tmp_path)
    assert p.returncode == 0 and "r\\xffun/job\\xff_rank0.sqlite" in p.stdout, p.stderr


def test_a_cache_or_temporary_directory_duckdb_cannot_name(odd, monkeypatch):
    cache = odd.parent / os.fsdecode(b"cache\xff")
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("NSYS_DIAGNOSE_CACHE_DIR", str(cache))
    p = cli(NAME, cwd=odd)
    assert p.returncode == 0, p.stderr
    assert "cache\\xff" in p.stderr and "not valid UTF-8" in p.stderr
    scratch = odd.parent / os.fsdecode(b"tmp\xff")
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    p = cli(NAME, "--no-cache", cwd=odd)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        "diagnose: error: the temporary directory " + shown_path(scratch) + " has a name that is not valid UTF-8, "
        "which DuckDB cannot open; point TMPDIR at another directory."]
