"""`diagnose batch`: many independent profiles in parallel worker processes, one row per profile in a Parquet, CSV
or JSON Lines file that DuckDB reads; a broken profile is a row with its error, never the end of the batch.

The batch over the bundled examples and broken inputs runs once for the module (two workers); the other fast tests
read its results or stop before any profile is diagnosed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from nsys_diagnose.runs import batch, batch_profiles, batch_table
from nsys_diagnose.cli import main as cli
from nsys_diagnose.cli.output import current_umask
from nsys_diagnose.diagnosis.config import Config
from nsys_diagnose.base.errors import InputError
from nsys_diagnose.reading.inputs import check_profile_path
from nsys_diagnose.reports.metrics import METRICS

from conftest import default_stop_signals
from kineto_traces import TINY, trace
from kineto_traces import write as write_trace

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "fixtures" / "examples"
EAGER = EXAMPLES / "eager_decode.sqlite"
DIAGNOSE = Path(sys.executable).parent / "diagnose"


def _sentence(path: Path) -> str:
    """What `diagnose PATH` prints for a file that is no profile."""
    with pytest.raises(InputError) as refused:
        check_profile_path(path)
    return str(refused.value)


def _rows(results: Path) -> list[dict]:
    con = duckdb.connect()
    cursor = con.execute(f"SELECT * FROM '{results}'")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, values)) for values in cursor.fetchall()]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    """diagnose batch over the examples directory, a glob of broken exports, an explicit text file, a missing file,
    and a directory holding a non-export and a second name of an example."""
    root = tmp_path_factory.mktemp("batch")
    broken, mixed = root / "broken", root / "mixed"
    broken.mkdir()
    mixed.mkdir()
    (broken / "empty.sqlite").write_bytes(b"")
    (broken / "text.sqlite").write_text("not an export\n")
    (root / "notes.txt").write_text("these are not the profiles you are looking for\n")
    (mixed / "README.md").write_text("nightly runs\n")
    (mixed / "again.sqlite").symlink_to(EAGER)
    results = root / "out" / "results.parquet"
    results.parent.mkdir()
    argv = ["batch", str(EXAMPLES), str(broken / "*.sqlite"), str(root / "notes.txt"), str(root / "gone.sqlite"),
            str(mixed), "--out", str(results), "--jobs", "2"]
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(argv)
    return {"root": root, "results": results, "code": code, "stderr": err.getvalue(),
            "inputs": {"broken": broken, "notes": root / "notes.txt", "gone": root / "gone.sqlite"}}


@pytest.fixture(scope="module")
def rows(run) -> dict[str, dict]:
    return {Path(r["path"]).name: r for r in _rows(run["results"])}


def test_one_row_per_profile_and_broken_inputs_are_rows_with_their_sentence(run, rows):
    assert sorted(rows) == sorted(["eager_decode.sqlite", "graph_decode_node.sqlite", "healthy_prefill.sqlite",
                                   "empty.sqlite", "text.sqlite", "notes.txt", "gone.sqlite"])
    assert [n for n, r in rows.items() if r["status"] == "ok"] == [
        "eager_decode.sqlite", "graph_decode_node.sqlite", "healthy_prefill.sqlite"]
    broken = run["inputs"]["broken"]
    for name, path in [("empty.sqlite", broken / "empty.sqlite"), ("text.sqlite", broken / "text.sqlite"),
                       ("notes.txt", run["inputs"]["notes"]), ("gone.sqlite", run["inputs"]["gone"])]:
        row = rows[name]
        assert row["status"] == "error" and row["error"] == _sentence(path), row
        assert row["verdict"] is None and row["findings"] is None and row["gpu_utilization"] is None
    assert all(r["error"] is None for r in rows.values() if r["status"] == "ok")
    assert run["code"] == 2  # some profiles failed; the results are written all the same


def test_the_row_of_a_profile_carries_its_verdict_cost_and_key_metrics(rows):
    eager, healthy = rows["eager_decode.sqlite"], rows["healthy_prefill.sqlite"]
    assert (eager["verdict"], eager["verdict_rule"]) == ("launch-bound", "launch-bound")
    assert 0.5 < eager["primary_cost"] < 1 and eager["headline"].startswith("GPU starved by kernel-launch overhead")
    assert eager["overhead_ratio"] > 0.5 and eager["gpu_utilization"] < 0.5 and eager["kernel_count"] == 7325
    assert eager["stack"] == "vllm" and eager["nsys_version"].startswith("2024.6") and eager["duration_ns"] > 0
    assert eager["source_format"] == "nsys" and rows["text.sqlite"]["source_format"] is None
    assert healthy["verdict"] == "none" and healthy["primary_cost"] is None and healthy["gpu_utilization"] > 0.9
    assert healthy["findings"] == [] and healthy["findings_warning"] == 0
    assert all(r["seconds"] > 0 for r in rows.values() if r["status"] == "ok")


def test_findings_are_a_nested_list_duckdb_unnests(run, rows):
    found = duckdb.sql(f"SELECT f.rule, f.severity, f.impact FROM (SELECT unnest(findings) AS f FROM "
                       f"'{run['results']}' WHERE path LIKE '%eager_decode.sqlite') ORDER BY f.rule").fetchall()
    eager = rows["eager_decode.sqlite"]
    assert ("launch-bound", "warning", eager["primary_cost"]) in found
    assert len(found) == eager["findings_info"] + eager["findings_warning"] + eager["findings_error"]


def test_every_row_has_the_same_columns_so_shards_merge(run, tmp_path):
    columns = [c[0] for c in duckdb.sql(f"DESCRIBE SELECT * FROM '{run['results']}'").fetchall()]
    assert columns[:4] == ["path", "status", "error", "verdict"] and "primary_cost" in columns
    assert {m.key for m in METRICS if m.report} <= set(columns)
    shard = tmp_path / "shard-2.parquet"
    batch_table.write_table([batch_table.error_row("elsewhere.sqlite", "elsewhere.sqlite: no such file.")], shard,
                            mode=0o644)
    merged = duckdb.sql(f"SELECT status, count(*) FROM read_parquet(['{run['results']}', '{shard}']) "
                        f"GROUP BY status ORDER BY status").fetchall()
    assert merged == [("error", 5), ("ok", 3)]


def test_csv_and_jsonl_hold_the_same_rows(rows, tmp_path):
    table = list(rows.values())
    batch_table.write_table(table, tmp_path / "r.csv", mode=0o644)
    batch_table.write_table(table, tmp_path / "r.jsonl", mode=0o644)
    from_csv = {Path(p).name: (v, json.loads(f) if f else None)
                for p, v, f in duckdb.sql(f"SELECT path, verdict, findings FROM read_csv('{tmp_path / 'r.csv'}', "
                                          f"all_varchar = true)").fetchall()}
    lines = (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()
    from_jsonl = {Path(o["path"]).name: (o["verdict"], o["findings"]) for o in map(json.loads, lines)}
    expected = {n: (r["verdict"], r["findings"]) for n, r in rows.items()}
    assert from_csv == from_jsonl == expected and len(lines) == len(rows)


def test_progress_is_one_line_per_profile_then_a_summary_and_the_failures(run):
    lines = run["stderr"].splitlines()
    assert len(lines) == 7 + 2 and [line[:5] for line in lines[:7]] == [f"[{i}/7]" for i in range(1, 8)]
    eager = next(line for line in lines if "eager_decode.sqlite:" in line)
    assert re.fullmatch(r"\[\d/7\] \S+eager_decode\.sqlite: launch-bound \(\d+\.\d %\) \d+\.\d s", eager), eager
    notes = re.escape(f"{run['inputs']['notes']}: error: {_sentence(run['inputs']['notes'])}")
    assert any(re.fullmatch(rf"\[\d/7\] {notes} \d+\.\d s", line) for line in lines), lines
    assert lines[7].startswith("diagnose batch: 7 profiles: 3 ok, 4 failed, in ") and lines[7].endswith(
        "with 2 worker processes; skipped 1 non-export entry; 1 file reached twice, diagnosed once; wrote "
        f"{run['results']}")
    assert lines[8] == (f"diagnose batch: error: 4 of 7 profiles could not be diagnosed; the error column of their "
                        f"rows in {run['results']} says why.")


def test_results_file_is_written_atomically_with_the_umask_mode(run):
    results = run["results"]
    assert sorted(p.name for p in results.parent.iterdir()) == ["results.parquet"]  # no temporary file left
    assert results.stat().st_mode & 0o777 == 0o666 & ~current_umask()


def test_unknown_extension_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["batch", str(EAGER), "--out", str(tmp_path / "results.xlsx")]) == 2
    err = capsys.readouterr().err
    assert "must end in .parquet, .csv, .jsonl" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_out_onto_an_input_is_refused(tmp_path, capsys):
    profile = tmp_path / "run.sqlite"
    shutil.copyfile(EAGER, profile)
    (tmp_path / "results.parquet").symlink_to(profile)
    before = profile.read_bytes()
    assert cli.main(["batch", str(tmp_path), "--out", str(tmp_path / "results.parquet")]) == 2
    assert "leads through a symbolic link to the input export" in capsys.readouterr().err
    assert profile.read_bytes() == before


def test_a_glob_that_matches_nothing_is_one_sentence(tmp_path, capsys):
    assert cli.main(["batch", str(tmp_path / "*.sqlite"), "--out", str(tmp_path / "r.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("matches no file; check the pattern (it is expanded by diagnose batch, relative to "
                                "the working directory).") and not (tmp_path / "r.parquet").exists()


def test_directories_skip_non_exports_and_a_file_reached_twice_is_one_row(run):
    found = batch_profiles.find_profiles([str(EXAMPLES), str(run["root"] / "mixed"), str(run["root"] / "broken" / "*")])
    assert [p.name for p in found.profiles] == ["eager_decode.sqlite", "graph_decode_node.sqlite",
                                                "healthy_prefill.sqlite", "empty.sqlite", "text.sqlite"]
    assert (found.skipped, found.duplicates) == (1, 1)  # mixed/README.md; mixed/again.sqlite is eager_decode


def _traces_beside_exports(d: Path) -> Path:
    """A directory of an export and PyTorch-profiler traces, named as the profilers name them or not at all."""
    d.mkdir()
    (d / "eager.sqlite").symlink_to(EAGER)
    write_trace(d / "host_51.1759312.pt.trace.json.gz", trace(TINY))       # torch.profiler, vLLM
    write_trace(d / "1759312.5-TP-0.trace.json", trace(TINY, trace_id="sglang"))  # SGLang
    write_trace(d / "prefill.json", trace(TINY, trace_id="export_chrome_trace"))   # a trace by its content
    (d / "results.json").write_text('{"request_throughput": 1.5}')          # JSON, no trace: skipped
    (d / "other.json.gz").write_bytes(b"not even gzip")                      # neither: skipped
    return d


def test_directories_give_their_traces_too(tmp_path):
    d = _traces_beside_exports(tmp_path / "mixed")
    found = batch_profiles.find_profiles([str(d)])
    assert sorted(p.name for p in found.profiles) == ["1759312.5-TP-0.trace.json", "eager.sqlite",
                                                      "host_51.1759312.pt.trace.json.gz", "prefill.json"]
    assert found.skipped == 2
    globbed = batch_profiles.find_profiles([str(d / "*.json")])
    assert ([p.name for p in globbed.profiles], globbed.skipped) == (["1759312.5-TP-0.trace.json", "prefill.json"], 1)


def test_the_row_of_a_trace_says_so(tmp_path):
    good = write_trace(tmp_path / "run.pt.trace.json.gz", trace(TINY))
    row = batch.diagnose_row(str(good), batch.WorkerSettings(Config(), cache=False))
    assert row["status"] == "ok" and row["source_format"] == "kineto" and row["nsys_version"] is None
    assert row["kernel_count"] == 1
    cut = tmp_path / "cut.pt.trace.json"
    cut.write_text(trace(TINY)[:-60])
    row = batch.diagnose_row(str(cut), batch.WorkerSettings(Config(), cache=False))
    assert row["status"] == "error" and row["source_format"] == "kineto" and "was cut short" in row["error"]
    assert batch_table.error_row(str(EAGER), "x")["source_format"] == "nsys"


@pytest.mark.slow
def test_a_batch_of_exports_and_traces_is_one_row_each_with_its_format(tmp_path):
    d = _traces_beside_exports(tmp_path / "mixed")
    results = tmp_path / "r.jsonl"
    with contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["batch", str(d), "--out", str(results), "-j", "2", "--no-cache"]) == 0
    rows = {Path(r["path"]).name: r for r in _rows(results)}
    assert {n: (r["status"], r["source_format"]) for n, r in rows.items()} == {
        "eager.sqlite": ("ok", "nsys"), "host_51.1759312.pt.trace.json.gz": ("ok", "kineto"),
        "1759312.5-TP-0.trace.json": ("ok", "kineto"), "prefill.json": ("ok", "kineto")}
    assert sorted(p.name for p in d.iterdir()) == ["1759312.5-TP-0.trace.json", "eager.sqlite",
                                                   "host_51.1759312.pt.trace.json.gz", "other.json.gz",
                                                   "prefill.json", "results.json"]


def test_a_bug_while_diagnosing_is_an_internal_error_row_and_exit_3(monkeypatch, tmp_path, capsys):
    def crash(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(batch, "diagnose", crash)
    row = batch.diagnose_row(str(EAGER), batch.WorkerSettings(Config()))
    assert row["status"] == "error" and row["error"] == "internal error: ZeroDivisionError: division by zero"
    assert batch_table.is_internal(row)
    monkeypatch.setattr("nsys_diagnose.cli.batch.diagnose_batch", lambda profiles, *a, **k: [row])
    assert cli.main(["batch", str(EAGER), "--out", str(tmp_path / "r.jsonl"), "-q"]) == 3
    assert "1 of 1 profiles hit a bug in nsys-diagnose" in capsys.readouterr().err
    assert json.loads((tmp_path / "r.jsonl").read_text())["error"].startswith("internal error: ")


def _die_on_a(path: str, settings: batch.WorkerSettings) -> dict:
    """A worker task (run in a spawned process) whose process dies on a.sqlite, as one killed for memory would."""
    if Path(path).name == "a.sqlite":
        os._exit(1)
    return batch_table.error_row(path, "diagnosed")


@pytest.mark.slow
def test_a_worker_that_dies_is_an_internal_error_row_not_the_end_of_the_batch(tmp_path):
    paths = [tmp_path / f"{name}.sqlite" for name in ("a", "b", "c")]
    done: list[str] = []
    rows = batch.diagnose_batch(paths, Config(), jobs=2, cache=False, work=_die_on_a,
                                on_done=lambda row, finished, total: done.append(Path(row["path"]).name))
    assert [r["error"] for r in rows] == [batch._WORKER_DIED, "diagnosed", "diagnosed"]
    assert batch_table.is_internal(rows[0]) and sorted(done) == ["a.sqlite", "b.sqlite", "c.sqlite"]


@pytest.mark.real_exports
def test_every_real_export_is_one_ok_row_with_the_verdict_diagnose_gives(tmp_path):
    """The batch reuses the canonical caches the session's own diagnoses of the corpus built (analysis(), shared
    with the other real-export tests), so this costs the rules and reports, not reading 19 exports again."""
    from conftest import REAL_EXPORTS, analysis

    expected = {str(p): analysis(p)[1].verdict for p in REAL_EXPORTS}
    results = tmp_path / "real.parquet"
    assert cli.main(["batch", *map(str, REAL_EXPORTS), "--out", str(results), "--jobs", "2", "-q"]) == 0
    rows = _rows(results)
    assert sorted(r["path"] for r in rows) == sorted(expected)
    assert [(r["path"], r["error"]) for r in rows if r["status"] != "ok"] == []
    for r in rows:
        assert (r["verdict"], r["verdict_rule"]) == (expected[r["path"]].primary or "none", expected[r["path"]].rule)
        assert r["headline"] == expected[r["path"]].headline


def test_fail_on_counts_the_findings_of_every_profile(rows, monkeypatch, tmp_path):
    ok = [r for r in rows.values() if r["status"] == "ok"]  # eager_decode has warnings, the others none
    monkeypatch.setattr("nsys_diagnose.cli.batch.diagnose_batch", lambda profiles, *a, **k: ok)
    argv = ["batch", str(EXAMPLES), "--out", str(tmp_path / "r.parquet"), "-q", "--fail-on"]
    assert [cli.main([*argv, severity]) for severity in ("warning", "error")] == [1, 0]
    assert len(_rows(tmp_path / "r.parquet")) == 3


@pytest.fixture(scope="module")
def two_big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from nsys_diagnose.fixtures.generator import generate_large

    directory = tmp_path_factory.mktemp("big")
    generate_large(directory / "a.sqlite", kernels=400_000)
    shutil.copyfile(directory / "a.sqlite", directory / "b.sqlite")
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("whom, sig, code, said", [("group", signal.SIGINT, 130, "interrupted"),
                                                    ("parent", signal.SIGTERM, 143, "stopped by SIGTERM")])
def test_a_stop_signal_stops_the_workers_and_leaves_nothing(tmp_path, two_big, whom, sig, code, said):
    """Ctrl-C reaches the whole process group; `kill` only the parent, which stops its workers itself."""
    scratch, out = tmp_path / "tmp", tmp_path / "out"
    scratch.mkdir()
    out.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    proc = subprocess.Popen([str(DIAGNOSE), "batch", str(two_big), "-j", "2", "--no-cache", "-q", "--out",
                             str(out / "results.parquet")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=default_stop_signals)
    deadline = time.monotonic() + 60
    while proc.poll() is None and len(list(scratch.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # until both workers are reading their export
    if proc.poll() is not None:
        pytest.skip("the batch finished before the signal could be sent")
    os.killpg(proc.pid, sig) if whom == "group" else proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and err.strip().splitlines()[-1] == f"diagnose batch: {said}", err
    assert "Traceback" not in err and list(scratch.iterdir()) == [] and list(out.iterdir()) == []


def test_a_signal_after_the_stop_event_does_not_cut_the_clean_up_short(monkeypatch, tmp_path):
    """The parent sets the stop Event, then signals each worker. A worker that already stopped on the Event is
    removing its scratch directory when the signal lands: a second KeyboardInterrupt there would leave it half
    removed, so the signal is only recorded."""
    import multiprocessing

    stopping = multiprocessing.get_context("spawn").Event()
    monkeypatch.setattr(batch._WorkerStop, "stopping", stopping)
    monkeypatch.setattr(batch._WorkerStop, "requested", False)
    monkeypatch.setattr(batch._WorkerStop, "busy", True)
    scratch = tmp_path / "scratch"
    (scratch / "spill").mkdir(parents=True)
    stopping.set()
    try:
        batch._WorkerStop.check("reading")
    except KeyboardInterrupt:
        try:
            batch._WorkerStop.handler(signal.SIGTERM, None)  # arrives during the clean-up
        except KeyboardInterrupt:
            pytest.fail("the signal interrupted the clean-up of a worker that had already stopped")
        shutil.rmtree(scratch)
    else:
        pytest.fail("a set stop Event did not stop the diagnosis")
    assert not scratch.exists()


@pytest.mark.slow
def test_shards_partition_the_profiles_by_path_the_same_under_any_hash_seed():
    paths = [Path(f"runs/job{i}/rank{r}.sqlite") for i in range(250) for r in range(4)]
    shards = [batch_profiles.shard_of(p, 4) for p in paths]
    counts = [shards.count(i) for i in (1, 2, 3, 4)]
    assert sum(counts) == len(paths) and min(counts) > 200  # every profile in one shard, and none starved
    # The partition is a contract: CI matrices and Slurm arrays run on other machines, other Python builds, other
    # hash seeds, and must agree on it; these values pin it.
    assert [batch_profiles.shard_of(Path(p), 4) for p in ("runs/llama-8b/rank0.sqlite", "nightly/a.sqlite")] == [1, 3]
    code = ("import sys; from pathlib import Path; from nsys_diagnose.runs.batch_profiles import shard_of; "
            "print([shard_of(Path(p), 4) for p in sys.argv[1:]])")
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code, *map(str, paths[:40])], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONHASHSEED=seed), check=True).stdout
        assert out.strip() == str(shards[:40])


@pytest.mark.slow
def test_the_shards_of_a_batch_together_are_the_whole_batch(tmp_path):
    for i in range(8):
        (tmp_path / f"p{i}.sqlite").write_text("not an export\n")  # a row each at once: its error
    whole = {r["path"] for r in batch.diagnose_batch(batch_profiles.find_profiles([str(tmp_path)]).profiles, Config(),
                                                       jobs=1, cache=False)}
    seen: set[str] = set()
    for index in (1, 2, 3):
        out = tmp_path / "out" / f"shard-{index}.parquet"
        out.parent.mkdir(exist_ok=True)
        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert cli.main(["batch", str(tmp_path), "--out", str(out), "--shard", f"{index}/3", "-j", "1"]) == (
                2 if any(batch_profiles.shard_of(Path(p), 3) == index for p in whole) else 0)
        paths = {r["path"] for r in _rows(out)}
        assert not paths & seen and all(batch_profiles.shard_of(Path(p), 3) == index for p in paths)
        assert f"shard {index}/3 of the 8 profiles found" in err.getvalue()
        seen |= paths
    assert seen == whole


@pytest.mark.parametrize("shard", ["0/4", "5/4", "1/0", "-1/4", "a/b", "1-4", "1/4/2", ""])
def test_a_bad_shard_is_one_sentence_and_exit_2(shard, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:  # argparse refuses it, before anything is read
        cli.main(["batch", str(EAGER), "--out", str(tmp_path / "r.parquet"), f"--shard={shard}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: diagnose batch") and err[-1] == (
        f"diagnose batch: error: argument --shard: {shard!r} is not a shard; give I/N, whole numbers with 1 <= I <= "
        f"N (shard I of N), e.g. --shard 1/4 ... --shard 4/4.")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, text, said", [
    ("headlines.yaml", 'primary: "{title}: {msg}"\n',
     "headlines.yaml:1:1: primary uses {msg}, which it cannot fill in"),
    ("operation_classes.yaml", 'classes:\n  - {name: acme, patterns: ["x"], colour: red}\n', "unknown key 'colour'"),
])
def test_a_broken_team_pack_is_refused_once_before_any_worker_starts(name, text, said, tmp_path, monkeypatch,
                                                                     capsys):
    """A broken headlines.yaml or operation_classes.yaml is the batch's one error (exit 2, no results file), not the
    same error on every row."""
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / name).write_text(text, encoding="utf-8")
    started: list[str] = []
    monkeypatch.setattr("nsys_diagnose.cli.batch.diagnose_batch", lambda *a, **k: started.append("pool") or [])
    out = tmp_path / "r.parquet"
    assert cli.main(["batch", str(EAGER), str(EAGER), "--rule-dir", str(pack), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "Traceback" not in err[0]
    assert started == [] and not out.exists()
