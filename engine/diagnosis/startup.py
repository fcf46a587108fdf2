"""The one-off start-up (model load, warm-up) a capture opens with, in words: reported apart from the steady work,
and named in the verdict, which judges the steady window after it (engine/facts/window.py) or, when nothing steady
follows, the start-up itself."""

from __future__ import annotations

import re
from typing import Any

from ..facts.compute import FactSet
from ..model.measures import StartUp
from ..base.units import fmt_bytes, fmt_duration, fmt_ratio


def _row(facts: FactSet) -> dict[str, Any]:
    return facts.first("startup") if "startup" in facts.results else {}


def evidence(row: dict[str, Any]) -> list[str]:
    """What named a start-up found by shape, for people: ['cuMemHostAlloc 24.8 ms', 'first launch 15.9 ms (module
    load)', '4.0 GiB copied in before the first kernel']; empty for one found from NVTX."""
    if row.get("found_by") != "shape":
        return []
    out = []
    if row.get("setup_call"):
        # the export's versioned entry point (cudaGetDeviceProperties_v2) is the API the user called
        name = re.sub(r"_v\d+$", "", str(row["setup_call"]))
        out.append(f"{name} {fmt_duration(row.get('setup_call_ns'))}")
    loads = row.get("module_load_count") or 0
    if row.get("first_launch_ns") and loads == 1:
        out.append(f"first launch {fmt_duration(row['first_launch_ns'])} (module load)")
    elif loads == 1:
        out.append(f"module load {fmt_duration(row.get('module_load_ns'))}")
    elif loads:
        longest = (f", the longest first launch {fmt_duration(row['first_launch_ns'])}"
                   if row.get("first_launch_ns") else "")
        out.append(f"{loads:,} module load{'s' if loads != 1 else ''} {fmt_duration(row.get('module_load_ns'))}"
                   f"{longest}")
    if row.get("copied_in"):
        out.append(f"{fmt_bytes(row.get('load_bytes'))} copied in before the first kernel")
    return out


def describe(row: dict[str, Any]) -> str:
    """'model load: 4.0 GiB of host-to-device copies, 100 % pageable, at 4.3 GB/s, 1.05 s, 16 allocations;
    warm-up: 879 kernels, 2 CUDA-graph captures/instantiations, 65.4 ms', or for one-off work found by shape
    without a weight upload 'one-off set-up before the loop, 29.8 ms: cuMemHostAlloc 24.8 ms, module load 3.4 ms'."""
    parts = []
    if row.get("found_by") == "shape" and not row.get("copied_in"):
        # no weights uploaded: context creation, pinned buffers and module loads, not a model load
        what = evidence(row) + ([f"{fmt_bytes(row['load_bytes'])} copied in"] if row.get("load_bytes") else [])
        setup = f"one-off set-up before the loop, {fmt_duration(row.get('startup_ns'))}"
        return f"{setup}: {', '.join(what)}" if what else setup
    load = f"model load: {fmt_duration(row.get('load_ns'))}"
    if row.get("load_bytes"):
        pageable = row.get("pageable_share")
        host = f", {fmt_ratio(pageable, 0)} pageable," if pageable is not None else ""
        speed = f" at {row['load_gbps']:.1f} GB/s" if row.get("load_gbps") else ""
        load = (f"model load: {fmt_bytes(row['load_bytes'])} of host-to-device copies{host}{speed}, "
                f"{fmt_duration(row.get('load_ns'))}")
    if row.get("alloc_count"):
        load += f", {row['alloc_count']:,} allocation{'s' if row['alloc_count'] != 1 else ''}"
    parts.append(load)
    if row.get("warmup_ns"):
        what = [f"{row.get('warmup_kernel_count') or 0:,} kernels"]
        if row.get("graph_capture_count"):
            what.append(f"{row['graph_capture_count']:,} CUDA-graph captures/instantiations")
        parts.append(f"warm-up: {', '.join(what)}, {fmt_duration(row['warmup_ns'])}")
    return "; ".join(parts)


def _found(row: dict[str, Any]) -> str:
    if row.get("found_by") == "nvtx":
        return "NVTX start-up ranges"
    if row.get("copied_in") and not row.get("setup_call") and not row.get("module_load_count"):
        return "host-to-device copies before the first kernel"
    return f"its shape: {', '.join(evidence(row))}"


def _parts(row: dict[str, Any]) -> str:
    if row.get("found_by") == "shape" and not row.get("copied_in"):
        return "one-off set-up"
    return "model load and warm-up" if row.get("warmup_ns") else "model load"


def startup_note(facts: FactSet) -> str:
    """' This verdict judges the 1.39 s after a one-off start-up (model load and warm-up, 45 % of the capture),
    reported apart.' or, when nothing steady follows, that the verdict judges the start-up itself; empty without
    one."""
    row = _row(facts)
    if not row:
        return ""
    share = fmt_ratio(row.get("startup_fraction"), 0)
    if row.get("judged_after"):
        return (f" This verdict judges the {fmt_duration(row.get('steady_ns'))} after a one-off start-up "
                f"({_parts(row)}, {share} of the capture, found from {_found(row)}), which is reported apart.")
    return (f" The capture is only start-up ({_parts(row)}, {share} of it, found from {_found(row)}) with too "
            f"little steady work after it, so this verdict judges the start-up itself; capture the steady loop to "
            f"judge the workload.")


def startup_summary(facts: FactSet) -> StartUp | None:
    """The start-up for the report (Report.startup), or None."""
    row = _row(facts)
    if not row:
        return None
    if row.get("judged_after"):
        line = (f"Start-up: {describe(row)}. Judged apart: the findings and metrics cover the "
                f"{fmt_duration(row.get('steady_ns'))} after it.")
    else:
        line = f"Start-up: {describe(row)}. Nothing steady follows it, so the whole capture is judged."
    return StartUp(found_by=row["found_by"], startup_ns=row.get("startup_ns") or 0,
                   startup_fraction=row.get("startup_fraction") or 0.0, load_ns=row.get("load_ns") or 0,
                   load_bytes=row.get("load_bytes") or 0, load_copy_count=row.get("load_copy_count") or 0,
                   load_gbps=row.get("load_gbps"), pageable_share=row.get("pageable_share"),
                   alloc_count=row.get("alloc_count") or 0, warmup_ns=row.get("warmup_ns") or 0,
                   warmup_kernel_count=row.get("warmup_kernel_count") or 0,
                   graph_capture_count=row.get("graph_capture_count") or 0, steady_ns=row.get("steady_ns") or 0,
                   judged_after=bool(row.get("judged_after")), line=line)
