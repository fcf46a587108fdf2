"""Where each GPU's window went: kernels running, only copies running, and idle time by cause, from the
gpu_utilization fact. One list feeds every format (terminal, Markdown, HTML bar chart, JSON `window`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..base.vocabulary import WINDOW_PARTS
from ..model.measures import GpuWindow, WindowShare


def window_breakdown(rows: Sequence[Mapping[str, Any]]) -> list[GpuWindow]:
    out = []
    for g in rows:
        window = int(g.get("window_ns") or 0)
        if window <= 0:
            continue
        times = [max(int(g.get(p.column) or 0), 0) for p in WINDOW_PARTS]
        # The parts add up to the window by construction (gpu_utilization); dividing by their sum keeps the
        # shares summing to 1 through rounding.
        total = sum(times) or 1
        parts = [WindowShare(key=p.key, label=p.label, short=p.short, ns=ns, share=min(ns / total, 1.0), idle=p.idle)
                 for p, ns in zip(WINDOW_PARTS, times)]
        out.append(GpuWindow(device_id=int(g["device_id"]), window_ns=window, parts=parts))
    return out
