"""Before/after comparison of two diagnosed profiles: metric deltas, finding changes, a verdict and CI gates.

compare(before, after, tokens=..., gates=[...]) -> Comparison (engine/model/comparemodel.py). The compared
metrics, their labels, units and good directions are the key metrics of engine/reports/metrics.py;
engine/reports/render.py renders the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any, Literal

from ..model.comparemodel import (
    Comparison,
    FindingChange,
    MetricDelta,
    Side,
    TimeBin,
)
from ..diagnosis.throughput import check_tokens, throughput
from ..reports.metrics import (
    PHASE_KEY,
    compared,
    definition,
    fmt_metric,
    number,
    phase_values,
    raw_value,
)
from ..model.report import Report
from ..base.vocabulary import Severity
from .deltas import NOISE, judged_as_it_matters, metric_delta
from .gates import check_gates, known_metrics, parse_gate
from .projection_checks import projection_checks


def extract(report: Report, tokens: int | None = None) -> dict[str, float | None]:
    """The compared values of one report (None where the profile has no such number)."""
    check_tokens(report.facts.get("steps") or [], tokens, PurePath(report.profile.path).name)
    metrics = compared()
    out = {m.key: number(raw_value(m, report)) for m in metrics if not m.is_throughput}
    out.update(phase_values(report))
    rates = throughput(out.get("duration_ns"), report.facts.get("steps") or [], tokens)
    out.update({m.key: number(raw_value(m, report, rates)) if rates else None for m in metrics if m.is_throughput})
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
    deltas = judged_as_it_matters([metric_delta(k, vb.get(k), va.get(k)) for k in keys
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
                      projections=projection_checks(before, after), gates=checked,
                      gate_crossed=any(g.crossed for g in checked),
                      timeline={"before": _timeline(before), "after": _timeline(after)})

