"""Before/after comparison of two diagnosed profiles: metric deltas, finding changes, a verdict and CI gates.

compare(before, after, tokens=..., gates=[...]) -> Comparison (comparemodel.py). The compared metrics, their
labels, units and good directions are the key metrics of metrics.py; render.py renders the comparison.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from .comparemodel import Comparison, FindingChange, Gate, MetricDelta, Side
from ..diagnosis.throughput import throughput
from ..errors import DiagnoseError
from .metrics import PHASE_KEY, compared, definition, fmt_change, fmt_metric, number, phase_values, raw_value
from .model import Report
from ..vocabulary import Severity

NOISE = 0.02  # relative changes below 2 % count as unchanged


class GateError(DiagnoseError):
    """An unknown metric or malformed --fail-on-regression spec (exit 2)."""


def extract(report: Report, tokens: int | None = None) -> dict[str, float | None]:
    """The compared values of one report (None where the profile has no such number)."""
    metrics = compared()
    out = {m.key: number(raw_value(m, report)) for m in metrics if not m.is_throughput}
    out.update(phase_values(report))
    rates = throughput(out.get("duration_ns"), report.facts.get("phases") or [], tokens)
    out.update({m.key: number(raw_value(m, report, rates)) if rates else None for m in metrics if m.is_throughput})
    return out


def _delta(key: str, before: float | None, after: float | None) -> MetricDelta:
    m = definition(key)
    change = relative = None
    if before is not None and after is not None:
        change = after - before
        relative = change / abs(before) if before else None
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
    judged = [d for d in deltas if definition(d.key).headline and _score(d)] or [d for d in deltas if _score(d)]
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
    name, sign, amount, pct = m.groups()
    if name not in known and not PHASE_KEY.match(name):
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known metrics are {', '.join(known)}"
        raise GateError(f"unknown metric {name!r} in --fail-on-regression{hint}")
    if not sign:
        better = definition(name).better
        if better is None:
            raise GateError(f"metric {name!r} has no good direction; give one in --fail-on-regression, "
                            f"e.g. {name}:+{amount}{pct}")
        sign = "-" if better == "higher" else "+"
    return Gate(spec=spec.strip(), metric=name, direction=sign, threshold=float(amount), relative=bool(pct))


def known_metrics() -> list[str]:
    """Gate-able metric names (plus phase_<name>_ns for each NVTX phase)."""
    return sorted(m.key for m in compared())


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
    order = [m.key for m in compared()]
    keys = order + sorted(k for k in set(vb) | set(va) if k not in order)
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

