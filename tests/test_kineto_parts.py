"""A large trace's events are split into parts that DuckDB parses side by side (engine/reading/kineto_file.py): the
canonical tables are the same as from one part, whatever the cuts fall on, and no part is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsys_diagnose.reading import kineto_file
from nsys_diagnose.reading.export import open_export
from nsys_diagnose.reading.kineto_file import split_trace

from conftest import REPO
from kineto_traces import DEVICE, KERNEL, LAUNCH, PID, trace, write

REAL = REPO / "fixtures" / "real-traces" / "vllm_gptoss_tp8_b200_eager_prefill.json.gz"
SUMMARY = """
    SELECT (SELECT count(*) FROM kernels), (SELECT sum(start_ns) FROM kernels), (SELECT sum(dur_ns) FROM kernels),
           (SELECT count(*) FROM api_calls), (SELECT sum(end_ns) FROM api_calls),
           (SELECT count(*) FROM memcpys), (SELECT count(*) FROM nvtx_ranges), (SELECT sum(start_ns) FROM nvtx_ranges),
           (SELECT string_agg(DISTINCT name, ',' ORDER BY name) FROM kernels)"""


def _summary(path: Path, part_bytes: int | None, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(kineto_file, "PART_BYTES", part_bytes)
    with open_export(path) as export:
        return export.query(SUMMARY)[0]


def _steps(n: int) -> list[dict]:
    """n launches and their kernels, each event on lines of its own."""
    events = []
    for i in range(n):
        launch = {**LAUNCH, "ts": 1000.0 + 20 * i, "args": {**LAUNCH["args"], "correlation": 100 + i}}
        kernel = {**KERNEL, "ts": 1008.0 + 20 * i, "dur": 5.125, "args": {**KERNEL["args"], "correlation": 100 + i}}
        events += [launch, kernel]
    return events


def test_the_real_trace_read_in_many_parts_fills_the_same_tables(tmp_path, monkeypatch):
    split = split_trace(REAL, tmp_path, part_bytes=256 << 10)
    assert len(split.parts) > 20 and split.header["schemaVersion"] == 1
    for part in split.parts:  # each part is an array of whole events
        assert isinstance(json.loads(part.read_bytes()), list)
    split.remove()
    assert not list(tmp_path.iterdir())
    assert _summary(REAL, 256 << 10, monkeypatch) == _summary(REAL, None, monkeypatch)


def test_a_cut_among_the_keys_after_the_events_is_mended(tmp_path, monkeypatch):
    # A re-serialised trace may put deviceProperties, a list of objects, after its events: a cut there is no cut
    # between two events, and the parts are joined again.
    text = trace(_steps(400))
    text = text.replace('"traceName"', '"deviceProperties2": [\n    ' + json.dumps(DEVICE) + ",\n    "
                        + json.dumps({**DEVICE, "id": 1}) + "\n  ],\n  \"traceName\"")
    path = write(tmp_path / "late.pt.trace.json", text)
    cut_at = text.index('"deviceProperties2"') - text.index('"traceEvents"') - 20
    whole = _summary(path, None, monkeypatch)
    assert whole[0] == 400
    assert _summary(path, cut_at, monkeypatch) == whole


def test_a_cut_inside_an_event_is_read_again_whole(tmp_path, monkeypatch):
    # an event whose args hold a list of objects over several lines looks, at the line break, like two events
    odd = {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": PID, "tid": PID, "ts": 990.0, "dur": 1.0,
           "args": {"Inputs": "__LIST__"}}
    events = [odd, *_steps(300)]
    text = trace(events).replace('"__LIST__"', '[\n      {"a": 1},\n      {"b": 2}\n    ]')
    path = write(tmp_path / "odd.pt.trace.json", text)
    split = split_trace(path, tmp_path / "scratch", part_bytes=10) if (tmp_path / "scratch").mkdir() is None else None
    assert split is not None and len(split.parts) > 2
    split.remove()
    whole = _summary(path, None, monkeypatch)
    assert whole[0] == 300
    assert _summary(path, 10, monkeypatch) == whole


def test_parts_joined_again_are_the_events_as_copied(tmp_path):
    events = _steps(200)
    path = write(tmp_path / "t.pt.trace.json", trace(events))
    (tmp_path / "scratch").mkdir()
    split = split_trace(path, tmp_path / "scratch", part_bytes=2000)
    assert len(split.parts) > 5
    merged = split.merged()
    assert split.parts == [merged] and json.loads(merged.read_bytes()) == events
    assert [p.name for p in (tmp_path / "scratch").iterdir()] == [merged.name]
