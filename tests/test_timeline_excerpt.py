"""The timeline excerpt (fact timeline_excerpt, engine/reports/timeline.py): one stretch of the profile's own
events, drawn in the HTML report as the Nsight Systems timeline shows them and written as a text strip in the
Markdown. The events are checked against the export itself, read here with sqlite3, so a wrong window, a lost
or invented event or a wrong duration shows; the Chromium test checks what the browser actually draws and saves
screenshots of the excerpt (tests/artifacts/timeline_excerpt_<scenario>.png, git-ignored).
"""

from __future__ import annotations

import base64
import json
import sqlite3

import pytest

from chromium import Browser, page_problems, require_chromium
from conftest import REPO, scenario_analysis
from nsys_diagnose.reports import timeline
from nsys_diagnose.reports.render import render

ARTIFACTS = REPO / "tests" / "artifacts"
GRAPH_SCENARIO = "graph_decode_graph"  # CUDA graphs traced in graph mode: replays, not kernels, on the GPU


def _rows(name: str) -> list[dict]:
    return scenario_analysis(name)[1].facts["timeline_excerpt"]


def _export_gpu_ops(path: str, w0: int, w1: int) -> list[tuple[int, int, int, int, str]]:
    """(start, duration, device, stream, kind) of every kernel, graph replay, copy and memset overlapping
    [w0, w1), straight from the export's CUPTI tables."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    out = []
    for table, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "graph"),
                        ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if table in tables:
            out += [(s, e - s, d, st, kind) for s, e, d, st in con.execute(
                f"SELECT start, [end], deviceId, streamId FROM {table} WHERE start < ? AND [end] > ?", (w1, w0))]
    con.close()
    return sorted(out)


def _drawn_gpu_ops(rows: list[dict]) -> list[tuple[int, int, int, int, str]]:
    return sorted((r["start_ns"], r["dur_ns"], r["device_id"], r["stream_id"], r["kind"])
                  for r in rows if r["track"] == "gpu")


@pytest.mark.parametrize("name", ["eager_decode", GRAPH_SCENARIO, "prefill_decode_nvtx", "multi_gpu_straggler"])
def test_the_excerpt_holds_exactly_the_exports_gpu_work_in_its_window(name):
    rows = _rows(name)
    assert rows, f"{name}: no excerpt"
    w0, w1 = rows[0]["window_start_ns"], rows[0]["window_end_ns"]
    assert 0 < w1 - w0 < scenario_analysis(name)[1].profile.duration_ns
    assert _drawn_gpu_ops(rows) == _export_gpu_ops(scenario_analysis(name)[1].profile.path, w0, w1)


def test_without_decode_ranges_the_window_is_the_most_idle_run_of_operations():
    rows = _rows("eager_decode")  # NVTX ranges are execute_model: no phase, so the idle-cluster window
    reason = rows[0]["window_reason"]
    assert reason.startswith("the 24 consecutive operations of GPU 0 with the most launch idle time"), reason
    w0, w1 = rows[0]["window_start_ns"], rows[0]["window_end_ns"]
    ops = [r for r in rows if r["track"] == "gpu"]
    assert len(ops) == 24 and ops[-1]["end_ns"] == w1 and ops[0]["start_ns"] >= w0
    idle = [r for r in rows if r["track"] == "idle"]
    assert idle and {r["kind"] for r in idle} <= {"launch", "gpu-side", "sync", "host"}
    # the launch calls that issued the kernels are there, on the thread that made them
    launches = [r for r in rows if r["track"] == "api" and r["name"] == "cudaLaunchKernel"]
    assert len(launches) >= sum(1 for r in ops if r["kind"] == "kernel") - 1


@pytest.mark.parametrize("name, cause, verdict", [
    ("eager_decode", "launch", "launch-bound"), ("sync_storm", "sync", "frequent-synchronization"),
    ("graph_host_gaps", "host", "host-bound"), ("alloc_churn", "allocation", "allocator-churn"),
    ("tiny_kernels_queued", "gpu-side", "small-kernels")])
def test_the_stretch_shows_the_pattern_the_verdict_names(name, cause, verdict):
    report = scenario_analysis(name)[1]
    assert report.verdict.rule == verdict
    rows = report.facts["timeline_excerpt"]
    assert f"with the most {cause} idle time" in rows[0]["window_reason"]
    idle = [r for r in rows if r["track"] == "idle"]
    assert max(idle, key=lambda r: r["dur_ns"])["kind"] == cause or \
        sum(r["dur_ns"] for r in idle if r["kind"] == cause) > sum(r["dur_ns"] for r in idle) / 2


def test_with_decode_ranges_the_window_is_the_decode_step_of_median_duration():
    name = "prefill_decode_nvtx"
    rows = _rows(name)
    con = sqlite3.connect(f"file:{scenario_analysis(name)[1].profile.path}?mode=ro", uri=True)
    steps = sorted(((e - s), s, e) for s, e in con.execute(
        "SELECT n.start, n.[end] FROM NVTX_EVENTS n LEFT JOIN StringIds t ON t.id = n.textId "
        "WHERE coalesce(n.text, t.value) = 'decode' AND n.[end] IS NOT NULL"))
    con.close()
    median = steps[(len(steps) - 1) // 2]
    assert rows[0]["window_start_ns"] == median[1] and rows[0]["window_end_ns"] >= median[2]
    assert rows[0]["window_reason"].startswith(f"the decode step of median duration ({(len(steps) + 1) // 2} of "
                                               f"{len(steps)} NVTX decode ranges")
    assert any(r["track"] == "nvtx" and r["name"] == "decode" and r["start_ns"] == median[1] for r in rows)


def test_the_svg_geometry_is_proportional_to_time_and_keeps_the_order():
    report = scenario_analysis("eager_decode")[1]
    tl = timeline.excerpt(report)
    scale = tl["plot_w"] / tl["span_ns"]
    gpu_lanes = [lane for lane in tl["lanes"] if lane["key"].startswith("gpu")]
    assert [lane["label"] for lane in tl["lanes"]] == ["thread 48213 · NVTX", "thread 48213 · CUDA API",
                                                        "GPU 0 · stream 7"]
    events = gpu_lanes[0]["events"]
    assert [e["start_ns"] for e in events] == sorted(e["start_ns"] for e in events)
    for e in events:
        assert e["w"] == pytest.approx(max(e["dur_ns"] * scale, 0.6), abs=0.11)
        assert e["x"] == pytest.approx(tl["label_w"] + max(e["start_ns"] - tl["start_ns"], 0) * scale, abs=0.06)
    assert tl["bands"] and all(b["cause"] in timeline.EVENT_COLOURS or b["colour"] for b in tl["bands"])
    # at most excerpt_max_host events per thread track: the picture stays readable on any export
    assert all(len(lane["events"]) <= 200 for lane in tl["lanes"])


def test_copies_are_drawn_as_copies_and_no_idle_band_covers_one():
    """pageable_copies (PCIe-bound): the stretch's 256 MiB copies sit in the GPU lane in the copies colour, named
    in the legend, and the idle shading behind the lanes stays where nothing ran: never over a copy."""
    report = scenario_analysis("pageable_copies")[1]
    tl = timeline.excerpt(report)
    gpu = [e for lane in tl["lanes"] if lane["key"].startswith("gpu") for e in lane["events"]]
    copies = [e for e in gpu if e["kind"] == "memcpy"]
    assert copies and {e["colour"] for e in copies} == {timeline.EVENT_COLOURS["memcpy"]}
    assert sum(e["dur_ns"] for e in copies) > 0.5 * tl["span_ns"]
    assert {"colour": timeline.EVENT_COLOURS["memcpy"], "label": "copy", "band": False} in tl["legend"]
    assert tl["bands"]
    for b in tl["bands"]:
        b0, b1 = b["start_ns"], b["start_ns"] + b["dur_ns"]
        assert not [e for e in gpu if e["start_ns"] < b1 and e["start_ns"] + e["dur_ns"] > b0], b


def test_the_markdown_strip_shows_launches_above_kernels_and_idle_by_cause():
    report = scenario_analysis("eager_decode")[1]
    md = render(report, "md")
    assert "### A stretch of the timeline" in md
    strip = timeline.text_strip(report)
    lanes = strip["lines"][:-1]
    assert len({len(line) for line in lanes}) == 1  # one column per slice of time in every lane
    api = next(line for line in lanes if "CUDA API" in line)
    gpu = next(line for line in lanes if "stream 7" in line)
    idle = next(line for line in lanes if "idle" in line)
    assert api.count("L") >= 20 and gpu.count("█") >= 20 and idle.count("l") >= 20
    assert "l idle: launch" in strip["legend"] and "█ kernel" in strip["legend"]
    for line in strip["lines"]:
        assert line in md


def test_a_capture_without_gpu_work_has_no_excerpt():
    report = scenario_analysis("nvtx_only")[1]
    assert not report.facts.get("timeline_excerpt")
    assert "A stretch of the timeline" not in render(report, "html")
    assert "A stretch of the timeline" not in render(report, "md")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["eager_decode", GRAPH_SCENARIO])
def test_chromium_draws_the_profiles_own_events(tmp_path, name):
    """What the browser draws: one rect per GPU operation of the excerpt, in the export's order, each as wide
    on screen as its duration says; a screenshot of the excerpt is saved for people to look at."""
    binary = require_chromium()
    report = scenario_analysis(name)[1]
    rows = report.facts["timeline_excerpt"]
    page = tmp_path / f"{name}.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    browser = Browser(binary, tmp_path / "chromium-profile", tmp_path / "chromium.log")
    try:
        s = browser.new_page(1280, 900)
        browser.send("Page.navigate", {"url": page.as_uri()}, session=s)
        browser.wait_for("Page.loadEventFired", s)
        probe = """JSON.stringify((() => {
            const svg = document.querySelector('#excerpt svg.excerpt');
            const box = svg.getBoundingClientRect();
            const ops = [...svg.querySelectorAll('rect.event[data-track="gpu"]')].map(r => ({
                start: Number(r.dataset.startNs), dur: Number(r.dataset.durNs), kind: r.dataset.kind,
                px: r.getBoundingClientRect().width, title: r.querySelector('title').textContent}));
            const section = document.getElementById('excerpt').getBoundingClientRect();
            return {ops, svg_px: box.width, idle: svg.querySelectorAll('rect.idle').length,
                    lanes: [...svg.querySelectorAll('g.lane > text')].map(t => t.textContent),
                    clip: {x: section.x, y: section.y + window.scrollY, width: section.width, height: section.height},
                    page_px: document.documentElement.scrollWidth};
        })())"""
        drawn = json.loads(browser.send("Runtime.evaluate", {"expression": probe, "returnByValue": True},
                                        session=s)["result"]["value"])
        ARTIFACTS.mkdir(exist_ok=True)
        shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                       "clip": {**drawn["clip"], "scale": 1}}, session=s)["data"]
        (ARTIFACTS / f"timeline_excerpt_{name}.png").write_bytes(base64.b64decode(shot))
        problems = page_problems(browser.events, {page.as_uri()})
    finally:
        browser.close()
    assert not problems, problems
    facts = [r for r in rows if r["track"] == "gpu"]
    export = _export_gpu_ops(report.profile.path, rows[0]["window_start_ns"], rows[0]["window_end_ns"])
    # count and order: the GPU lanes drawn top to bottom, each in start order, hold exactly the export's operations
    assert len(drawn["ops"]) == len(facts) == len(export)
    assert sorted((o["start"], o["dur"], o["kind"]) for o in drawn["ops"]) == [(s, d, k) for s, d, _, _, k in export]
    by_lane = [o["start"] for o in drawn["ops"]]
    assert by_lane == [r["start_ns"] for r in facts]  # the fact's order: per stream, in start order
    # durations: on-screen width over duration is one scale for every operation wide enough to measure
    window_ns = rows[0]["window_end_ns"] - rows[0]["window_start_ns"]
    px_per_ns = drawn["svg_px"] * timeline.PLOT_W / timeline.WIDTH / window_ns
    for o in drawn["ops"]:
        inside = min(o["start"] + o["dur"], rows[0]["window_end_ns"]) - max(o["start"], rows[0]["window_start_ns"])
        assert o["px"] == pytest.approx(max(inside * px_per_ns, 0.6 * drawn["svg_px"] / timeline.WIDTH), abs=0.3)
        assert o["title"].split(" (")[0] and ("kernel" in o["title"] or "replay" in o["title"] or "copy" in o["title"])
    if name == GRAPH_SCENARIO:
        assert {o["kind"] for o in drawn["ops"]} >= {"graph"}
    assert drawn["idle"] == sum(1 for r in rows if r["track"] == "idle")
    assert drawn["page_px"] <= 1280
    assert (ARTIFACTS / f"timeline_excerpt_{name}.png").stat().st_size > 5_000


def test_a_long_nvtx_label_is_cut_to_its_event_and_the_tooltip_keeps_it_whole():
    """A long NVTX label written inside its range never runs past the range nor the chart's edge, at the charts'
    upper bound of a character's advance; the range's tooltip keeps the whole name."""
    from nsys_diagnose.reports.charts import CHAR_WIDTH

    report = scenario_analysis("eager_decode")[1].model_copy(deep=True)
    long = "WWWW decode_step_for_request_batch_" + "M" * 300
    for r in report.facts["timeline_excerpt"]:
        if r["track"] == "nvtx":
            r["name"], r["label"] = long, long
    tl = timeline.excerpt(report)
    written = [e for lane in tl["lanes"] for e in lane["events"] if e["track"] == "nvtx" and e["text"]]
    assert written, "no NVTX range wide enough to hold its name"
    for e in written:
        assert len(e["text"]) < len(long) and "…" in e["text"]
        assert e["text_x"] + len(e["text"]) * CHAR_WIDTH <= e["x"] + e["w"] - timeline.LABEL_PAD + 0.05
        assert e["text_x"] + len(e["text"]) * CHAR_WIDTH <= tl["width"]
        assert long in e["tip"]
    doc = render(report, "html")
    assert long in doc  # in the <title> tooltip
    assert f">{written[0]['text']}</text>" in doc


def test_a_range_that_began_before_the_excerpt_reads_as_a_negative_offset():
    from nsys_diagnose.reports.timeline import _offset
    assert _offset(-4_100_000) == "-4.1 ms" and _offset(4_100_000) == "+4.1 ms"
