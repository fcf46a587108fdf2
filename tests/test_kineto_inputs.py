"""PyTorch-profiler (Kineto) traces as input, end to end through the command line: what is no such trace, or a
damaged one, is one sentence on stderr and exit code 2 (never a traceback, never a file beside the input); a tiny
valid trace renders in every format; one rank of a distributed run diagnosed alone says so; traces are cached like
exports, and the cache keeps no copy of their events; `facts show` and `rules test` read traces too.

The traces are written by hand (tests/kineto_traces.py).
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import duckdb
import pytest

from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.reading.export import open_export

from cli_in_process import run_cli
from kineto_traces import ANNOTATION, KERNEL, LAUNCH, OP, TINY, trace, write


def one_sentence(p) -> str:
    """The one line `diagnose` printed when it refused its input with exit code 2."""
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diagnose: error: "), p.stderr
    assert p.stdout == ""
    return lines[0]


# --- bad input: one sentence, exit code 2, nothing beside the input ----------------------------------------------
def _gz(text: str | bytes) -> bytes:
    return gzip.compress(text.encode() if isinstance(text, str) else text, mtime=0)


def _half(data: str | bytes) -> bytes:
    data = data.encode() if isinstance(data, str) else data
    return data[:len(data) // 2]


BIG = [OP] * 60_000 + TINY  # about 7 MB: the damage lies past the first read (4 MiB), where DuckDB finds it
# (case, file name, its bytes, what the sentence says)
BAD: list[tuple[str, str, Callable[[], bytes], str]] = [
    ("another tool's trace", "trace.json",
     lambda: json.dumps({"traceEvents": [{"ph": "X", "cat": "v8", "name": "Paint", "pid": 1, "tid": 1, "ts": 1,
                                          "dur": 2}], "displayTimeUnit": "ms"}).encode(),
     "is a Chrome trace, but not one the PyTorch profiler wrote"),
    ("array form", "trace.json",
     lambda: json.dumps([{"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]).encode(),
     "is a Chrome trace in array form, which the PyTorch profiler never writes"),
    ("truncated gzip", "trace.pt.trace.json.gz", lambda: _half(_gz(trace(TINY * 200))),
     "ends too early: it was cut short"),
    ("truncated JSON", "trace.pt.trace.json", lambda: _half(trace(TINY * 200)), "the file was cut short"),
    ("no GPU activity", "trace.pt.trace.json", lambda: trace([ANNOTATION, OP]).encode(),
     "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"),
    ("malformed event", "trace.pt.trace.json", lambda: trace(TINY).replace('"dur": 6.5', '"dur": 6.5x').encode(),
     "is not a well-formed Chrome trace"),
    ("malformed event far in", "trace.pt.trace.json",
     lambda: trace(BIG).replace('"dur": 6.5', '"dur": 6.5x').encode(), "its traceEvents cannot be read as JSON"),
    ("non-UTF-8 name", "trace.pt.trace.json", lambda: trace(TINY).encode().replace(b"gemm_k", b"gemm\xff_k"),
     "is not valid UTF-8"),
    ("non-UTF-8 name far in", "trace.pt.trace.json", lambda: trace(BIG).encode().replace(b"gemm_k", b"gemm\xff_k"),
     "is not valid UTF-8"),
    ("empty file", "trace.json", lambda: b"", "trace.json is empty"),
    ("JSON, no trace", "trace.json", lambda: b'{"a": 1}', "has no traceEvents list"),
    ("array of numbers", "trace.json", lambda: b"[1, 2, 3]",
     "is neither an nsys SQLite export nor a PyTorch-profiler trace"),
    ("gzip of no JSON", "trace.json.gz", lambda: _gz("hello world\n" * 100),
     "is neither an nsys SQLite export nor a PyTorch-profiler trace"),
    ("header nested too deep", "trace.pt.trace.json",
     lambda: trace(TINY).replace('"schemaVersion": 1', '"x": ' + "[" * 5000 + "]" * 5000
                                 + ', "schemaVersion": 1').encode(),
     "its 'x' key nests deeper than JSON readers allow"),
    ("no events", "trace.pt.trace.json", lambda: trace([]).encode(), "holds no events (its traceEvents list is empty)"),
    ("one correlation id for every call", "trace.pt.trace.json",
     lambda: trace([{**LAUNCH, "ts": 1000.0 + i, "args": {**LAUNCH["args"], "correlation": 1}} for i in range(300)]
                   + [KERNEL]).encode(),
     "gives 300 CUDA calls only 1 correlation ids"),
]


@pytest.mark.parametrize("case, name, content, expected", BAD, ids=[c[0] for c in BAD])
def test_what_is_no_readable_trace_is_one_sentence_and_exit_2(tmp_path, case, name, content, expected):
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = inputs / name
    path.write_bytes(content())
    line = one_sentence(run_cli(path, "-q"))
    assert str(path) in line and expected in line, line
    assert sorted(os.listdir(inputs)) == [name]  # nothing written beside it: no cache, no events file


@pytest.mark.parametrize("dur", [-30.25, None, "NaN"], ids=["negative", "missing", "NaN"])
def test_a_kernel_without_a_valid_duration_is_left_out_and_counted_not_made_0_ns(tmp_path, dur):
    bad = {k: v for k, v in KERNEL.items() if k != "dur"}
    if dur is not None:
        bad["dur"] = dur
    text = trace([ANNOTATION, OP, LAUNCH, KERNEL, {**bad, "ts": 1060.0, "args": {**KERNEL["args"], "correlation": 8}},
                  {**LAUNCH, "ts": 1050.0, "args": {**LAUNCH["args"], "correlation": 8}}]).replace('"NaN"', "NaN")
    path = write(tmp_path / "t.pt.trace.json", text)
    with open_export(path) as export:
        kernels = export.query("SELECT count(*), min(dur_ns) FROM kernels")[0]
        dropped = export.query("SELECT value FROM profile_info WHERE key = 'invalid_times:kernels'")[0][0]
    assert kernels == (1, 30250) and dropped == "1"


def test_a_bad_trace_among_the_ranks_is_named_with_its_rank(tmp_path):
    d = tmp_path / "run"
    for r in (0, 1):
        write(d / f"rank{r}.pt.trace.json", trace(TINY, distributed={"rank": r, "world_size": 2}, trace_id=str(r)))
    (d / "rank1.pt.trace.json").write_text(trace(TINY, distributed={"rank": 1, "world_size": 2})[:-40])
    line = one_sentence(run_cli(d, "-q"))
    assert line.startswith(f"diagnose: error: rank 1: {d / 'rank1.pt.trace.json'} ends before its traceEvents")


# --- a tiny valid trace -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("tiny") / "tiny.pt.trace.json.gz", trace(TINY))


def test_a_tiny_trace_renders_in_every_format(tiny, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    p = run_cli(tiny, "-q", "--no-cache", "-o", out / "r.md", "-o", out / "r.json", "-o", out / "r.html",
                "-o", out / "r.txt")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    report = json.loads((out / "r.json").read_text())
    assert report["profile"]["source_format"] == "kineto"
    assert report["facts"]["gpu_utilization"][0]["kernel_count"] == 1
    assert "tiny.pt.trace.json.gz" in (out / "r.md").read_text()
    assert (out / "r.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert "VERDICT" in (out / "r.txt").read_text()
    terminal = run_cli(tiny, "-q", "--no-cache", "--color", "never")
    assert terminal.returncode == 0 and "VERDICT" in terminal.stdout, terminal.stderr
    assert sorted(os.listdir(tiny.parent)) == [tiny.name]


# --- one rank of a distributed run, diagnosed alone ---------------------------------------------------------------
@pytest.mark.parametrize("name, after", [("rank1.pt.trace.json.gz", False), ("rank1.pt.trace.json", True)])
def test_one_rank_of_a_run_says_which_rank_and_how_to_see_them_all(tmp_path, name, after):
    path = write(tmp_path / name, trace(TINY, distributed={"backend": "nccl", "rank": 1, "world_size": 4}, after=after))
    p = run_cli(path, "--no-cache", "-o", tmp_path / "r.md")
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == (f"diagnose: note: {path} is rank 1 of a run of 4 ranks (its trace's distributedInfo), "
                                f"and this report is that rank alone; give every rank's trace (`diagnose DIR` or "
                                f"`diagnose RANK0 RANK1 ...`) to see the balance across the ranks.")
    assert run_cli(path, "--no-cache", "-q", "-o", tmp_path / "r.md").stderr == ""  # -q: no note


def test_a_trace_of_one_process_has_no_rank_note(tiny, tmp_path):
    alone = write(tmp_path / "alone.pt.trace.json", trace(TINY, distributed={"rank": 0, "world_size": 1}))
    for path in (tiny, alone):
        p = run_cli(path, "--no-cache", "-o", tmp_path / "r.md")
        assert p.returncode == 0 and "note:" not in p.stderr, p.stderr


# --- the cache ----------------------------------------------------------------------------------------------------
def test_a_trace_is_cached_by_content_and_the_cache_keeps_no_copy_of_its_events(tmp_path, monkeypatch):
    tiny = write(tmp_path / "in" / "tiny.pt.trace.json.gz", trace(TINY))
    cache_dir, scratch = tmp_path / "cache", tmp_path / "tmp"
    cache_dir.mkdir()
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the events are split to while read
    first: list[str] = []
    diagnose(tiny, progress=first.append, cache_dir=cache_dir)
    assert any("as a PyTorch-profiler trace" in m for m in first)
    second: list[str] = []
    diagnose(tiny, progress=second.append, cache_dir=cache_dir)
    assert any(m.startswith("reusing the canonical tables cached in") for m in second), second
    assert not any("as a PyTorch-profiler trace" in m for m in second)
    with open_export(tiny, cache=True, cache_dir=cache_dir) as export:
        assert export.cache_hit and export.info.source_format == "kineto"
        assert not list(export.workspace.root.rglob("events.json"))
    assert os.listdir(scratch) == []  # every scratch directory gone, the events with them
    [cache] = [p for p in cache_dir.iterdir() if p.name.endswith(".duckdb")]
    con = duckdb.connect(str(cache), read_only=True)
    try:
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        free = con.execute("SELECT free_blocks FROM pragma_database_size()").fetchone()[0]
    finally:
        con.close()
    assert not any(t.startswith("_") and t != "_state" for t in tables), tables  # no scratch table of the read
    assert free == 0  # nor the blocks the events took
    assert os.listdir(tiny.parent) == [tiny.name]
    write(tiny, trace(TINY + [dict(KERNEL, ts=1060.0)]))  # the trace changed: its cache is rebuilt
    again: list[str] = []
    report = diagnose(tiny, progress=again.append, cache_dir=cache_dir)
    assert not any(m.startswith("reusing") for m in again) and report.metrics["kernel_count"] == 2


# --- the other commands read traces -------------------------------------------------------------------------------
def test_facts_show_reads_a_trace(tiny):
    p = run_cli("facts", "show", "summary", tiny, "-f", "json", "--no-cache", "-q")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    assert rows[0]["kernel_count"] == 1


def test_rules_test_reads_a_trace_named_by_a_case(tiny, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules / "tiny.pt.trace.json.gz", trace(TINY))
    (rules / "launch-bound.test.yaml").write_text("rule: launch-bound\ncases:\n  - name: one kernel is no "
                                                  "launch-bound loop\n    profile: tiny.pt.trace.json.gz\n"
                                                  "    expect: []\n")
    p = run_cli("rules", "test", rules)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed, 0 failed" in p.stdout


def test_a_rank_of_a_distributed_run_and_a_trace_of_no_rank_are_not_one_run(tmp_path):
    d = tmp_path / "run"
    write(d / "w1.pt.trace.json", trace(TINY, distributed={"rank": 1, "world_size": 4}))
    write(d / "other.pt.trace.json", trace(TINY, trace_id="other"))
    line = one_sentence(run_cli(d, "-q"))
    assert "records its rank of a distributed run" in line and "records none" in line, line


def test_a_gpu_the_trace_does_not_describe_skips_the_rules_that_need_its_sm_count(tmp_path):
    # deviceProperties lists GPU 0, the kernels ran on GPU 7: small-grids cannot judge GPU 7, and says so
    on7 = {**KERNEL, "pid": 7, "args": {**KERNEL["args"], "device": 7}}
    path = write(tmp_path / "t.pt.trace.json", trace([ANNOTATION, OP, LAUNCH, on7]))
    report = diagnose(path)
    skipped = {s.rule: s.reason for s in report.skipped}
    assert skipped.get("small-grids") == ("the trace records no devices.sm_count (Streaming multiprocessors) for "
                                          "GPU 7, which did work")
