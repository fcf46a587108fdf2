"""The timeline excerpt draws each lane as busy as the numbers say. The median decode step of an eager decode
holds ~300 kernels of a few µs with launch gaps between them: drawn one rect each, the anti-aliased slivers read
as a GPU busy the whole step, and a text column for each kernel it touches marked the strip solid, while the
report says the GPU is busy ~38 % of the step. The drawn busy share must be the step's, within a tolerance."""

from __future__ import annotations

import pytest

from nsys_diagnose.reports import timeline
from nsys_diagnose.reports.render import render

from conftest import scenario_analysis

# drawn share against the excerpt's busy share: one point in the SVG, two text columns (of 96) in the strip
SVG_TOLERANCE = 0.01
STRIP_TOLERANCE = 2 / timeline.TEXT_COLS
MEDIAN_STEP = ("prefill_decode_nvtx", "trtllm_forward_steps", "short_decode_after_prefills")
SPARSE = ("eager_decode", "tiny_kernels_queued")


def _union(intervals: list[tuple[float, float]]) -> float:
    total, start, end = 0.0, None, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += (end - start) if end is not None else 0.0
            start, end = s, e
        else:
            end = max(end, e)
    return total + ((end - start) if end is not None else 0.0)


def _share(rows: list[dict], track: str, w0: int, w1: int) -> float:
    """The share of the excerpt that the union of the track's events covers."""
    parts = [(max(r["start_ns"], w0), min(r["end_ns"], w1)) for r in rows if r["track"] == track]
    return _union([(s, e) for s, e in parts if e > s]) / (w1 - w0)


def _drawn_share(lane: dict) -> float:
    """The share of the plot a lane paints: its coverage bars' area when it has them, else its events' union."""
    if lane["cover"]:
        return sum(c["share"] * c["w"] for c in lane["cover"]) / timeline.PLOT_W
    return _union([(e["x"], e["x"] + e["w"]) for e in lane["events"] if e["painted"]]) / timeline.PLOT_W


@pytest.mark.parametrize("scenario", MEDIAN_STEP + SPARSE)
def test_the_svg_paints_the_gpu_lane_as_busy_as_the_stretch_was(scenario: str) -> None:
    report = scenario_analysis(scenario)[1]
    rows = report.facts["timeline_excerpt"]
    tl = timeline.excerpt(report)
    busy = _share(rows, "gpu", tl["start_ns"], tl["end_ns"])
    gpu = [lane for lane in tl["lanes"] if lane["key"].startswith("gpu")]
    assert len(gpu) == 1
    assert _drawn_share(gpu[0]) == pytest.approx(busy, abs=SVG_TOLERANCE)


def test_the_median_decode_step_is_drawn_as_busy_as_the_steps_table_says() -> None:
    """prefill_decode_nvtx: the steps table says decode keeps the GPU busy 37 % of its steps; the drawing of the
    median step paints ~38 % of the GPU lane, as coverage bars, and says how to read them."""
    facts, report = scenario_analysis("prefill_decode_nvtx")
    decode = next(r for r in facts.rows("steps") if r["phase"] == "decode")
    tl = timeline.excerpt(report)
    assert tl["reason"].startswith("the decode step of median duration")
    lane = next(lane for lane in tl["lanes"] if lane["key"].startswith("gpu"))
    assert lane["cover"] and not any(e["painted"] for e in lane["events"])
    assert _drawn_share(lane) == pytest.approx(decode["busy_share"], abs=0.02)
    html = render(report, "html")
    section = html[html.index('<section id="excerpt"'):]
    section = section[:section.index("</section>")]
    assert section.count('<rect class="cover"') == sum(len(lane["cover"]) for lane in tl["lanes"])
    assert "the share its events cover as the height of a bar" in section
    # every operation keeps its rect, unpainted, for its tooltip
    assert section.count('data-track="gpu"') == sum(1 for r in facts.rows("timeline_excerpt") if r["track"] == "gpu")


@pytest.mark.parametrize("scenario", MEDIAN_STEP + SPARSE)
def test_the_text_strip_marks_as_many_columns_as_the_gpu_was_busy_and_idle(scenario: str) -> None:
    report = scenario_analysis(scenario)[1]
    rows = report.facts["timeline_excerpt"]
    strip = timeline.text_strip(report)
    w0, w1 = strip["start_ns"], strip["start_ns"] + strip["span_ns"]
    lanes = {line.split("|")[0].strip(): line.split("|")[1] for line in strip["lines"][:-1]}
    gpu = next(body for label, body in lanes.items() if "stream" in label)
    idle = lanes["GPU 0 · idle"]
    full = sum(ch not in (" ", timeline.SLIVER_MARK) for ch in gpu) / timeline.TEXT_COLS
    assert full == pytest.approx(_share(rows, "gpu", w0, w1), abs=STRIP_TOLERANCE)
    assert sum(ch != " " for ch in idle) / timeline.TEXT_COLS == pytest.approx(_share(rows, "idle", w0, w1),
                                                                              abs=STRIP_TOLERANCE)
    assert " " in gpu.strip() or scenario in SPARSE  # the median step's lane is not one solid bar
    for line in strip["lines"]:
        assert line in render(report, "md")


@pytest.mark.parametrize("scenario", MEDIAN_STEP + SPARSE)
def test_every_kind_of_event_a_lane_holds_shows_in_the_text_strip(scenario: str) -> None:
    # The one blocking call among an eager step's launches, the one copy among its kernels and the one gpu-side gap
    # among its launch gaps are too short to earn a column by their time; the HTML shows them, so must the strip.
    report = scenario_analysis(scenario)[1]
    rows = report.facts["timeline_excerpt"]
    strip = timeline.text_strip(report)
    bodies = {line.split("|")[0].strip(): line.split("|")[1] for line in strip["lines"][:-1]}
    for lane in timeline.lanes(rows):
        kinds = {timeline.TEXT_MARKS["nvtx" if r["track"] == "nvtx" else r["kind"]] for r in lane.events}
        assert kinds <= set(bodies[lane.label]), lane.label
    for device in {r["device_id"] for r in rows if r["track"] == "idle"}:
        causes = {timeline.IDLE_MARKS[r["kind"]] for r in rows if r["track"] == "idle" and r["device_id"] == device}
        assert causes <= set(bodies[f"GPU {device} · idle"])
