"""Geometry of the HTML report's charts, computed from the reported facts.

The templates (reports/templates/_charts.html.j2) draw the SVG from these numbers; nothing here emits markup.
All coordinates are rounded to 0.1 so the output is stable across machines.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from ..model.comparemodel import TimeBin
from ..model.report import Report
from ..model.runmodel import RunReport
from ..base.text import plural
from ..base.units import fmt_duration, fmt_ratio

# The reported facts the HTML charts read (report.facts); a fact not named here is not computed for that
# format (engine/runs/selection.py; tests/test_fact_selection.py proves the list complete).
FACTS_READ = ("gpu_utilization", "gap_histogram", "launch_overhead", "utilization_timeline")

WIDTH = 760          # plot width in SVG user units (the SVG scales to the page width)
LEFT = 52            # room for the y-axis labels
RIGHT = 12

# Colour of each part of the time breakdown (engine/base/vocabulary.py WINDOW_PARTS gives the parts and their order).
PART_COLOURS = {
    "kernels": "#2563eb", "copies": "#0d9488", "sync": "#f59e0b", "allocation": "#b45309", "uvm": "#9333ea",
    "launch": "#dc2626", "host": "#db2777", "gpu-side": "#64748b", "other": "#9ca3af",
}

IDLE_COLOUR = "#dc2626"  # idle time in the gap histogram (copies in its bars take PART_COLOURS["copies"])


def _r(x: float) -> float:
    return round(float(x), 1)


FONT_SIZE = 11        # of the charts' text (svg text in _parts.html.j2), in SVG user units
CHAR_WIDTH = 7.0      # upper bound of a character's advance at FONT_SIZE in the system sans-serif fonts


def text_box(x: float, baseline: float, text: str, anchor: str = "middle") -> tuple[float, float, float, float]:
    """(left, right, top, bottom) of an SVG text at `x` with `anchor`, on `baseline`: a generous box, so that
    a line kept out of it never touches the glyphs."""
    width = len(text) * CHAR_WIDTH
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return left, left + width, baseline - FONT_SIZE, baseline + 3


# The y axis of a utilisation chart ends at 100 % unless the busiest bin stays below LOW_UTILISATION: then at the
# first of these tops above it, so that a GPU busy 1-3 % of the time shows its bins rather than a flat line.
LOW_UTILISATION = 0.25
LOW_TOPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.25)


def utilisation_top(peak: float) -> float:
    """Busy share at the top of a utilisation chart's y axis: 1.0, or a round value just above a low `peak`."""
    if peak <= 0 or peak >= LOW_UTILISATION:
        return 1.0
    return next(t for t in LOW_TOPS if t >= peak)


def _share_label(fraction: float) -> str:
    """An axis label: '0 %', '2.5 %', '100 %'."""
    return f"{fraction * 100:.4g} %"


def nice_ticks(span: float, target: int = 6) -> list[float]:
    """Round tick positions 0, step, 2*step ... within [0, span] (step = 1, 2 or 5 x 10^k)."""
    if span <= 0:
        return [0.0]
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(span // step) + 1)]


def breakdown(report: Report) -> list[dict[str, Any]]:
    """Per GPU: the window split into kernels / copies only / idle by cause (segments of one bar)."""
    util = {g["device_id"]: g for g in report.facts.get("gpu_utilization", [])}
    out = []
    for gpu in report.window:
        x, segments = 0.0, []
        for part in gpu.parts:
            w = part.share * WIDTH
            text = (f"{fmt_ratio(part.share, 0)} {part.label.lower()}" if part.share >= 0.3
                    else fmt_ratio(part.share, 0) if part.share >= 0.06 else "")
            segments.append(dict(key=part.key, label=part.label, colour=PART_COLOURS.get(part.key, "#9ca3af"),
                                 ns=part.ns, share=part.share, x=_r(x), w=_r(w), text=text))
            x += w
        idle = sum(p.share for p in gpu.parts if p.idle)
        row = util.get(gpu.device_id, {})
        # excluded_ns: the server's quiet stretches, which the window leaves out
        out.append(dict(device_id=gpu.device_id, window_ns=gpu.window_ns, segments=segments, idle_share=idle,
                        utilization=row.get("utilization"), excluded_ns=row.get("excluded_ns") or 0))
    return out


# Fixed colour of each bundled operation class (rules/vocabulary/operation_classes.yaml),
# so a class looks the same in every
# report: compute in blues, attention in violet, glue (norm, activation, elementwise, reduction) in warm colours,
# data movement in teal and green, `other` in grey. A team's own class takes a colour of TEAM_CLASS_COLOURS by
# its name.
CLASS_COLOURS = {
    "gemm": "#1d4ed8", "attention": "#7c3aed", "moe": "#0891b2", "communication": "#059669", "kv-cache": "#a21caf",
    "quantize": "#4f46e5", "norm": "#f59e0b", "activation": "#ea580c", "rotary": "#ca8a04", "sampling": "#be185d",
    "random": "#c026d3",
    "reduction": "#b45309", "elementwise": "#dc2626", "memcpy": "#0d9488", "memset": "#65a30d", "other": "#9ca3af",
}
TEAM_CLASS_COLOURS = ("#0f766e", "#9d174d", "#3730a3", "#854d0e", "#166534", "#6b21a8")


def class_colour(op_class: str) -> str:
    if op_class in CLASS_COLOURS:
        return CLASS_COLOURS[op_class]
    return TEAM_CLASS_COLOURS[sum(op_class.encode()) % len(TEAM_CLASS_COLOURS)]


def operations(report: Report) -> list[dict[str, Any]]:
    """Per phase (or the run) and GPU: its time by operation class, the segments of one stacked bar."""
    out = []
    for b in report.operations:
        x, segments = 0.0, []
        for c in b.classes:
            w = c.share * WIDTH
            text = (f"{c.op_class} {fmt_ratio(c.share, 0)}" if w >= CHAR_WIDTH * (len(c.op_class) + 6)
                    else fmt_ratio(c.share, 0) if w >= CHAR_WIDTH * 5 else "")
            segments.append(dict(op_class=c.op_class, colour=class_colour(c.op_class), ns=c.total_ns, share=c.share,
                                 count=c.op_count, x=_r(x), w=_r(w), text=text))
            x += w
        out.append(dict(phase=b.phase, device_id=b.device_id, total_ns=b.total_ns, segments=segments))
    return out


def _gap_split(report: Report) -> dict[int, tuple[float, float]]:
    """Per GPU, the time between kernels (the gaps of kernel_gaps, summed by gap_histogram) split into idle time
    and time in which only copies or memsets ran: (idle share, copy share), 0-1 each."""
    totals: dict[int, list[float]] = {}
    for b in report.facts.get("gap_histogram", []):
        t = totals.setdefault(b["device_id"], [0.0, 0.0])
        t[0] += b.get("idle_ns") or 0
        t[1] += b.get("copy_ns") or 0
    return {dev: (idle / (idle + copy), copy / (idle + copy)) for dev, (idle, copy) in totals.items() if idle + copy}


def rhythm(report: Report) -> list[dict[str, Any]]:
    """Per GPU, a schematic strip: mean kernel, mean gap, repeated; shows at a glance how long the GPU waits
    between kernels compared with how long a kernel runs. The part of the gaps in which copies or memsets ran
    is drawn as copies, not as waiting. Left out where the gaps are under a tenth of a kernel (nothing to see
    but kernels)."""
    split = _gap_split(report)
    out = []
    for row in report.facts.get("launch_overhead", []):
        k, g = row.get("mean_kernel_ns"), row.get("mean_gap_ns")
        if not k or g is None or (row.get("kernel_count") or 0) < 2 or g < 0.1 * k:
            continue
        idle_share, copy_share = split.get(row["device_id"], (1.0, 0.0))
        idle, copy = g * idle_share, g * copy_share
        cycles = 8
        period = k + g
        scale = WIDTH / (cycles * period)
        blocks, copies = [], []
        for i in range(cycles):
            x = i * period * scale
            blocks.append(dict(x=_r(x), w=_r(max(k * scale, 0.6))))
            if copy * scale >= 0.3:
                copies.append(dict(x=_r(x + k * scale), w=_r(copy * scale)))
        ticks = [dict(x=_r(t * scale), label=fmt_duration(t)) for t in nice_ticks(cycles * period, 5)]
        out.append(dict(device_id=row["device_id"], kernel_ns=k, gap_ns=g, idle_ns=idle, copy_ns=copy,
                        mostly_copies=copy > idle, blocks=blocks, copies=copies, copy_colour=PART_COLOURS["copies"],
                        ticks=ticks, gap_to_kernel=idle / k))
    return out


def timeline(report: Report) -> dict[str, Any] | None:
    """GPU utilisation over time, one small chart per GPU on a shared time axis."""
    rows = report.facts.get("utilization_timeline", [])
    if not rows:
        return None
    t0 = min(r["bin_start_ns"] for r in rows)
    span = max(r["bin_end_ns"] for r in rows) - t0
    if span <= 0:
        return None
    height = 90
    devices: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        devices.setdefault(r["device_id"], []).append(r)
    util = {g["device_id"]: g.get("utilization") for g in report.facts.get("gpu_utilization", [])}
    charts = []
    for dev, bins in sorted(devices.items()):
        fractions = [min(max(b["busy_fraction"] or 0.0, 0.0), 1.0) for b in bins]
        top = utilisation_top(max(fractions, default=0.0))
        bars = []
        for b, frac in zip(bins, fractions):
            x = (b["bin_start_ns"] - t0) / span * WIDTH
            w = (b["bin_end_ns"] - b["bin_start_ns"]) / span * WIDTH
            h = min(frac / top, 1.0) * height
            bars.append(dict(x=_r(x), w=_r(max(w - 0.4, 0.4)), h=_r(h), y=_r(height - h),
                             tip=f"{fmt_duration(b['bin_start_ns'] - t0)}–{fmt_duration(b['bin_end_ns'] - t0)}: "
                                 f"busy {fmt_ratio(frac, 1 if top < 1 else 0)}"))
        mean = util.get(dev)
        yticks = [dict(y=_r(height - f * height), label=_share_label(f * top)) for f in (0, 0.5, 1)]
        charts.append(dict(device_id=dev, bars=bars, mean=mean, top=top, scaled=top < 1, yticks=yticks,
                           mean_y=_r(height - min(mean / top, 1.0) * height) if mean is not None else None))
    ticks = [dict(x=_r(t / span * WIDTH), label=fmt_duration(t)) for t in nice_ticks(span)]
    return dict(height=height, charts=charts, ticks=ticks, span_ns=span)


def _round_duration(ns: float) -> tuple[str, str]:
    """A round bucket bound as (number, unit): 5000 -> ('5', 'µs')."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= size:
            return f"{ns / size:g}", unit
    return f"{ns:g}", "ns"


def bucket_label(lower_ns: float, upper_ns: float | None) -> str:
    """A gap-length bucket in words: '< 1 µs', '5-10 µs', '100 µs-1 ms', '> 10 ms'."""
    if upper_ns is None:
        return "> " + " ".join(_round_duration(lower_ns))
    if lower_ns <= 0:
        return "< " + " ".join(_round_duration(upper_ns))
    (lo, lo_unit), (hi, hi_unit) = _round_duration(lower_ns), _round_duration(upper_ns)
    return f"{lo}-{hi} {hi_unit}" if lo_unit == hi_unit else f"{lo} {lo_unit}-{hi} {hi_unit}"


def _log_position(value: float, buckets: list[dict[str, Any]]) -> float | None:
    """Position of `value` (ns) on the histogram's bucket axis, 0..len(buckets), log-interpolated inside a bucket."""
    for i, b in enumerate(buckets):
        lo, hi = b["lower_ns"], b["upper_ns"]
        if value >= lo and (hi is None or value < hi):
            if hi is None:
                return i + 0.5
            if lo <= 0:
                return i + value / hi
            return i + math.log(value / lo) / math.log(hi / lo)
    return None


def gap_histogram(report: Report) -> list[dict[str, Any]]:
    """Per GPU: bars of the time between kernels by gap length, each split into idle time (below) and time in which
    only copies or memsets ran (above, drawn as copies), with the mean kernel duration marked on the same axis."""
    rows = report.facts.get("gap_histogram", [])
    mean_kernel = {g["device_id"]: g.get("mean_kernel_ns") for g in report.facts.get("gpu_utilization", [])}
    devices: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        devices.setdefault(r["device_id"], []).append(r)
    height, out = 110, []
    for dev, buckets in sorted(devices.items()):
        total_gaps = sum(b["gap_count"] for b in buckets)
        if not total_gaps:
            continue
        slot = WIDTH / len(buckets)
        top = max(b["time_share"] for b in buckets) or 1.0
        bars = []
        for i, b in enumerate(buckets):
            h = b["time_share"] / top * height
            total, copy = b["total_gap_ns"], b.get("copy_ns") or 0
            copy_h = h * copy / total if total else 0.0
            cx = _r(i * slot + slot / 2)
            bars.append(dict(x=_r(i * slot + slot * 0.12), w=_r(slot * 0.76), cx=cx,
                             h=_r(h), y=_r(height - h), label=bucket_label(b["lower_ns"], b["upper_ns"]),
                             idle_h=_r(h - copy_h), idle_y=_r(height - h + copy_h), copy_h=_r(copy_h),
                             count=b["gap_count"],
                             count_text=plural(b["gap_count"], "gap") if b["gap_count"] else "–",
                             share_text=fmt_ratio(b["time_share"], 0) if b["gap_count"] else "",
                             text_x=cx, text_y=_r(height - h - 4), text_anchor="middle",
                             total_ns=total, idle_ns=b.get("idle_ns") or 0, copy_ns=copy,
                             time_share=b["time_share"]))
        marker: dict[str, Any] | None = None
        k = mean_kernel.get(dev)
        if k:
            pos = _log_position(k, buckets)
            if pos is not None:
                marker_x = _r(pos * slot)
                marker = dict(x=marker_x, label=f"mean kernel {fmt_duration(k)}")
                _clear_of_line(bars, marker_x)
        out.append(dict(device_id=dev, bars=bars, height=height, marker=marker, gap_count=total_gaps,
                        total_ns=sum(b["total_gap_ns"] for b in buckets),
                        idle_ns=sum(b.get("idle_ns") or 0 for b in buckets),
                        copy_ns=sum(b.get("copy_ns") or 0 for b in buckets),
                        idle_colour=IDLE_COLOUR, copy_colour=PART_COLOURS["copies"]))
    return out


MARKER_CLEARANCE = 4  # SVG units between the dashed mean-kernel line and the text beside it


def _clear_of_line(bars: list[dict[str, Any]], line_x: float) -> None:
    """Move each bar's share label that the vertical line at `line_x` would cross to the side of the line
    facing the bar's centre, so that the dashed mean-kernel line never runs through a label."""
    for bar in bars:
        if not bar["share_text"]:
            continue
        left, right, _, _ = text_box(bar["text_x"], bar["text_y"], bar["share_text"], bar["text_anchor"])
        if left - MARKER_CLEARANCE < line_x < right + MARKER_CLEARANCE:
            if bar["cx"] <= line_x:
                bar.update(text_x=_r(line_x - MARKER_CLEARANCE), text_anchor="end")
            else:
                bar.update(text_x=_r(line_x + MARKER_CLEARANCE), text_anchor="start")


def charts(report: Report) -> dict[str, Any]:
    return dict(width=WIDTH, left=LEFT, right=RIGHT, breakdown=breakdown(report), rhythm=rhythm(report),
                timeline=timeline(report), histogram=gap_histogram(report), operations=operations(report))


# Segments of a rank's bar in the multi-rank report: (key, label, CSS colour).
RANK_SEGMENTS = (
    ("compute", "Compute kernels", "#2563eb"),
    ("exposed_comm", "NCCL with no compute beside it", "#f59e0b"),
    ("other", "Idle, copies only or other", "#d1d5db"),
)


def rank_bars(run: RunReport) -> dict[str, Any] | None:
    """Multi-rank run: one bar per rank over its GPU window, on a shared scale:
    compute kernels, NCCL with no compute beside it, the rest; a line marks the straggler's compute time."""
    ranks = [(r, r.window_ns) for r in run.ranks if r.window_ns]
    if not ranks:
        return None
    span = max(window for _, window in ranks)
    scale = WIDTH / span
    bars = []
    for r, window in ranks:
        compute, exposed = r.compute_ns or 0, r.exposed_comm_ns or 0
        values = {"compute": compute, "exposed_comm": exposed, "other": max(window - compute - exposed, 0)}
        x, segments = 0.0, []
        for key, label, colour in RANK_SEGMENTS:
            w = values[key] * scale
            share = values[key] / window
            segments.append(dict(key=key, label=label, colour=colour, x=_r(x), w=_r(w),
                                 tip=f"{label}: {fmt_duration(values[key])} ({fmt_ratio(share, 0)})",
                                 text=fmt_ratio(share, 0) if w >= 44 else ""))
            x += w
        bars.append(dict(rank=r.rank, straggler=r.is_straggler, segments=segments, window_ns=r.window_ns))
    top = run.balance.max_compute_ns
    marker = dict(x=_r(top * scale), label=f"compute of the busiest rank, {fmt_duration(top)}") if top else None
    ticks = [dict(x=_r(t * scale), label=fmt_duration(t)) for t in nice_ticks(span, 5)]
    return dict(width=WIDTH, left=LEFT, right=RIGHT, bars=bars, ticks=ticks, segments=RANK_SEGMENTS, marker=marker)


def compare_timeline(timelines: dict[Literal["before", "after"], list[TimeBin]]) -> dict[str, Any] | None:
    """Before and after GPU utilisation over time on one chart: a polyline each, time since each profile's
    first GPU operation on a shared axis, 0-100 % busy on the y axis."""
    spans = [bins[-1].t_end_ns for bins in timelines.values() if bins]
    span = max(spans, default=0)
    if span <= 0:
        return None
    height = 140
    lines = []
    sides: tuple[tuple[Literal["before", "after"], str], ...] = (("before", "#dc2626"), ("after", "#2563eb"))
    for name, colour in sides:
        bins = timelines.get(name) or []
        points = []
        for b in bins:
            y = _r(height - min(max(b.busy, 0.0), 1.0) * height)
            points.append(f"{_r(b.t_start_ns / span * WIDTH)},{y}")
            points.append(f"{_r(b.t_end_ns / span * WIDTH)},{y}")
        if points:
            mean = sum(b.busy * (b.t_end_ns - b.t_start_ns) for b in bins) / (bins[-1].t_end_ns or 1)
            lines.append(dict(name=name, colour=colour, points=" ".join(points), mean=mean))
    ticks = [dict(x=_r(t / span * WIDTH), label=fmt_duration(t)) for t in nice_ticks(span)]
    yticks = [dict(y=_r(height - f * height), label=fmt_ratio(f, 0)) for f in (0, 0.25, 0.5, 0.75, 1.0)]
    return dict(width=WIDTH, left=LEFT, right=RIGHT, height=height, lines=lines, ticks=ticks, yticks=yticks,
                span_ns=span)
