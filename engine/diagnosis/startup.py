"""The one-off start-up (model load, warm-up) a capture opens with, in words: reported apart from the steady work,
and named in the verdict, which judges the steady window after it (engine/facts/window.py) or, when nothing steady
follows, the start-up itself."""

from __future__ import annotations

import re
from typing import Any

from ..facts.compute import FactSet
from ..model.measures import StartUp
from ..pack.headlines import Headlines
from ..base.units import fmt_bytes, fmt_duration, fmt_ratio


def _row(facts: FactSet) -> dict[str, Any]:
    return facts.first("startup") if "startup" in facts.results else {}


def evidence(row: dict[str, Any], said: Headlines) -> list[str]:
    """What named a start-up found by shape, for people: ['cuMemHostAlloc 24.8 ms', 'first launch 15.9 ms (module
    load)', '4.0 GiB copied in before the first kernel']; empty for one found from NVTX."""
    if row.get("found_by") != "shape":
        return []
    out = []
    if row.get("setup_call"):
        # the export's versioned entry point (cudaGetDeviceProperties_v2) is the API the user called
        name = re.sub(r"_v\d+$", "", str(row["setup_call"]))
        out.append(said.say("startup_setup_call", call=name, duration=fmt_duration(row.get("setup_call_ns"))))
    loads = row.get("module_load_count") or 0
    if row.get("first_launch_ns") and loads == 1:
        out.append(said.say("startup_first_launch", duration=fmt_duration(row["first_launch_ns"])))
    elif loads == 1:
        out.append(said.say("startup_module_load", duration=fmt_duration(row.get("module_load_ns"))))
    elif loads:
        longest = (said.say("startup_longest_launch", duration=fmt_duration(row["first_launch_ns"]))
                   if row.get("first_launch_ns") else "")
        out.append(said.say("startup_module_loads", count=f"{loads:,}",
                            duration=fmt_duration(row.get("module_load_ns")), longest=longest))
    if row.get("copied_in"):
        out.append(said.say("startup_copied_before", size=fmt_bytes(row.get("load_bytes"))))
    return out


def describe(row: dict[str, Any], said: Headlines) -> str:
    """'model load: 4.0 GiB of host-to-device copies, 100 % pageable, at 4.3 GB/s, 1.05 s, 16 allocations;
    warm-up: 879 kernels, 2 CUDA-graph captures/instantiations, 65.4 ms', or for one-off work found by shape
    without a weight upload 'one-off set-up before the loop, 29.8 ms: cuMemHostAlloc 24.8 ms, module load 3.4 ms'."""
    parts = []
    if row.get("found_by") == "shape" and not row.get("copied_in"):
        # no weights uploaded: context creation, pinned buffers and module loads, not a model load
        what = evidence(row, said) + ([said.say("startup_copied", size=fmt_bytes(row["load_bytes"]))]
                                      if row.get("load_bytes") else [])
        setup = said.say("startup_set_up", duration=fmt_duration(row.get("startup_ns")))
        return said.say("startup_set_up_found", set_up=setup, evidence=", ".join(what)) if what else setup
    load = said.say("startup_model_load", duration=fmt_duration(row.get("load_ns")))
    if row.get("load_bytes"):
        pageable = row.get("pageable_share")
        host = said.say("startup_pageable", share=fmt_ratio(pageable, 0)) if pageable is not None else ""
        speed = said.say("startup_speed", gbps=f"{row['load_gbps']:.1f}") if row.get("load_gbps") else ""
        load = said.say("startup_model_load_copies", size=fmt_bytes(row["load_bytes"]), pageable=host, speed=speed,
                        duration=fmt_duration(row.get("load_ns")))
    if row.get("alloc_count"):
        load += said.say("startup_allocations_one" if row["alloc_count"] == 1 else "startup_allocations_many",
                         count=f"{row['alloc_count']:,}")
    parts.append(load)
    if row.get("warmup_ns"):
        what = [said.say("startup_warmup_kernels", count=f"{row.get('warmup_kernel_count') or 0:,}")]
        if row.get("graph_capture_count"):
            what.append(said.say("startup_graph_captures", count=f"{row['graph_capture_count']:,}"))
        parts.append(said.say("startup_warmup", what=", ".join(what), duration=fmt_duration(row["warmup_ns"])))
    return "; ".join(parts)


def _found(row: dict[str, Any], said: Headlines) -> str:
    if row.get("found_by") == "nvtx":
        return said.say("startup_found_nvtx")
    if row.get("copied_in") and not row.get("setup_call") and not row.get("module_load_count"):
        return said.say("startup_found_copies")
    return said.say("startup_found_shape", evidence=", ".join(evidence(row, said)))


def _parts(row: dict[str, Any], said: Headlines) -> str:
    if row.get("found_by") == "shape" and not row.get("copied_in"):
        return said.say("startup_setup")
    return said.say("startup_load_warmup" if row.get("warmup_ns") else "startup_load")


def startup_note(facts: FactSet, said: Headlines) -> str:
    """' This verdict judges the 1.39 s after a one-off start-up (model load and warm-up, 45 % of the capture),
    reported apart.' or, when nothing steady follows, that the verdict judges the start-up itself; empty without
    one. Worded by `said` (the startup_ sentences of headlines.yaml)."""
    row = _row(facts)
    if not row:
        return ""
    values = {"parts": _parts(row, said), "share": fmt_ratio(row.get("startup_fraction"), 0),
              "found": _found(row, said)}
    if row.get("judged_after"):
        return said.say("startup_judged_after", steady=fmt_duration(row.get("steady_ns")), **values)
    return said.say("startup_judged_itself", **values)


def startup_summary(facts: FactSet, said: Headlines) -> StartUp | None:
    """The start-up for the report (Report.startup), or None; its line worded by `said` (startup_line_apart,
    startup_line_whole)."""
    row = _row(facts)
    if not row:
        return None
    if row.get("judged_after"):
        line = said.say("startup_line_apart", description=describe(row, said),
                        steady=fmt_duration(row.get("steady_ns")))
    else:
        line = said.say("startup_line_whole", description=describe(row, said))
    return StartUp(found_by=row["found_by"], startup_ns=row.get("startup_ns") or 0,
                   startup_fraction=row.get("startup_fraction") or 0.0, load_ns=row.get("load_ns") or 0,
                   load_bytes=row.get("load_bytes") or 0, load_copy_count=row.get("load_copy_count") or 0,
                   load_gbps=row.get("load_gbps"), pageable_share=row.get("pageable_share"),
                   alloc_count=row.get("alloc_count") or 0, warmup_ns=row.get("warmup_ns") or 0,
                   warmup_kernel_count=row.get("warmup_kernel_count") or 0,
                   graph_capture_count=row.get("graph_capture_count") or 0, steady_ns=row.get("steady_ns") or 0,
                   judged_after=bool(row.get("judged_after")), line=line)
