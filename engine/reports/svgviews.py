"""Where the SVG of each HTML chart puts its text, axes and bars, beyond the series geometry charts.py and
timeline.py compute: the offsets, view boxes and label anchors the templates (_charts.html.j2, _timeline.html.j2)
print as they are. Each function takes a chart's dictionary and returns it with these positions added."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Chart = dict[str, Any]

BAR_TEXT_BASELINE = 19.5  # of the text inside a 30-unit stacked bar
MIN_BAR_H = 0.8           # a histogram bar with any time stays visible
RANK_ROW_H = 30           # one rank's bar and the space under it
MARKER_ROOM = 160         # a marker label closer than this to the right edge is written leftwards


def _centre(segment: Chart) -> float:
    return round(segment["x"] + segment["w"] / 2, 1)


def _drawn(bar: Chart) -> None:
    """A stacked bar's `drawn` segments (those with any width), each with the centre of its text."""
    for s in bar["segments"]:
        s["cx"] = _centre(s)
    bar["drawn"] = [s for s in bar["segments"] if s["w"] > 0]


def _anchored(ticks: Sequence[Chart]) -> None:
    """The first tick label starts at its tick, the others are centred on theirs."""
    for i, t in enumerate(ticks):
        t["anchor"] = "start" if i == 0 else "middle"


def report_charts(ch: Chart) -> Chart:
    """The HTML report's charts (charts.charts): the operation bars, the window bars, the rhythm strips, the gap
    histograms and the utilisation timeline."""
    width = ch["width"]
    multi_gpu = len({b["device_id"] for b in ch["operations"]}) > 1
    for b in ch["operations"]:
        b["gpu_shown"] = multi_gpu
    for b in [*ch["operations"], *ch["breakdown"]]:
        _drawn(b)
    for x in ch["rhythm"]:
        waits_longer = not x["mostly_copies"] and x["gap_to_kernel"] >= 1
        x["waits_longer"] = waits_longer
        x["waits_share"] = not x["mostly_copies"] and not waits_longer and x["gap_to_kernel"] >= 0.25
        _anchored(x["ticks"])
    for h in ch["histogram"]:
        height = h["height"]
        h.update(view_h=height + 70, axis_y=height + 0.5, label_y=height + 15, count_y=height + 29)
        for b in h["bars"]:
            b.update(idle_bar=bool(b["idle_ns"] or not b["copy_ns"]), idle_bar_h=max(b["idle_h"], MIN_BAR_H),
                     copy_bar_h=max(b["copy_h"], MIN_BAR_H))
        if h["marker"]:
            rightwards = h["marker"]["x"] < width - MARKER_ROOM
            h["marker"].update(dx=5 if rightwards else -5, anchor="start" if rightwards else "end")
    if tl := ch["timeline"]:
        height = tl["height"]
        tl.update(view_w=width + ch["left"] + ch["right"], view_h=height + 30, axis_y=height + 0.5,
                  tick_end=height + 4, tick_label_y=height + 17)
        for c in tl["charts"]:
            for t in c["yticks"]:
                t["label_y"] = t["y"] + 4
    return ch


def rank_bars(bars: Chart | None) -> Chart | None:
    """A multi-rank run's bars (charts.rank_bars): a row per rank, the axis under the last."""
    if bars is None:
        return None
    for i, b in enumerate(bars["bars"]):
        b.update(y=i * RANK_ROW_H, label_y=i * RANK_ROW_H + 15)
        _drawn(b)
    axis = len(bars["bars"]) * RANK_ROW_H
    bars.update(view_w=bars["width"] + bars["left"] + bars["right"], view_h=axis + 26, axis_y=axis,
                tick_label_y=axis + 14)
    return bars


def compare_timeline(chart: Chart | None) -> Chart | None:
    """A comparison's utilisation lines (charts.compare_timeline)."""
    if chart is None:
        return None
    chart.update(view_w=chart["width"] + chart["left"] + chart["right"], view_h=chart["height"] + 34,
                 tick_label_y=chart["height"] + 16)
    for t in chart["yticks"]:
        t["label_y"] = t["y"] + 4
    return chart


def excerpt(tl: Chart | None, kineto: bool) -> Chart | None:
    """The timeline excerpt (timeline.excerpt): lanes, events and the axis; `kineto`: the profile is a PyTorch
    trace, whose own clock the start is given in."""
    if tl is None:
        return None
    tl.update(start_s=tl["start_ns"] / 1e9, view_h=tl["height"] + 4, event_h=tl["lane_h"] - 2,
              axis_line_y=tl["axis_y"] + 0.5, tick_end=tl["axis_y"] + 4, tick_label_y=tl["axis_y"] + 17,
              clock="the trace's own ts, as Perfetto shows it" if kineto else "where the Nsight Systems GUI shows it")
    for lane in tl["lanes"]:
        lane.update(text_y=lane["y"] + 13, grid_y=lane["y"] + tl["lane_h"] + 0.5, event_y=lane["y"] + 1)
        for e in lane["events"]:
            e["text_colour"] = "#1f2937" if e["track"] == "nvtx" else "#fff"
    _anchored(tl["ticks"])
    return tl


def text_strip(strip: Chart | None) -> Chart | None:
    """The Markdown report's text strip (timeline.text_strip): its start in seconds."""
    if strip is not None:
        strip["start_s"] = strip["start_ns"] / 1e9
    return strip
