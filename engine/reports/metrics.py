"""The key metrics' mechanism: their values, formatting and the report's rows. What the metrics are is pack data,
rules/vocabulary/metrics.yaml (loaded by engine/pack/metrics.py, each source checked against the fact headers
here). Every renderer (terminal, Markdown, HTML, JSON `key_metrics`), `diagnose batch` (one column each) and
`diagnose compare` (its metric deltas, its verdict and the --fail-on-regression gate names) read METRICS; no
template lists a metric.

To add a key metric whose value a fact already computes, add an entry to metrics.yaml: `source` names the fact
column (FACT.COLUMN, first row of a reported fact; `summary` is the report's `metrics`), `throughput.FIELD` or
`profile.FIELD`. Give it a `threshold` (RULE.PARAM) when a rule judges the same number, and the reports show the
rule's effective value (after diagnose.yaml and --set) and whether the profile is past it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping
from typing import Any

from ..diagnosis.ruleset import ParamThreshold, RuleSet
from ..facts.loading import load_facts
from ..facts.catalog import reported_facts
from ..model.report import MetricRow, ProfileSummary, Report, Throughput
from ..pack.metrics import Metric as Metric  # compare and batch take the definition from here
from ..pack.metrics import Sources, load_metrics
from ..base.units import fmt_value


def metric_sources() -> Sources:
    """What a key metric may read: the documented columns of the bundled reported facts, and the fields of the
    report's throughput and profile."""
    facts = load_facts()
    reported = {f.name: f.column_names for f in reported_facts(facts)}
    return Sources(reported, other_facts=[name for name in facts if name not in reported],
                   computed={"throughput": list(Throughput.model_fields), "profile": list(ProfileSummary.model_fields)})


METRICS: tuple[Metric, ...] = load_metrics(metric_sources())
BY_KEY = {m.key: m for m in METRICS}
# One compared metric per NVTX phase: the time in its ranges (or its kernels' time without ranges).
PHASE_KEY = re.compile(r"^phase_(\w+)_ns$")


def definition(key: str) -> Metric:
    """The metric `key`, a phase_<name>_ns metric included."""
    if key in BY_KEY:
        return BY_KEY[key]
    phase = PHASE_KEY.match(key)
    return Metric(key, f"Time in phase {phase.group(1) if phase else key}", "ns", None, "phases.range_ns")


def compared() -> list[Metric]:
    return [m for m in METRICS if m.compare]


# ------------------------------------------------------------------------------------------------------------
# Values
# ------------------------------------------------------------------------------------------------------------
def number(v: Any) -> float | None:
    """A finite number, else None."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _lookup(source: str, report: Report, throughput: Throughput | None) -> Any:
    where, _, name = source.partition(".")
    if where == "throughput":
        return getattr(throughput, name) if throughput is not None else None
    if where == "profile":
        return getattr(report.profile, name)
    rows = report.facts.get(where) or []
    return rows[0].get(name) if rows else None


def raw_value(metric: Metric, report: Report, throughput: Throughput | None = None) -> Any:
    """The metric's value in `report` as its source holds it (None where the profile has no such number).
    `throughput`: rates other than the report's own (compare computes them with its --tokens)."""
    rates = report.throughput if throughput is None else throughput
    value = None
    for source in metric.sources:
        value = _lookup(source, report, rates)
        if value:
            return value
    return value


def phase_values(report: Report) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for p in report.facts.get("phases") or []:
        name = re.sub(r"\W+", "_", str(p.get("phase") or "other")).lower()
        out[f"phase_{name}_ns"] = number(p.get("range_ns")) or number(p.get("kernel_time_ns"))
    return out


# ------------------------------------------------------------------------------------------------------------
# Formatting
# ------------------------------------------------------------------------------------------------------------
# A metric's unit -> the display unit of engine/base/units.py fmt_value (a metric 'ratio' is shown as 0.00, a 'share'
# as a percentage).
_DISPLAY_UNIT = {"ratio": "plain", "share": "ratio", "percent": "percent", "ns": "ns", "bytes": "bytes",
                 "rate": "per_s", "count": "number"}


def fmt_metric(value: float | None, unit: str) -> str:
    return fmt_value(value, _DISPLAY_UNIT[unit])


def fmt_change(change: float | None, relative: float | None, unit: str) -> str:
    if change is None:
        return "n/a"
    if unit == "share":
        absolute = f"{change * 100:+.1f} pt"
    elif unit == "percent":
        absolute = f"{change:+.1f} pt"
    elif unit == "ratio":
        absolute = f"{change:+.2f}"
    else:
        absolute = ("+" if change >= 0 else "-") + fmt_metric(abs(change), unit)
    if relative is None:
        return absolute
    return f"{absolute}, {relative * 100:+.0f} %"


# ------------------------------------------------------------------------------------------------------------
# Thresholds and the report's rows
# ------------------------------------------------------------------------------------------------------------
_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def rule_thresholds(rules: RuleSet) -> dict[str, ParamThreshold]:
    """The value in force of each rule param a metric names (diagnose.yaml and --set applied, as the rule set
    resolved them); a rule that is not loaded or is disabled judges nothing."""
    out = {}
    for metric in METRICS:
        threshold = rules.threshold(metric.threshold) if metric.threshold is not None else None
        if threshold is not None:
            out[threshold.param] = threshold
    return out


def key_metric_rows(report: Report, thresholds: Mapping[str, ParamThreshold]) -> list[MetricRow]:
    """The report's key metrics (none when the profile ran no kernels). Throughput rows appear when the report
    has a throughput (--tokens or decode steps)."""
    if not report.metrics.get("kernel_count"):
        return []
    shown = [m for m in METRICS if m.report and (report.throughput is not None or not m.is_throughput)]
    values = {m.key: raw_value(m, report) for m in shown}
    shown = [m for m in shown if not m.optional or number(values[m.key]) is not None]
    rows = []
    for m in shown:
        value = values[m.key]
        limit, op, param, limit_display = None, None, None, None
        if m.threshold is not None and m.threshold in thresholds:
            t = thresholds[m.threshold]
            # the rule's own comparison; a param no condition reads is bad on the metric's worse side
            limit, op, param = t.value, t.op or ("<" if m.better == "higher" else ">"), t.param
            limit_display = fmt_metric(limit, m.unit)
        elif m.versus is not None and number(values.get(m.versus)) is not None:
            other = BY_KEY[m.versus]
            limit, op = number(values[m.versus]), "<" if m.better == "higher" else ">"
            limit_display = f"{fmt_metric(limit, m.unit)} ({other.label.lower()})"
        past = None
        measured = number(value)
        if limit is not None and op is not None and measured is not None:
            past = _OPS[op](measured, limit)
        display = m.missing if number(value) is None else fmt_metric(number(value), m.unit)
        rows.append(MetricRow(key=m.key, label=m.label, unit=m.unit, better=m.better,
                              short_label=m.short_label or m.label, group=m.group, doc=m.doc,
                              value=value if number(value) is not None else None,
                              display=display, threshold=limit, threshold_display=limit_display, op=op,
                              param=param, past=past))
    return rows


def facts_read() -> set[str]:
    """The reported facts the key metrics read (metrics.yaml sources `FACT.COLUMN`, and the phases' lengths)."""
    computed = set(metric_sources().computed)
    return {s.partition(".")[0] for m in METRICS for s in m.sources} - computed | {"phases"}
