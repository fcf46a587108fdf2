"""The --fail-on-regression gates of a comparison: parsed from METRIC[?]:[+|-]NUMBER[UNIT] against the key
metrics, then checked on the before and after values (engine/runs/compare.py calls both)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Literal

from ..model.comparemodel import (
    Gate,
    GateUnit,
)
from ..base.errors import DiagnoseError
from ..base.text import did_you_mean
from ..reports.metrics import (
    PHASE_KEY,
    Metric,
    compared,
    definition,
)
from ..base.units import DURATION_UNITS
from .deltas import metric_delta


class GateError(DiagnoseError):
    """A --fail-on-regression gate that is malformed, names an unknown metric, uses a unit that cannot apply to
    its metric, or cannot be evaluated on the two profiles (exit 2). `problems`: one sentence per gate."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


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
    d = metric_delta(gate.metric, before, after)
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
