"""The timeline excerpt: one representative stretch of the profile (fact timeline_excerpt) laid out in lanes as
the Nsight Systems timeline shows it: per host thread its NVTX ranges, OS-runtime calls and CUDA API calls, per
GPU stream its kernels, copies and memsets, each GPU's idle gaps shaded by cause.

excerpt(report) gives the geometry of the HTML report's SVG (reports/templates/_timeline.html.j2 draws it);
text_strip(report) gives the same stretch as fixed-width text for Markdown, where an SVG cannot be embedded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .charts import CHAR_WIDTH, PART_COLOURS, nice_ticks
from ..model.report import Report
from ..base.text import shorten
from ..base.units import fmt_duration

# The reported facts the timeline excerpt (HTML) and text strip (Markdown) read; a fact not named here is not
# computed for that format (engine/runs/selection.py; tests/test_fact_selection.py proves the list complete).
FACTS_READ = ("timeline_excerpt",)

WIDTH = 960          # SVG user units; the SVG scales to the page width
LABEL_W = 168        # room for the lane labels on the left
PLOT_W = WIDTH - LABEL_W - 8
LANE_H = 18
LANE_GAP = 4
AXIS_H = 30
TEXT_COLS = 96       # width of the Markdown strip
MIN_LABEL_W = 56     # an event gets its name written inside when at least this wide
LABEL_PAD = 3        # between an event's edge and the name written inside it
TIP_CHARS = 400      # a tooltip shows this much of a name (C++ template names run to megabytes)
MIN_EVENT_W = 0.6    # an event narrower than this is drawn this wide, so that it shows
# A lane whose events average less than DENSE_PERIOD_W units each (an event and the gap after it) cannot show them
# one by one: anti-aliased slivers read as one solid bar. Such a lane is drawn as coverage instead: per COVER_W-wide
# column, a bar as high as the share of that time its events cover, so its drawn area is its busy share.
DENSE_PERIOD_W = 4.0
COVER_W = 4.0

EVENT_COLOURS = {
    "kernel": "#2563eb", "graph": "#1d4ed8", "memcpy": "#0d9488", "memset": "#0f766e",
    "launch": "#6366f1", "sync": "#f59e0b", "allocation": "#b45309", "osrt": "#64748b",
}
NVTX_COLOURS = ("#a7f3d0", "#bfdbfe", "#fde68a", "#fbcfe8", "#ddd6fe")
KIND_WORDS = {
    "kernel": "kernel", "graph": "CUDA-graph replay", "memcpy": "copy", "memset": "memset",
    "launch": "CUDA call that issues work", "sync": "blocking CUDA call", "allocation": "allocation or free call",
    "osrt": "OS-runtime call",
}
# One character per kind in the Markdown strip; idle causes use the first letter of the cause.
TEXT_MARKS = {"kernel": "█", "graph": "█", "memcpy": "▒", "memset": "▒", "launch": "L", "sync": "S",
              "allocation": "A", "osrt": "o", "nvtx": "─"}
SLIVER_MARK = "▏"    # where a lane's events are too short to earn a column of their own
IDLE_MARKS = {"launch": "l", "host": "h", "sync": "s", "allocation": "a", "gpu-side": "g", "uvm": "u", "other": "?"}


@dataclass
class Lane:
    key: tuple[Any, ...]
    label: str
    title: str
    events: list[dict[str, Any]] = field(default_factory=list)


def _thread_label(row: dict[str, Any]) -> str:
    return f"thread {row['tid']}" if row.get("tid") is not None else "thread ?"


def _nvtx_levels(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """NVTX ranges of one thread packed into levels: a range goes to the first level where it overlaps nothing,
    so nested ranges sit under the range that holds them."""
    levels: list[list[dict[str, Any]]] = []
    ends: list[int] = []
    for r in sorted(rows, key=lambda r: (r["start_ns"], -r["end_ns"])):
        for i, end in enumerate(ends):
            if r["start_ns"] >= end:
                levels[i].append(r)
                ends[i] = r["end_ns"]
                break
        else:
            levels.append([r])
            ends.append(r["end_ns"])
    return levels


def lanes(rows: list[dict[str, Any]]) -> list[Lane]:
    """The lanes of the excerpt, top to bottom: per host thread its NVTX levels, OS-runtime calls and CUDA API
    calls; then per GPU each stream's operations, in the fact's order within each lane."""
    out: list[Lane] = []
    threads = sorted({r["global_tid"] for r in rows if r["track"] in ("api", "nvtx", "osrt")})
    for g in threads:
        mine = [r for r in rows if r.get("global_tid") == g]
        name = _thread_label(mine[0])
        for level, ranges in enumerate(_nvtx_levels([r for r in mine if r["track"] == "nvtx"])):
            out.append(Lane(("nvtx", g, level), f"{name} · NVTX" + (f" {level + 1}" if level else ""),
                            "NVTX ranges of the thread", ranges))
        osrt = [r for r in mine if r["track"] == "osrt"]
        if osrt:
            out.append(Lane(("osrt", g), f"{name} · OS runtime", "OS-runtime calls of the thread", osrt))
        api = [r for r in mine if r["track"] == "api"]
        if api:
            out.append(Lane(("api", g), f"{name} · CUDA API", "CUDA API calls of the thread", api))
    streams = sorted({(r["device_id"], r["stream_id"]) for r in rows if r["track"] == "gpu"},
                     key=lambda k: (k[0], -1 if k[1] is None else k[1]))
    for dev, stream in streams:
        ops = [r for r in rows if r["track"] == "gpu" and r["device_id"] == dev and r["stream_id"] == stream]
        out.append(Lane(("gpu", dev, stream), f"GPU {dev} · stream {stream if stream is not None else '?'}",
                        f"GPU {dev}, CUDA stream {stream}", ops))
    return out


def _offset(ns: float) -> str:
    """'+4.1 ms', or '-4.1 ms' for a range that began before the excerpt (never '+-4.1 ms')."""
    return f"-{fmt_duration(-ns)}" if ns < 0 else f"+{fmt_duration(ns)}"


def _tip(r: dict[str, Any], w0: int) -> str:
    what = f"idle, cause: {r['kind']}" if r["track"] == "idle" else KIND_WORDS.get(r["kind"], r["kind"])
    return (f"{shorten(r['name'], TIP_CHARS)} ({what}): {fmt_duration(r['dur_ns'])}, "
            f"starts at {_offset(r['start_ns'] - w0)} in the excerpt, "
            f"{r['start_ns'] / 1e9:.6f} s into the capture")


def _colour(r: dict[str, Any], level: int) -> str:
    if r["track"] == "nvtx":
        return NVTX_COLOURS[level % len(NVTX_COLOURS)]
    return EVENT_COLOURS.get(r["kind"], "#9ca3af")


def _window(report: Report) -> tuple[list[dict[str, Any]], int, int, int]:
    """The excerpt's rows, its start and end (every row repeats them) and its span (at least 1 ns)."""
    rows = report.facts.get("timeline_excerpt") or []
    if not rows:
        return [], 0, 0, 0
    w0, w1 = rows[0]["window_start_ns"], rows[0]["window_end_ns"]
    return rows, w0, w1, max(w1 - w0, 1)


def _covered(events: list[dict[str, Any]], lo: float, hi: float) -> tuple[float, dict[str, Any] | None]:
    """How much of [lo, hi) the union of `events` covers (ns), and the event that covers most of it (None when
    none overlaps it)."""
    parts = sorted(((max(r["start_ns"], lo), min(r["end_ns"], hi), r) for r in events
                    if r["start_ns"] < hi and (r["end_ns"] > lo or r["start_ns"] >= lo)), key=lambda p: p[:2])
    total, reach, top, top_part = 0.0, lo, None, -1.0
    for s, e, r in parts:
        total += max(e - max(s, reach), 0)
        reach = max(reach, e)
        if e - s > top_part:
            top, top_part = r, e - s
    return total, top


def _columns(events: list[dict[str, Any]], w0: int, cell: float, count: int) -> list[tuple[float, dict | None]]:
    """Per column of `cell` ns from w0: the share of it the events cover (0-1) and the event covering most."""
    out = []
    for c in range(count):
        lo = w0 + c * cell
        covered, top = _covered(events, lo, lo + cell)
        out.append((min(covered / cell, 1.0), top))
    return out


def _coverage_bars(events: list[dict[str, Any]], w0: int, scale: float, level: int) -> list[dict[str, Any]]:
    """A dense lane's coverage columns: x, w, the covered share and its colour (that of the event covering most)."""
    count = int(PLOT_W / COVER_W)
    bars = []
    for c, (share, top) in enumerate(_columns(events, w0, COVER_W / scale, count)):
        if top is not None and share > 0:
            bars.append(dict(x=round(LABEL_W + c * COVER_W, 2), w=COVER_W, share=round(share, 4),
                             colour=_colour(top, level)))
    return bars


def _dense(lane: Lane) -> bool:
    return lane.key[0] != "nvtx" and len(lane.events) * DENSE_PERIOD_W > PLOT_W


def fitting_chars(width: float) -> int:
    """How many characters of a name fit in `width` SVG units with LABEL_PAD on both sides, at the charts' upper
    bound of a character's advance (charts.CHAR_WIDTH): a name written inside an event never runs past it, nor
    past the chart's edge; the event's tooltip keeps the whole name."""
    return max(int((width - 2 * LABEL_PAD) / CHAR_WIDTH), 0)


def excerpt(report: Report) -> dict[str, Any] | None:
    """Geometry of the excerpt's SVG: lanes with their events (x, width, colour, tooltip), idle bands behind each
    GPU's lanes, a time axis relative to the excerpt's start, and a legend of the kinds drawn."""
    rows, w0, w1, span = _window(report)
    if not rows:
        return None
    scale = PLOT_W / span

    def x_of(ns: int) -> float:
        return LABEL_W + (min(max(ns, w0), w1) - w0) * scale

    drawn, kinds, y = [], set(), 0
    device_rows: dict[int, list[float]] = {}
    for lane in lanes(rows):
        level = lane.key[2] if lane.key[0] == "nvtx" else 0
        dense = _dense(lane)
        events = []
        for r in lane.events:
            # rounded once, from the exact positions: rounding x and the end apart would add up over many events
            x_exact = x_of(r["start_ns"])
            x, w = round(x_exact, 1), round(max(x_of(r["end_ns"]) - x_exact, MIN_EVENT_W), 1)
            kinds.add("nvtx" if r["track"] == "nvtx" else r["kind"])
            label = r.get("label") or r["name"]
            chars = fitting_chars(w) if w >= MIN_LABEL_W else 0
            # in a dense lane the coverage bars are the picture; the events stay, unpainted, for their tooltips
            events.append(dict(x=x, w=w, colour=_colour(r, level), tip=_tip(r, w0), kind=r["kind"],
                               track=r["track"], start_ns=r["start_ns"], dur_ns=r["dur_ns"], name=r["name"],
                               label=label, chars=chars, text=shorten(label, chars) if chars >= 4 else "",
                               text_x=round(x + LABEL_PAD, 1), painted=not dense))
        drawn.append(dict(label=lane.label, title=lane.title, y=y, events=events, key="-".join(map(str, lane.key)),
                          cover=_coverage_bars(lane.events, w0, scale, level) if dense else []))
        if lane.key[0] == "gpu":
            device_rows.setdefault(lane.key[1], []).append(y)
        y += LANE_H + LANE_GAP
    bands = []
    for r in rows:
        if r["track"] != "idle" or r["device_id"] not in device_rows:
            continue
        ys = device_rows[r["device_id"]]
        x_exact = x_of(r["start_ns"])
        bands.append(dict(x=round(x_exact, 1), w=round(max(x_of(r["end_ns"]) - x_exact, MIN_EVENT_W), 1), y=min(ys) - 2,
                          h=max(ys) - min(ys) + LANE_H + 4, colour=PART_COLOURS.get(r["kind"], "#9ca3af"),
                          cause=r["kind"], tip=_tip(r, w0), start_ns=r["start_ns"], dur_ns=r["dur_ns"]))
    causes = sorted({b["cause"] for b in bands})
    ticks = [dict(x=round(LABEL_W + t * scale, 1), label=fmt_duration(t) if t else "0")
             for t in nice_ticks(span, 8)]
    legend = [dict(colour=EVENT_COLOURS[k], label=KIND_WORDS[k], band=False) for k in EVENT_COLOURS if k in kinds]
    if "nvtx" in kinds:
        legend.insert(0, dict(colour=NVTX_COLOURS[0], label="NVTX range", band=False))
    legend += [dict(colour=PART_COLOURS.get(c, "#9ca3af"), label=f"GPU idle: {c}", band=True) for c in causes]
    return dict(width=WIDTH, label_w=LABEL_W, plot_w=PLOT_W, lane_h=LANE_H, height=y + AXIS_H, axis_y=y,
                lanes=drawn, dense=any(lane["cover"] for lane in drawn), bands=bands, ticks=ticks, legend=legend,
                reason=rows[0]["window_reason"], start_ns=w0, end_ns=w1, span_ns=span)


def text_strip(report: Report) -> dict[str, Any] | None:
    """The excerpt as fixed-width lines (one per lane, TEXT_COLS characters), one per GPU marking by cause the
    columns it was idle. A lane marks as many columns as its events cover, where they run, each with the event
    covering most of it: a column's covered share carries over to the next (error diffusion), so a lane of
    kernels 40 % of the time marks about 40 % of its columns, not every column a kernel touches. A run of events
    that gets no mark still shows, as one SLIVER_MARK, which counts as no time; the idle lines show no slivers. Every
    kind a line holds shows at least once: a kind too rare to earn a column by its time (the one blocking call among
    the launches, the one gpu-side gap among launch gaps) takes the column its events cover most."""
    rows, w0, w1, span = _window(report)
    if not rows:
        return None
    cell = span / TEXT_COLS

    def paint(events: list[dict[str, Any]], mark: Any, slivers: bool = True) -> str:
        events = [r for r in events if r["end_ns"] >= r["start_ns"]]
        cols = _columns(events, w0, cell, TEXT_COLS)
        out, carried = [" "] * TEXT_COLS, 0.0
        run: list[int] = []
        for c, (share, top) in enumerate(cols + [(0.0, None)]):
            if top is None:
                if slivers and run and all(out[i] == " " for i in run):
                    out[max(run, key=lambda i: cols[i][0])] = SLIVER_MARK
                run = []
                continue
            run.append(c)
            carried += share
            if carried >= 0.5:
                out[c], carried = mark(top), carried - 1.0
        show_every_kind(out, events, mark)
        return "".join(out)

    def show_every_kind(out: list[str], events: list[dict[str, Any]], mark: Any) -> None:
        """A kind that earned no column (one blocking call among hundreds of launches, one copy among kernels)
        takes the column its events cover most, among those whose mark shows elsewhere too: no kind loses its
        only column to another."""
        by_mark: dict[str, list[dict[str, Any]]] = {}
        for r in events:
            by_mark.setdefault(mark(r), []).append(r)
        for m, of_kind in by_mark.items():
            if m in out:
                continue
            cols = _columns(of_kind, w0, cell, TEXT_COLS)
            free = [c for c in range(TEXT_COLS) if cols[c][1] is not None
                    and (out[c] in (" ", SLIVER_MARK) or out.count(out[c]) > 1)]
            if free:
                out[max(free, key=lambda c: (cols[c][0], -c))] = m

    all_lanes = lanes(rows)
    width = max((len(lane.label) for lane in all_lanes), default=10) + 1
    lines = []
    for lane in all_lanes:
        lines.append(lane.label.ljust(width) + "|" + paint(lane.events, lambda r: TEXT_MARKS.get(
            "nvtx" if r["track"] == "nvtx" else r["kind"], "?")) + "|")
    for dev in sorted({r["device_id"] for r in rows if r["track"] == "idle"}):
        idle = [r for r in rows if r["track"] == "idle" and r["device_id"] == dev]
        lines.append(f"GPU {dev} · idle".ljust(width) + "|"
                     + paint(idle, lambda r: IDLE_MARKS.get(r["kind"], "?"), slivers=False) + "|")
    scale = f"0{' ' * (TEXT_COLS - 1 - len(fmt_duration(span)))}{fmt_duration(span)}"
    lines.append(" " * width + " " + scale)
    drawn = {ch for line in lines[:-1] for ch in line[width + 1:-1]}
    marks = {TEXT_MARKS[k]: KIND_WORDS.get(k, "NVTX range") for k in TEXT_MARKS
             if k in {"nvtx" if r["track"] == "nvtx" else r["kind"] for r in rows if r["track"] != "idle"}}
    if "kernel" in marks.values() and "CUDA-graph replay" in {KIND_WORDS.get(r["kind"]) for r in rows}:
        marks["█"] = "kernel or CUDA-graph replay"
    legend = [f"{m} {word}" for m, word in marks.items() if m in drawn]
    if SLIVER_MARK in drawn:
        legend.append(f"{SLIVER_MARK} events too short to fill a column")
    legend += [f"{IDLE_MARKS.get(c, '?')} idle: {c}" for c in sorted({r["kind"] for r in rows if r["track"] == "idle"})
               if IDLE_MARKS.get(c, "?") in drawn]
    # a mark is a column of busy time, not one event: a lane marks about as many columns as its events cover
    legend.append("a lane marks about as many columns as its events cover")
    return dict(lines=lines, legend=legend, reason=rows[0]["window_reason"], start_ns=w0, span_ns=span)
