"""The notes a what-if projection carries: the per-node gap and the pinned bandwidth it assumed, and, when its medians
come from a sample of the steps (facts _whatif_steps and whatif_sample), the sample's size and the 95 % interval
of each median (docs/measures.md "What a fix would buy")."""

from __future__ import annotations

from typing import Any

from ..facts.compute import FactSet
from ..base.units import fmt_range, fmt_step

REPLAY_FACT = "whatif_replay"
SAMPLE_FACT = "whatif_sample"


def replay_rows(facts: FactSet) -> list[dict[str, Any]]:
    """The whatif_replay rows, each with its whatif_sample row's columns (steps_total, sampled, the intervals) when
    that fact was computed: whoever reads a median then knows whether it is over a sample."""
    rows = facts.rows(REPLAY_FACT) if REPLAY_FACT in facts.results else []
    if SAMPLE_FACT not in facts.results:
        return rows
    samples = {(s["device_id"], s["phase"]): s for s in facts.rows(SAMPLE_FACT)}
    return [{**samples.get((r["device_id"], r.get("phase")), {}), **r} for r in rows]


def _bounds(row: dict[str, Any], column: str) -> tuple[Any, Any]:
    """The low and high ends of the 95 % interval of the median of whatif_replay `column` (whatif_sample's
    `<stem>_step_low_ns` and `<stem>_step_high_ns`); None where the row carries none."""
    stem = column.removesuffix("_step_ns")
    return row.get(f"{stem}_step_low_ns"), row.get(f"{stem}_step_high_ns")


def _interval(row: dict[str, Any], column: str, slow_column: str | None = None) -> str | None:
    """The 95 % interval of the median of whatif_replay `column` ('1.21..1.24 ms'), up to the high end of
    `slow_column`'s when a range is projected; None when the row carries none."""
    low, high = _bounds(row, column)
    if slow_column is not None:
        high = row.get(f"{slow_column.removesuffix('_step_ns')}_step_high_ns", high)
    return None if low is None or high is None else fmt_range(low, high)


def sample_note(row: dict[str, Any], projected_column: str | None = None, slow_column: str | None = None) -> str | None:
    """'median over a sample of 500 of 9,853 steps (95 % interval of the median step 1.21..1.24 ms, of the
    projected step 0.50..0.52 ms)' when the row's medians are over a sample; None when every step was replayed."""
    if not row.get("sampled"):
        return None
    measured = _interval(row, "measured_step_ns")
    parts = [f"of the median step {measured}"] if measured else []
    projected = _interval(row, projected_column, slow_column) if projected_column else None
    if projected:
        parts.append(f"of the projected step {projected}")
    where = f" (95 % interval {', '.join(parts)})" if parts else ""
    sampled, total = int(row.get("steps") or 0), int(row.get("steps_total") or 0)
    return f"median over a sample of {sampled:,} of {total:,} steps{where}"


def sample_assumption(row: dict[str, Any]) -> str | None:
    """How the sample was drawn, for the assumptions (the projection's own line already gives its size and
    interval): evenly spaced steps, and why that suffices."""
    if not row.get("sampled"):
        return None
    sampled, total = int(row.get("steps") or 0), int(row.get("steps_total") or 0)
    return (f"{sampled:,} of the {total:,} steps, evenly spaced in time order, were replayed "
            f"(facts.whatif_sample_steps), as a median needs no more: a GPU or phase is sampled only when it has "
            f"more than twice as many steps and they lie close around their median (facts.whatif_sample_tolerance, "
            f"1 % by default), else every step is replayed.")


def node_gap_note(row: dict[str, Any]) -> str:
    gap = fmt_step(row.get("node_gap_ns"))
    if row.get("node_gap_measured"):
        return f"Per-node replay gap {gap}: the median gap between kernels of one graph replay in this profile."
    return (f"Per-node replay gap {gap}: the default (facts.whatif_node_gap_ns), as the profile has no "
            f"node-traced graph replay to measure it.")


def pinned_note(row: dict[str, Any]) -> str:
    bw = f"{row.get('pinned_gbps') or 0:.1f} GB/s"
    if row.get("pinned_measured"):
        return f"Pinned bandwidth {bw}, measured on this profile's pinned copies of 1 MiB or more."
    low = f"{row.get('pinned_gbps_low') or 0:.0f}"
    return (f"Pinned bandwidth {low}..{row.get('pinned_gbps') or 0:.0f} GB/s, a range: the profile has no large "
            f"pinned copy to measure it, and pinned copies reach about 12 GB/s on PCIe 3.0 x16 (a T4) to 25 GB/s "
            f"on PCIe 4.0 x16 in practice (facts.whatif_pinned_gbps_low, facts.whatif_pinned_gbps).")


def cost_interval(row: dict[str, Any], column: str, share: float | None) -> tuple[float, float] | None:
    """whatif.Saving.cost_interval: from the 95 % intervals of the two medians the cost divides, which come from the
    same sampled steps (so the interval errs wide), within 0 and the share the rule measured."""
    if not row.get("sampled"):
        return None
    low_m, high_m = _bounds(row, "measured_step_ns")
    low_p, high_p = _bounds(row, column)
    if not low_m or not high_m or low_p is None or high_p is None:
        return None
    top = 1.0 if share is None else min(max(share, 0.0), 1.0)
    return (max(0.0, min(top, 1 - high_p / low_m)), max(0.0, min(top, 1 - low_p / high_m)))
