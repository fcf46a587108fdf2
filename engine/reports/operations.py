"""Where each GPU's time goes by operation class, per phase or over the whole run, from the operation_classes
fact. One list feeds every format (terminal line per phase, Markdown table, HTML stacked bar, JSON `operations`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..base.units import fmt_ratio
from ..model.measures import ClassShare, OperationBreakdown

# The terminal line names the classes down to this share of the GPU's time, at most _LINE_CLASSES of them.
_LINE_MIN_SHARE = 0.01
_LINE_CLASSES = 6


def _breakdowns(rows: Sequence[Mapping[str, Any]], phase: str | None, multi_gpu: bool) -> list[OperationBreakdown]:
    by_device: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_device.setdefault(int(row["device_id"]), []).append(row)
    out = []
    for device, device_rows in sorted(by_device.items()):
        total = sum(int(r.get("total_ns") or 0) for r in device_rows)
        if total <= 0:
            continue
        classes = [ClassShare(op_class=str(r["op_class"]), share=min(max(float(r.get("share") or 0), 0.0), 1.0),
                              total_ns=int(r.get("total_ns") or 0), op_count=int(r.get("op_count") or 0),
                              mean_ns=r.get("mean_ns"), top_kernels=list(r.get("top_kernels") or []))
                   for r in sorted(device_rows, key=lambda r: (-(r.get("total_ns") or 0), r.get("class_rank") or 0))]
        out.append(OperationBreakdown(phase=phase, device_id=device, total_ns=total, classes=classes,
                                      line=_line(phase, device, classes, multi_gpu)))
    return out


def _line(phase: str | None, device: int, classes: list[ClassShare], multi_gpu: bool) -> str:
    named = [c for c in classes if c.share >= _LINE_MIN_SHARE][:_LINE_CLASSES]
    parts = [f"{c.op_class} {fmt_ratio(c.share, 0)}" for c in named]
    if len(named) < len(classes):
        parts.append("…")
    subject = " ".join(p for p in (phase or ("run" if not multi_gpu else ""), f"GPU {device}" if multi_gpu else "")
                       if p)
    return f"{subject}: {' · '.join(parts)}"


def operation_breakdown(run_rows: Sequence[Mapping[str, Any]],
                        phase_rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[OperationBreakdown]:
    """One breakdown per phase and GPU when the run was judged per phase, else one per GPU over the run."""
    devices = {int(r["device_id"]) for r in run_rows}
    multi_gpu = len(devices) > 1
    if phase_rows:
        return [b for phase, rows in phase_rows.items() for b in _breakdowns(rows, phase, multi_gpu)]
    return _breakdowns(run_rows, None, multi_gpu)
