"""Before/after comparison of two diagnosed profiles: metric deltas, finding changes, a verdict and CI gates.

compare(before, after, tokens=..., gates=[...]) -> Comparison (engine/model/comparemodel.py). The compared
metrics, their labels, units and good directions are the key metrics of engine/reports/metrics.py;
engine/reports/render.py renders the comparison.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any, Literal

from ..model.comparemodel import (
    Assessment,
    Comparison,
    FindingChange,
    Gate,
    GateUnit,
    MetricDelta,
    ProjectionCheck,
    Side,
    TimeBin,
)
from ..diagnosis.throughput import check_tokens, throughput
from ..diagnosis.whatif import fmt_step
from ..base.errors import DiagnoseError
from ..base.text import did_you_mean
from ..reports.metrics import (
    PHASE_KEY,
    Metric,
    compared,
    definition,
    fmt_change,
    fmt_metric,
    number,
    phase_values,
    raw_value,
)
from ..model.report import Finding, Report
from ..base.units import DURATION_UNITS
from ..base.vocabulary import Severity

NOISE = 0.02  # relative changes below 2 % count as unchanged


class GateError(DiagnoseError):
    """A --fail-on-regression gate that is malformed, names an unknown metric, uses a unit that cannot apply to
    its metric, or cannot be evaluated on the two profiles (exit 2). `problems`: one sentence per gate."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


def extract(report: Report, tokens: int | None = None) -> dict[str, float | None]:
    """The compared values of one report (None where the profile has no such number)."""
    check_tokens(report.facts.get("steps") or [], tokens, PurePath(report.profile.path).name)
    metrics = compared()
    out = {m.key: number(raw_value(m, report)) for m in metrics if not m.is_throughput}
    out.update(phase_values(report))
    rates = throughput(out.get("duration_ns"), report.facts.get("steps") or [], tokens)
    out.update({m.key: number(raw_value(m, report, rates)) if rates else None for m in metrics if m.is_throughput})
    return out


def _delta(key: str, before: float | None, after: float | None) -> MetricDelta:
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
    total = _delta(d.key, before, after)  # the same good direction and noise threshold as the metric's own
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


def _judged_as_it_matters(deltas: list[MetricDelta], before: Report, after: Report) -> list[MetricDelta]:
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


def _finding_changes(before: Report, after: Report) -> list[FindingChange]:
    b = {(f.rule, f.subject): f for f in before.findings}
    a = {(f.rule, f.subject): f for f in after.findings}
    out = []
    for key in sorted(set(a) | set(b), key=lambda k: (k[0], k[1] or "")):
        fb, fa = b.get(key), a.get(key)
        if fb and fa and fb.severity == fa.severity:
            continue
        either = fa or fb
        assert either is not None  # the key comes from one side at least
        change: Literal["appeared", "disappeared", "severity changed"] = (
            "appeared" if fb is None else "disappeared" if fa is None else "severity changed")
        out.append(FindingChange(rule=key[0], subject=key[1], title=either.title, change=change,
                                 before_severity=fb.severity if fb else None,
                                 after_severity=fa.severity if fa else None))
    return out


def _score(d: MetricDelta) -> float:
    """Signed goodness of a change: positive is better."""
    if d.assessment not in ("improved", "regressed"):
        return 0.0
    size = abs(d.relative) if d.relative is not None else 1.0
    return size if d.assessment == "improved" else -size


def _describe(d: MetricDelta) -> str:
    return f"{d.label} {d.before_display} → {d.after_display} ({d.change_display})"


Outcome = Literal["improved", "regressed", "unchanged"]  # of a comparison (Comparison.verdict)

def _new_or_worse(f: FindingChange) -> bool:
    """A finding at warning or above that appeared, or whose severity rose."""
    after, before = f.after_severity, f.before_severity
    if after is None or not after.at_least(Severity.WARNING):
        return False
    return f.change == "appeared" or (f.change == "severity changed" and before is not None
                                      and after.rank > before.rank)


def _verdict(deltas: list[MetricDelta], findings: list[FindingChange]) -> tuple[Outcome, str]:
    judged = [d for d in deltas if definition(d.key).headline and _score(d)] or [d for d in deltas if _score(d)]
    if judged:
        main = max(judged, key=lambda d: abs(_score(d)))
        verdict: Outcome = "improved" if _score(main) > 0 else "regressed"
        worse = [d for d in judged if _score(d) < 0] if verdict == "improved" else []
        reason = _describe(main) + (f"; but {_describe(max(worse, key=lambda d: -_score(d)))}" if worse else "")
        return verdict, reason
    new = [f for f in findings if _new_or_worse(f)]
    if new:
        return "regressed", f"new {new[0].after_severity}: {new[0].title}" + (
            f" ({new[0].subject})" if new[0].subject else "")
    return "unchanged", f"no judged metric changed by {NOISE * 100:.0f} % or more"


# METRIC[?]:[+|-]NUMBER[UNIT]; the unit is validated against the metric by _gate_unit.
_GATE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(\?)?\s*:\s*([+-]?)\s*(\d+(?:\.\d*)?|\.\d+)\s*([^\s\d.+-]\S*)?\s*$")
_SYNTAX = "METRIC[?]:[+|-]NUMBER[%|pt|ns|us|ms|s]"
_ZERO_TO_ONE = ("share", "ratio")  # metric units holding a value from 0 to 1, which points apply to
_UNIT_WORDS = {"share": "a 0-1 share", "ratio": "a 0-1 ratio", "ns": "nanoseconds", "count": "a count",
               "bytes": "bytes", "rate": "a rate per second", "percent": "percent"}
_GATE_SYMBOLS = {"percent": " %", "points": " pt", "ns": " ns", "us": " µs", "ms": " ms", "s": " s"}


def _unknown_metric(name: str, known: list[str]) -> GateError:
    hint = did_you_mean(name, known, f"; known metrics are {', '.join(known)}")
    return GateError(f"unknown metric {name!r} in --fail-on-regression{hint}")


def _gate_unit(spec: str, metric: Metric, sign: str, amount: str, written: str) -> GateUnit:
    """The gate's unit from the suffix written after its number, refused where it cannot mean anything for the
    metric (a gate that could never fire must not pass silently)."""
    key, words = metric.key, _UNIT_WORDS.get(metric.unit, metric.unit)
    zero_to_one = metric.unit in _ZERO_TO_ONE
    alternatives = (f"{key}:{sign}{amount}pt, {key}:{sign}{amount}% or {key}:{sign}0.05" if zero_to_one
                    else f"{key}:{sign}{amount}% (relative) or {key}:{sign}{amount} (absolute, {words})")
    if written == "%":
        return "percent"
    if written == "pt":
        if not zero_to_one:
            raise GateError(f"--fail-on-regression {spec!r}: 'pt' (percentage points) applies only to 0-1 "
                            f"metrics such as gpu_utilization, and {key} is {words}; write {alternatives}")
        return "points"
    if written in DURATION_UNITS:
        if metric.unit != "ns":
            raise GateError(f"--fail-on-regression {spec!r}: the time unit {written!r} applies only to time "
                            f"metrics (the *_ns ones), and {key} is {words}; write {alternatives}")
        return "us" if written == "µs" else written  # type: ignore[return-value]
    if written:
        raise GateError(f"--fail-on-regression {spec!r}: unknown unit {written!r}; use % (of the before value), "
                        f"pt (percentage points of a 0-1 metric) or ns, us, ms, s (time metrics)")
    if zero_to_one and float(amount) >= 1:
        raise GateError(f"--fail-on-regression {spec!r}: {key} is {words}, so it can never move by {amount}; "
                        f"did you mean {key}:{sign}{amount}pt or {key}:{sign}{amount}%?")
    return "absolute"


def parse_gate(spec: str, known: list[str]) -> Gate:
    """A --fail-on-regression gate: 'gpu_utilization:-5pt' (fail when it falls by more than 5 percentage points),
    ':-5%' (by more than 5 % of its before value), 'overhead_ratio:+0.05' (rises by more than 0.05, absolute),
    'step_time_ns:+2ms' (a time metric, in that unit; a bare number is ns). Without a sign, the metric's bad
    direction. 'METRIC?:…' marks the gate optional: it passes, not evaluated, when the metric is missing."""
    m = _GATE.match(spec)
    if not m:
        raise GateError(f"--fail-on-regression {spec!r} is not {_SYNTAX}, e.g. gpu_utilization:-5pt, "
                        f"step_time_ns:+2ms or overhead_ratio:+0.05")
    name, optional, sign, amount, written = m.groups()
    if name not in known and not PHASE_KEY.match(name):
        raise _unknown_metric(name, known)
    metric = definition(name)
    if not sign:
        if metric.better is None:
            raise GateError(f"metric {name!r} has no good direction; give one in --fail-on-regression, "
                            f"e.g. {name}:+{amount}{written or ''}")
        sign = "-" if metric.better == "higher" else "+"
    unit = _gate_unit(spec.strip(), metric, sign, amount, written or "")
    direction: Literal["+", "-"] = "-" if sign == "-" else "+"  # _GATE matches no other sign
    return Gate(spec=spec.strip(), metric=name, direction=direction, threshold=float(amount),
                relative=unit == "percent", unit=unit, optional=bool(optional))


def known_metrics() -> list[str]:
    """Gate-able metric names (plus phase_<name>_ns for each NVTX phase)."""
    return sorted(m.key for m in compared())


def _amount(x: float) -> str:
    """A non-negative change for a gate message: '1,250', '7.2', '0.0563'."""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 1:
        return f"{x:.1f}".removesuffix(".0")
    return f"{x:.3g}"


def _observed(gate: Gate, before: float, after: float) -> float:
    """The change in the gate's unit (a percent gate needs a before value other than 0)."""
    change = after - before
    if gate.unit == "percent":
        return change / abs(before) * 100
    if gate.unit == "points":
        return change * 100
    if gate.unit in DURATION_UNITS:
        return change / DURATION_UNITS[gate.unit]
    return change


def _check(gate: Gate, before: float, after: float) -> Gate:
    """The gate on a metric both profiles have."""
    d = _delta(gate.metric, before, after)
    observed = _observed(gate, before, after)
    moved = observed if gate.direction == "+" else -observed
    crossed = round(moved, 9) > gate.threshold  # 0.65 - 0.60 is 5.000000000000004 pt, not more than 5 pt
    symbol = _GATE_SYMBOLS.get(gate.unit) or {"ns": " ns", "rate": "/s"}.get(d.unit, "")
    moved_by = (f"rose {_amount(observed)}{symbol}" if observed > 0 else
                f"fell {_amount(-observed)}{symbol}" if observed < 0 else "did not change")
    message = (f"{gate.metric} {moved_by} ({d.before_display} → {d.after_display}), "
               f"{'beyond' if crossed else 'within'} the allowed {gate.direction}{gate.threshold:,.10g}{symbol}")
    return gate.model_copy(update={"observed": observed, "crossed": crossed, "message": message})


def _optional_spec(gate: Gate) -> str:
    return f"{gate.metric}?:{gate.spec.split(':', 1)[1].strip()}"


SideName = Literal["before", "after"]
# What is known of a profile that lacks a metric: its file name and why it lacks it ("" where unknown).
Absence = Callable[[SideName, str], tuple[str, str]]


def _unknown_absence(_side: SideName, _key: str) -> tuple[str, str]:
    return "", ""


def _missing_in(lacking: list[SideName], key: str, about: Absence) -> str:
    """'the after profile (b.sqlite; no decode steps)', 'both profiles (a.sqlite, b.sqlite; …)'."""
    known = {side: about(side, key) for side in lacking}

    def detail(names: list[str], why: str) -> str:
        inside = "; ".join(x for x in (", ".join(n for n in names if n), why) if x)
        return f" ({inside})" if inside else ""

    if len(lacking) == 2 and known["before"][1] == known["after"][1]:
        return "both profiles" + detail([known["before"][0], known["after"][0]], known["before"][1])
    return " and ".join(f"the {side} profile{detail([known[side][0]], known[side][1])}" for side in lacking)


def check_gates(gates: list[Gate], before: Mapping[str, float | None], after: Mapping[str, float | None],
                about: Absence = _unknown_absence, unjudged: Mapping[str, str] | None = None,
                across: Mapping[str, str] | None = None) -> list[Gate]:
    """Each gate evaluated on the compared values of the two profiles (as extract() returns them). A gate that
    cannot be evaluated (its metric missing in a profile, a percent gate on a before value of 0) is an error,
    one sentence per gate naming the metric and the profile that lacks it (`about` names that profile and says
    why), unless the gate is optional: then it passes, not evaluated. `unjudged`: metrics whose change means
    nothing on these two profiles, with why (one --tokens N for captures of different decode steps); `across`:
    likewise, metrics that depend on what each profiler records, when the two profiles come from different
    profilers (ACROSS_FORMATS)."""
    checked: list[Gate] = []
    problems: list[str] = []
    for gate in gates:
        b, a = before.get(gate.metric), after.get(gate.metric)
        if across and gate.metric in across:
            reason = f"{gate.metric} cannot be compared: it {across[gate.metric]}"
            fix = (f"compare two profiles recorded by the same profiler, or mark the gate optional as "
                   f"{_optional_spec(gate)!r}")
        elif unjudged and gate.metric in unjudged:
            reason = f"{gate.metric} cannot be compared: it {unjudged[gate.metric]}"
            fix = (f"give each run's tokens as --tokens BEFORE,AFTER, gate on time_per_token_ns or step_time_ns, "
                   f"or mark the gate optional as {_optional_spec(gate)!r}")
        elif b is None or a is None:
            sides: tuple[tuple[SideName, float | None], ...] = (("before", b), ("after", a))
            lacking: list[SideName] = [side for side, value in sides if value is None]
            reason = f"{gate.metric} is missing in {_missing_in(lacking, gate.metric, about)}"
            fix = f"mark the gate optional as {_optional_spec(gate)!r} to let it pass when the metric is missing"
        elif gate.unit == "percent" and b == 0:
            reason = f"the before value of {gate.metric} is 0, so a change in % of it is undefined"
            fix = (f"use an absolute gate such as {gate.metric}:{gate.direction}N (in its unit) or mark it "
                   f"optional as {_optional_spec(gate)!r}")
        else:
            checked.append(_check(gate, b, a))
            continue
        if gate.optional:
            checked.append(gate.model_copy(update={"message": f"{gate.spec}: not evaluated (optional), {reason}"}))
        else:
            problems.append(f"--fail-on-regression {gate.spec!r}: {reason}; {fix}")
    if problems:
        raise GateError(problems[0], problems)
    return checked


def _absence(report: Report, key: str, tokens: int | None) -> tuple[str, str]:
    """The file name of a profile that lacks the metric `key`, and why where that is known."""
    name = PurePath(report.profile.path).name
    phase = PHASE_KEY.match(key)
    if phase:
        present = [PHASE_KEY.match(k).group(1) for k in phase_values(report)]  # type: ignore[union-attr]
        return name, (f"no NVTX phase {phase.group(1)!r}, only {', '.join(present)}" if present
                      else "no NVTX phases")
    metric = definition(key)
    if not metric.is_throughput:
        return name, ""
    with_tokens = throughput(report.profile.duration_ns, report.facts.get("steps") or [], 1)
    if tokens is None and number(raw_value(metric, report, with_tokens)) is not None:
        return name, "no --tokens N given"
    return name, "no decode steps"


def _timeline(report: Report) -> list[TimeBin]:
    """Mean busy fraction over the used GPUs per bin, at bin mid-times relative to the first bin."""
    rows = report.facts.get("utilization_timeline") or []
    if not rows:
        return []
    t0 = min(r["bin_start_ns"] for r in rows)
    bins: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        bins.setdefault(r["bin"], []).append(r)
    out = []
    for _, group in sorted(bins.items()):
        start = min(r["bin_start_ns"] for r in group) - t0
        end = max(r["bin_end_ns"] for r in group) - t0
        busy = [min(max(r.get("busy_fraction") or 0.0, 0.0), 1.0) for r in group]
        out.append(TimeBin(t_start_ns=float(start), t_end_ns=float(end), busy=sum(busy) / len(busy)))
    return out


def _after_row(after: Report, device_id: int | None, phase: str | None, basis: str) -> dict[str, Any] | None:
    """The after run's whatif_replay row of the device and phase a projection was made for."""
    rows = [r for r in after.facts.get("whatif_replay", []) if r.get("device_id") == device_id]
    row = (next((r for r in rows if phase is not None and r.get("phase") == phase), None)
           or next((r for r in rows if r.get("phase") is None), None))
    if row is None or (basis == "window") != (row.get("source") == "window"):
        return None  # a window is not comparable with a step
    return row


def _applied(f: Finding, after: Report) -> bool:
    """Whether the after run shows the fix applied: it no longer has the finding (same rule, subject and phase), or
    the finding's cost (impact) fell by at least half. Otherwise a projection has nothing to be checked against."""
    same = next((a for a in after.findings if a.rule == f.rule and a.subject == f.subject and a.phase == f.phase),
                None)
    if same is None:
        return True
    return f.impact is not None and same.impact is not None and same.impact <= f.impact / 2


# A projection removes a cost from the before run's step and keeps its GPU work; an after run whose GPU work per
# step moved by more than this (a larger batch, another model) is another workload to check it against.
WORKLOAD_CHANGE = 0.25


def _gpu_per_step(report: Report, phase: str | None) -> float | None:
    """GPU busy time of the median step (its period x busy share, fact `steps`) of the phase, else of decode or
    the only steps."""
    rows = [r for r in report.facts.get("steps") or [] if (r.get("step_count") or 0) > 0]
    row = (next((r for r in rows if phase is not None and r.get("phase") == phase), None)
           or next((r for r in rows if r.get("phase") == "decode"), None) or (rows[0] if len(rows) == 1 else None))
    if row is None:
        return None
    step, busy = number(row.get("median_step_ns")), number(row.get("median_busy_share"))
    return step * busy if step and busy is not None else None


def _workload_changed(before: Report, after: Report, phase: str | None) -> str | None:
    """Why the after run cannot test a projection: its GPU work per step differs by more than WORKLOAD_CHANGE."""
    b, a = _gpu_per_step(before, phase), _gpu_per_step(after, phase)
    if not b or a is None or abs(a / b - 1) <= WORKLOAD_CHANGE:
        return None
    return (f"measured {{}}, not checked: GPU work per step {fmt_step(b)} → {fmt_step(a)} "
            f"({a / b - 1:+.0%}), another workload than the one projected").replace("%", " %")


def _projections(before: Report, after: Report) -> list[ProjectionCheck]:
    out = []
    for f in before.findings:
        w = f.what_if
        if w is None:
            continue
        row = _after_row(after, w.device_id, w.phase, w.basis)
        applied = _applied(f, after)
        measured = row.get("measured_step_ns") if row is not None and applied else None
        error = measured / w.projected_step_ns - 1 if measured and w.projected_step_ns else None
        changed = _workload_changed(before, after, w.phase) if measured else None
        if changed:
            error = None
        where = f"{w.phase} step" if w.phase else ("step" if w.basis == "steps" else "window")
        if changed:
            seen = changed.format(fmt_step(measured))
        elif not applied:
            seen = "cause still present in the after run (the finding remains at more than half its cost): not checked"
        elif error is not None:
            seen = f"measured {fmt_step(measured)} ({error:+.0%})".replace("%", " %")
        else:
            seen = "not measured in the after run"
        after_source = row.get("source") if row is not None else None
        differ = w.step_source is not None and after_source is not None and after_source != w.step_source
        if differ and applied:
            seen += f"; the steps were found differently ({w.step_source} before, {after_source} after)"
        out.append(ProjectionCheck(
            rule=f.rule, subject=f.subject, transform=w.transform, label=w.label, phase=w.phase,
            device_id=w.device_id, before_step_ns=w.measured_step_ns, projected_step_ns=w.projected_step_ns,
            measured_step_ns=measured, error=error, applied=applied,
            before_step_source=w.step_source, after_step_source=after_source,
            line=f"{w.label}: {where} {fmt_step(w.measured_step_ns)} before, projected "
                 f"{fmt_step(w.projected_step_ns)}, {seen}"))
    return out


def _side(report: Report) -> Side:
    return Side(path=report.profile.path, verdict=report.verdict.primary, headline=report.verdict.headline,
                duration_ns=report.profile.duration_ns, findings=len(report.findings))


# One --tokens N for two runs says each generated N; tokens/s then compares the captures' lengths, not the
# runs' throughput, unless both captures hold the same decode steps (docs/compare-ci.md).
ONE_N_METRICS = ("tokens_per_s", "time_per_token_ns")


def _one_n_for_two(tokens: int, vb: Mapping[str, float | None], va: Mapping[str, float | None]) -> dict[str, str]:
    """The metrics one N makes meaningless on these two profiles, with why: tokens/s when the decode steps differ
    (a step emits a token per sequence, so 25 and 28 steps did not both generate N tokens unless the batches
    differ), and, without decode steps, time per output token too (then duration / N) when the durations differ."""
    sb, sa = vb.get("decode_steps"), va.get("decode_steps")
    if sb is not None and sa is not None:
        if sb == sa:
            return {}
        why = (f"assumes both captures generated {tokens:,} tokens, yet they hold {sb:,.0f} and {sa:,.0f} "
               f"decode steps")
        return {"tokens_per_s": why}
    db, da = vb.get("duration_ns"), va.get("duration_ns")
    if not db or not da or abs(da - db) / db < NOISE:
        return {}
    why = (f"assumes both captures generated {tokens:,} tokens, yet they last {fmt_metric(db, 'ns')} and "
           f"{fmt_metric(da, 'ns')}")
    return {key: why for key in ONE_N_METRICS}


# What an nsys export and a PyTorch-profiler (Kineto) trace of one program record differently, the profiler alone
# accounting for a difference: Kineto records none of the runtime calls it blocklists (cudaGetDevice ...) and, of
# the driver API, only kernel launches and virtual-memory calls (pytorch/kineto, libkineto/src/CuptiCbidRegistry.cpp),
# where nsys records every CUDA call. Compared across the two kinds, these metrics are shown but not judged.
ACROSS_FORMATS = {
    "cpu_api_ns": "sums the CUDA calls each profiler records, and the PyTorch profiler records fewer than nsys "
                  "(none it blocklists, such as cudaGetDevice; of the driver API only launches)",
    "sync_calls": "counts the synchronising calls each profiler records, and the PyTorch profiler records no "
                  "driver-API one (cuStreamSynchronize ...)",
}
FORMAT_NAMES = {"nsys": "an nsys export", "kineto": "a PyTorch-profiler trace"}


def formats_differ(before: Report, after: Report) -> str | None:
    """When the two profiles were recorded by different profilers, what each is, in words ('before is an nsys
    export and after a PyTorch-profiler trace'); None when they are of one kind."""
    fb, fa = before.profile.source_format, after.profile.source_format
    if fb == fa:
        return None
    return f"before is {FORMAT_NAMES.get(fb, fb)} and after {FORMAT_NAMES.get(fa, fa)}"


def _across_formats(deltas: list[MetricDelta], before: Report, after: Report) -> list[MetricDelta]:
    """Across an nsys export and a PyTorch-profiler trace: the metrics of ACROSS_FORMATS shown but not judged, and
    a metric that only one of the two has says which (the other profiler may not record what it is made of)."""
    kinds = formats_differ(before, after)
    if kinds is None:
        return deltas
    names = {"before": FORMAT_NAMES.get(before.profile.source_format, "the before profile"),
             "after": FORMAT_NAMES.get(after.profile.source_format, "the after profile")}
    out = []
    for d in deltas:
        if d.key in ACROSS_FORMATS:
            judged = d.assessment in ("improved", "regressed")
            d = d.model_copy(update={"assessment": "changed" if judged else d.assessment,
                                     "note": f"not judged across profilers: it {ACROSS_FORMATS[d.key]}"})
        elif (d.before is None) != (d.after is None):
            side = "before" if d.before is not None else "after"
            d = d.model_copy(update={"note": f"only the {side} profile ({names[side]}) has it; the other was "
                                             f"recorded by another profiler, which may not record it"})
        out.append(d)
    return out


def compare(before: Report, after: Report, *, tokens: int | tuple[int, int] | None = None,
            gates: Sequence[str] = ()) -> Comparison:
    """`tokens`: the output tokens of both runs (one N) or of each (BEFORE, AFTER). The two may be an nsys export
    and a PyTorch-profiler trace of one program: what differs for the profiler's sake alone is then not judged
    (ACROSS_FORMATS)."""
    tb, ta = tokens if isinstance(tokens, tuple) else (tokens, tokens)
    vb, va = extract(before, tb), extract(after, ta)
    unjudged = _one_n_for_two(tokens, vb, va) if isinstance(tokens, int) else {}
    across = dict(ACROSS_FORMATS) if formats_differ(before, after) else {}
    order = [m.key for m in compared()]
    keys = order + sorted(k for k in set(vb) | set(va) if k not in order)
    deltas = _judged_as_it_matters([_delta(k, vb.get(k), va.get(k)) for k in keys
                                    if vb.get(k) is not None or va.get(k) is not None], before, after)
    deltas = [d.model_copy(update={"assessment": "changed" if d.change else d.assessment,
                                   "note": f"{unjudged[d.key]}; give each run's as --tokens BEFORE,AFTER"})
              if d.key in unjudged else d for d in deltas]
    deltas = _across_formats(deltas, before, after)
    parsed = [parse_gate(s, known_metrics()) for s in gates]
    sides = {"before": before, "after": after}
    checked = check_gates(parsed, vb, va, lambda side, key: _absence(sides[side], key, tb if side == "before" else ta),
                          unjudged, across)
    findings = _finding_changes(before, after)
    verdict, reason = _verdict(deltas, findings)
    return Comparison(tool_version=after.tool_version, before=_side(before), after=_side(after), tokens=tb,
                      tokens_after=ta if ta != tb else None, verdict=verdict, reason=reason, metrics=deltas,
                      findings=findings,
                      projections=_projections(before, after), gates=checked,
                      gate_crossed=any(g.crossed for g in checked),
                      timeline={"before": _timeline(before), "after": _timeline(after)})

