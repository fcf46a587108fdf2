"""The check of each what-if projection of the before run against the after run of a comparison: the step
the before run's finding projected beside the step the after run measured, where the fix was applied."""

from __future__ import annotations

from typing import Any

from ..model.comparemodel import ProjectionCheck
from ..diagnosis.whatif import fmt_step
from ..reports.metrics import number
from ..model.findings import Finding
from ..model.report import Report


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


def projection_checks(before: Report, after: Report) -> list[ProjectionCheck]:
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
