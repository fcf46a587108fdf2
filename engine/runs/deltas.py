"""The metric deltas of a comparison and how each is judged: a relative change under NOISE is unchanged, a
per-call mean goes with its call count, a capture-length count with its rate and a capture-length time with the
active work (engine/runs/compare.py)."""

from __future__ import annotations

from collections.abc import Callable

from ..model.comparemodel import (
    Assessment,
    MetricDelta,
)
from ..reports.metrics import (
    definition,
    fmt_change,
    fmt_metric,
    number,
)
from ..model.report import Report


NOISE = 0.02  # relative changes below 2 % count as unchanged


def metric_delta(key: str, before: float | None, after: float | None) -> MetricDelta:
    m = definition(key)
    change = relative = None
    if before is not None and after is not None:
        change = after - before
        relative = change / abs(before) if before else None
    assessment: Assessment
    if change is None:
        assessment = "n/a"
    elif (relative is not None and abs(relative) < NOISE) or change == 0:
        assessment = "unchanged"
    elif m.better is None:
        assessment = "changed"
    else:
        assessment = "improved" if (change > 0) == (m.better == "higher") else "regressed"
    return MetricDelta(key=key, label=m.label, unit=m.unit, better=m.better, before=before, after=after,
                       change=change, relative=relative, assessment=assessment,
                       before_display=fmt_metric(before, m.unit), after_display=fmt_metric(after, m.unit),
                       change_display=fmt_change(change, relative, m.unit))


# A per-call mean is judged with the count it multiplies: what the calls cost in all is count x mean, so a mean
# that rose while the calls grew fewer by more (CUDA graphs: one graph launch instead of hundreds of kernel
# launches, each launch longer) is no regression (docs/compare-ci.md).
PER_CALL = {"launch_mean_ns": "launch_calls"}


# A count that grows with the length of the capture is judged by its rate per second of active work, the fact
# column given: more steps captured make more synchronisations, not more per step.
PER_SECOND = {"sync_calls": ("sync_overview", "calls_per_s")}


# A time that grows with the length of the capture is judged per second of active work (fact sync_overview's
# active_ns, the span synchronisations are counted over): 28 steps copy more than 25, not more per step. A change
# under WORK_FLOOR of the longer active span is noise whatever its relative size (12.7 µs in 117 ms).
PER_WORK = {"pcie_ns"}
WORK_FLOOR = 0.001


def _times(x: float) -> str:
    return f"{x:.0f}×" if x >= 10 else f"{x:.1f}×"


def _rejudged(d: MetricDelta, before: float | None, after: float | None, note: Callable[[float], str]) -> MetricDelta:
    """`d` judged by the value that matters (before, after): its assessment is that value's, and where the two
    disagree its note says why ('per call, but 262× fewer calls: total -99 %')."""
    if d.before is None or d.after is None or before is None or after is None or d.better is None:
        return d
    total = metric_delta(d.key, before, after)  # the same good direction and noise threshold as the metric's own
    if total.change is None:
        return d
    assessment: Assessment = total.assessment if total.assessment != "changed" else d.assessment
    if assessment == d.assessment:
        return d
    relative = (after - before) / abs(before) if before else None
    return d.model_copy(update={"assessment": assessment, "note": note(relative) if relative is not None else None})


def _per_call(d: MetricDelta, calls: MetricDelta | None) -> MetricDelta:
    """A per-call mean judged by count x mean, the total time of the calls."""
    if calls is None or None in (d.before, d.after, calls.before, calls.after):
        return d
    b_calls, a_calls = float(calls.before or 0), float(calls.after or 0)
    fewer = (f"{_times(b_calls / a_calls)} fewer calls" if 0 < a_calls < b_calls
             else "no calls" if a_calls == 0 else f"{_times(a_calls / b_calls)} more calls" if b_calls else "")

    def note(relative: float) -> str:
        return f"per call, but {fewer}: total {round(relative * 100):+d} %"

    return _rejudged(d, float(d.before or 0) * b_calls, float(d.after or 0) * a_calls, note)


def _per_second(d: MetricDelta, before: float | None, after: float | None) -> MetricDelta:
    """A count judged by its rate per second of active work."""
    def note(relative: float) -> str:
        return (f"but per second of work {fmt_metric(before, 'rate')} → {fmt_metric(after, 'rate')} "
                f"({round(relative * 100):+d} %)")

    return _rejudged(d, before, after, note)


def _per_work(d: MetricDelta, before_active: float | None, after_active: float | None) -> MetricDelta:
    """A capture-length time judged by its share of the active span, and unchanged under WORK_FLOOR of it."""
    if d.before is None or d.after is None or not before_active or not after_active or d.better is None:
        return d
    span = max(before_active, after_active)
    if d.assessment in ("improved", "regressed") and abs(float(d.after) - float(d.before)) < WORK_FLOOR * span:
        return d.model_copy(update={"assessment": "unchanged",
                                    "note": f"{fmt_metric(abs(float(d.after) - float(d.before)), 'ns')} is under "
                                            f"{WORK_FLOOR * 100:g} % of the {fmt_metric(span, 'ns')} of active work"})
    b, a = float(d.before) / before_active * 1e9, float(d.after) / after_active * 1e9

    def note(relative: float) -> str:
        return (f"but per second of work {fmt_metric(b, 'ns')}/s → {fmt_metric(a, 'ns')}/s "
                f"({round(relative * 100):+d} %)")

    return _rejudged(d, b, a, note)


def judged_as_it_matters(deltas: list[MetricDelta], before: Report, after: Report) -> list[MetricDelta]:
    """Each per-call mean judged with its count (PER_CALL), each capture-length count by its rate (PER_SECOND)."""
    by_key = {d.key: d for d in deltas}

    def rate(report: Report, fact: str, column: str) -> float | None:
        rows = report.facts.get(fact) or []
        return number(rows[0].get(column)) if rows else None

    out = []
    for d in deltas:
        if d.key in PER_CALL:
            d = _per_call(d, by_key.get(PER_CALL[d.key]))
        elif d.key in PER_SECOND:
            fact, column = PER_SECOND[d.key]
            d = _per_second(d, rate(before, fact, column), rate(after, fact, column))
        elif d.key in PER_WORK:
            d = _per_work(d, rate(before, "sync_overview", "active_ns"), rate(after, "sync_overview", "active_ns"))
        out.append(d)
    return out
