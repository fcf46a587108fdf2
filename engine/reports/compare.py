"""Before/after comparison of two diagnosed profiles: metric deltas, finding changes, a verdict and CI gates.

compare(before, after, tokens=..., gates=[...]) -> Comparison; render_compare(comparison, fmt) renders it with
reports/templates/compare.{txt,md,html}.j2 or as JSON (the model dump).
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Literal

from pydantic import BaseModel

from ..errors import DiagnoseError
from ..vocabulary import Severity
from .model import Report
from ..diagnosis.throughput import throughput
from ..units import fmt_duration, fmt_number, fmt_ratio

COMPARISON_SCHEMA_VERSION = "1.0"
NOISE = 0.02  # relative changes below 2 % count as unchanged

# key -> (label, unit, better): unit is one of ratio (0-1 shown as 0.00), share (0-1 shown as %), ns, count,
# rate (per second); better is "higher", "lower" or None (no good direction: reported, never judged).
METRICS: dict[str, tuple[str, str, str | None]] = {
    "overhead_ratio": ("Launch overhead ratio", "ratio", "lower"),
    "gpu_utilization": ("GPU utilisation", "share", "higher"),
    "mean_gap_ns": ("Mean gap between kernels", "ns", "lower"),
    "median_gap_ns": ("Median gap between kernels", "ns", "lower"),
    "kernel_count": ("Kernels", "count", None),
    "mean_kernel_ns": ("Mean kernel duration", "ns", None),
    "launch_calls": ("Launch calls", "count", "lower"),
    "launch_mean_ns": ("Launch latency (mean)", "ns", "lower"),
    "sync_calls": ("Synchronisations", "count", "lower"),
    "memcpy_ns": ("Copy time", "ns", "lower"),
    "gpu_active_ns": ("GPU active time", "ns", None),
    "cpu_api_ns": ("CPU time in CUDA API calls", "ns", None),
    "duration_ns": ("Profiled duration", "ns", None),
    "decode_steps": ("Decode steps (NVTX)", "count", None),
    "step_time_ns": ("Decode step time (mean)", "ns", "lower"),
    "steps_per_s": ("Decode steps per second", "rate", "higher"),
    "tokens_per_s": ("Output tokens per second", "rate", "higher"),
    "time_per_token_ns": ("Time per output token", "ns", "lower"),
}
# The metrics that decide the verdict when one of them changed; the others only when none of these did.
HEADLINE = ("overhead_ratio", "gpu_utilization", "tokens_per_s", "time_per_token_ns", "step_time_ns", "steps_per_s")
_PHASE_KEY = re.compile(r"^phase_(\w+)_ns$")


class GateError(DiagnoseError):
    """An unknown metric or malformed --fail-on-regression spec (exit 2)."""


class MetricDelta(BaseModel):
    key: str
    label: str
    unit: str
    better: Literal["higher", "lower"] | None
    before: float | None
    after: float | None
    change: float | None       # after - before
    relative: float | None     # change / |before|; None when before is 0 or missing
    assessment: Literal["improved", "regressed", "unchanged", "changed", "n/a"]
    before_display: str
    after_display: str
    change_display: str


class FindingChange(BaseModel):
    rule: str
    subject: str | None
    title: str
    change: Literal["appeared", "disappeared", "severity changed"]
    before_severity: Severity | None
    after_severity: Severity | None


class Side(BaseModel):
    path: str
    verdict: str | None
    headline: str
    duration_ns: int | None
    findings: int


class Gate(BaseModel):
    spec: str
    metric: str
    direction: Literal["+", "-"]   # '+': fail when the metric rises by more than threshold; '-': falls
    threshold: float
    relative: bool                 # threshold in % of the before value (else absolute, in the metric's unit)
    observed: float | None = None  # the change in the gate's terms (absolute or relative), None: not evaluated
    crossed: bool = False
    message: str = ""


class Comparison(BaseModel):
    schema_version: str = COMPARISON_SCHEMA_VERSION
    tool: str = "nsys-diagnose"
    tool_version: str
    before: Side
    after: Side
    tokens: int | None
    verdict: Literal["improved", "regressed", "unchanged"]
    reason: str
    metrics: list[MetricDelta]
    findings: list[FindingChange]
    gates: list[Gate]
    gate_crossed: bool
    timeline: dict[str, list[dict[str, float]]]  # before/after: [{t_ns, busy}] mean over used GPUs


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def fmt_metric(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ratio":
        return f"{value:.2f}"
    if unit == "share":
        return fmt_ratio(value)
    if unit == "ns":
        return fmt_duration(value)
    if unit == "rate":
        return f"{fmt_number(value)}/s"
    return fmt_number(value)


def _fmt_change(change: float | None, relative: float | None, unit: str) -> str:
    if change is None:
        return "n/a"
    if unit == "share":
        absolute = f"{change * 100:+.1f} pt"
    elif unit == "ratio":
        absolute = f"{change:+.2f}"
    else:
        absolute = ("+" if change >= 0 else "-") + fmt_metric(abs(change), unit)
    if relative is None:
        return absolute
    return f"{absolute}, {relative * 100:+.0f} %"


def extract(report: Report, tokens: int | None = None) -> dict[str, float | None]:
    """The compared values of one report (None where the profile has no such number)."""
    m = report.metrics or {}
    out: dict[str, float | None] = {k: _num(m.get(k)) for k in METRICS if k in m}
    out["duration_ns"] = _num(report.profile.duration_ns) or _num(m.get("duration_ns"))
    sync = report.facts.get("sync_overview") or []
    out["sync_calls"] = _num(sync[0].get("sync_calls")) if sync else None
    phases = report.facts.get("phases") or []
    for p in phases:
        name = re.sub(r"\W+", "_", str(p.get("phase") or "other")).lower()
        out[f"phase_{name}_ns"] = _num(p.get("range_ns")) or _num(p.get("kernel_time_ns"))
    rates = throughput(out.get("duration_ns"), phases, tokens)
    if rates is not None:
        for key in ("decode_steps", "step_time_ns", "steps_per_s", "tokens_per_s", "time_per_token_ns"):
            value = getattr(rates, key)
            if value is not None:
                out[key] = float(value)
    return out


def _definition(key: str) -> tuple[str, str, str | None]:
    if key in METRICS:
        return METRICS[key]
    phase = _PHASE_KEY.match(key)
    return (f"Time in phase {phase.group(1) if phase else key}", "ns", None)


def _delta(key: str, before: float | None, after: float | None) -> MetricDelta:
    label, unit, better = _definition(key)
    change = relative = None
    if before is not None and after is not None:
        change = after - before
        relative = change / abs(before) if before else None
    if change is None:
        assessment = "n/a"
    elif (relative is not None and abs(relative) < NOISE) or change == 0:
        assessment = "unchanged"
    elif better is None:
        assessment = "changed"
    else:
        assessment = "improved" if (change > 0) == (better == "higher") else "regressed"
    return MetricDelta(key=key, label=label, unit=unit, better=better, before=before, after=after, change=change,
                       relative=relative, assessment=assessment, before_display=fmt_metric(before, unit),
                       after_display=fmt_metric(after, unit), change_display=_fmt_change(change, relative, unit))


def _finding_changes(before: Report, after: Report) -> list[FindingChange]:
    b = {(f.rule, f.subject): f for f in before.findings}
    a = {(f.rule, f.subject): f for f in after.findings}
    out = []
    for key in sorted(set(a) | set(b), key=lambda k: (k[0], k[1] or "")):
        fb, fa = b.get(key), a.get(key)
        if fb and fa and fb.severity == fa.severity:
            continue
        change = "appeared" if fb is None else "disappeared" if fa is None else "severity changed"
        out.append(FindingChange(rule=key[0], subject=key[1], title=(fa or fb).title, change=change,
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


def _verdict(deltas: list[MetricDelta], findings: list[FindingChange]) -> tuple[str, str]:
    judged = [d for d in deltas if d.key in HEADLINE and _score(d)] or [d for d in deltas if _score(d)]
    if judged:
        main = max(judged, key=lambda d: abs(_score(d)))
        verdict = "improved" if _score(main) > 0 else "regressed"
        worse = [d for d in judged if _score(d) < 0] if verdict == "improved" else []
        reason = _describe(main) + (f"; but {_describe(max(worse, key=lambda d: -_score(d)))}" if worse else "")
        return verdict, reason
    new = [f for f in findings if f.change == "appeared" or (
        f.change == "severity changed" and f.after_severity.rank > f.before_severity.rank)]
    new = [f for f in new if f.after_severity.at_least(Severity.WARNING)]
    if new:
        return "regressed", f"new {new[0].after_severity}: {new[0].title}" + (
            f" ({new[0].subject})" if new[0].subject else "")
    return "unchanged", f"no judged metric changed by {NOISE * 100:.0f} % or more"


_GATE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*:\s*([+-]?)\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*$")


def parse_gate(spec: str, known: list[str]) -> Gate:
    """'gpu_utilization:-5%' (fail when it falls by more than 5 % of its before value) or
    'overhead_ratio:+0.05' (fail when it rises by more than 0.05); without a sign, the metric's bad direction."""
    m = _GATE.match(spec)
    if not m:
        raise GateError(f"--fail-on-regression {spec!r} is not METRIC:[+|-]NUMBER[%], "
                        f"e.g. gpu_utilization:-5% or overhead_ratio:+0.05")
    name, sign, number, pct = m.groups()
    if name not in known and not _PHASE_KEY.match(name):
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known metrics are {', '.join(known)}"
        raise GateError(f"unknown metric {name!r} in --fail-on-regression{hint}")
    if not sign:
        better = _definition(name)[2]
        if better is None:
            raise GateError(f"metric {name!r} has no good direction; give one in --fail-on-regression, "
                            f"e.g. {name}:+{number}{pct}")
        sign = "-" if better == "higher" else "+"
    return Gate(spec=spec.strip(), metric=name, direction=sign, threshold=float(number), relative=bool(pct))


def known_metrics() -> list[str]:
    """Gate-able metric names (plus phase_<name>_ns for each NVTX phase)."""
    return sorted(METRICS)


def _check(gate: Gate, deltas: dict[str, MetricDelta]) -> Gate:
    d = deltas.get(gate.metric)
    label = f"{gate.metric} ({gate.spec})"
    if d is None or d.change is None:
        return gate.model_copy(update={"message": f"{label}: not evaluated, the metric is missing in a profile"})
    if gate.relative:
        if d.relative is None:
            return gate.model_copy(update={"message": f"{label}: not evaluated, the before value is 0"})
        observed, limit = d.relative * 100, gate.threshold
        shown = f"{observed:+.1f} %"
    else:
        observed, limit = d.change, gate.threshold
        shown = d.change_display
    moved = observed if gate.direction == "+" else -observed
    crossed = moved > limit
    verb = "rose" if observed > 0 else "fell"
    message = (f"{gate.metric} {verb} {d.before_display} → {d.after_display} ({shown}), "
               f"{'beyond' if crossed else 'within'} the allowed {gate.direction}{gate.threshold:g}"
               f"{' %' if gate.relative else ''}")
    return gate.model_copy(update={"observed": observed, "crossed": crossed, "message": message})


def _timeline(report: Report) -> list[dict[str, float]]:
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
        out.append({"t_start_ns": float(start), "t_end_ns": float(end), "busy": sum(busy) / len(busy)})
    return out


def _side(report: Report) -> Side:
    return Side(path=report.profile.path, verdict=report.verdict.primary, headline=report.verdict.headline,
                duration_ns=report.profile.duration_ns, findings=len(report.findings))


def compare(before: Report, after: Report, *, tokens: int | None = None, gates: list[str] = ()) -> Comparison:
    vb, va = extract(before, tokens), extract(after, tokens)
    keys = list(METRICS) + sorted(k for k in set(vb) | set(va) if k not in METRICS)
    deltas = [_delta(k, vb.get(k), va.get(k)) for k in keys
              if vb.get(k) is not None or va.get(k) is not None]
    parsed = [parse_gate(s, known_metrics()) for s in gates]
    by_key = {d.key: d for d in deltas}
    checked = [_check(g, by_key) for g in parsed]
    findings = _finding_changes(before, after)
    verdict, reason = _verdict(deltas, findings)
    return Comparison(tool_version=after.tool_version, before=_side(before), after=_side(after), tokens=tokens,
                      verdict=verdict, reason=reason, metrics=deltas, findings=findings, gates=checked,
                      gate_crossed=any(g.crossed for g in checked),
                      timeline={"before": _timeline(before), "after": _timeline(after)})


FORMATS = ("terminal", "md", "html", "json")


def render_compare(comparison: Comparison, fmt: str, *, colour: bool = False) -> str:
    from . import charts
    from .render import _ANSI, _environment, para, render_json

    if fmt == "json":
        return render_json(comparison)  # same inert-JSON writer as the report
    if fmt == "html":
        env = _environment(autoescape=True)
        return env.get_template("compare.html.j2").render(
            c=comparison, chart=charts.compare_timeline(comparison.timeline))
    env = _environment(autoescape=False)
    if fmt == "md":
        return env.get_template("compare.md.j2").render(c=comparison)
    if fmt == "terminal":
        def paint(text: str, style: str) -> str:
            return f"{_ANSI[style]}{text}{_ANSI['reset']}" if colour else text

        env.filters["para"] = para
        return env.get_template("compare.txt.j2").render(c=comparison, paint=paint)
    raise ValueError(f"unknown format {fmt!r}")
