"""The terminal summary's composed lines (reports/templates/*.txt.j2 wrap and paint them): a view of one report
for one terminal plan (render.py: how many findings in full, which blocks fit the screen). Untrusted text is
made inert by `term` where a part is shortened; the templates' `para` makes the whole line inert."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from ..base.text import plural, term
from ..base.units import fmt_duration, fmt_number, fmt_ratio
from ..model.findings import Finding
from ..model.measures import GpuWindow
from ..model.report import Report
from .steps import StepRow
from .views import matched_texts, profile_header, unique_names

# The reported facts the terminal lines read. A fact not named here is not computed for
# that format (engine/runs/selection.py; tests/test_fact_selection.py proves the list complete).
FACTS_READ = ("phases", "steps")


def header_line(report: Report) -> str:
    """'nsys 2024.6 · 1 GPU used (H100) · 1.2 s traced · stack: vLLM'."""
    p = report.profile
    h = profile_header(report)
    return (f"{p.producer}{h.rank} · {h.gpus_used}{f' ({term(h.gpu_names, 60)})' if h.gpu_names else ''}"
            f" · {fmt_duration(p.duration_ns)} traced"
            f"{f' · CUDA-graph trace mode: {p.graph_trace_mode}' if p.graph_trace_mode else ''}"
            f"{f' · stack: {p.stack.label}' if p.stack else ''}")


def window_lines(windows: Sequence[GpuWindow]) -> list[str]:
    """Per GPU, where its window went: 'GPU 0 (1.2 s): kernels 61 % · copies 2 % · idle: sync 30 % · …'; the
    first idle cause says 'idle:'. The shares keep their number and sign together (a no-break space)."""
    lines = []
    for w in windows:
        parts = [("idle: " if p.idle and not w.parts[i - 1].idle else "") + p.short + " "
                 + fmt_ratio(p.share).replace(" ", "\u00a0") for i, p in enumerate(w.parts)]
        lines.append(f"GPU {w.device_id} ({fmt_duration(w.window_ns)}): {' · '.join(parts)}")
    return lines


@dataclass(frozen=True)
class PhaseLine:
    """One NVTX phase: how many ranges its pattern matched and the texts it matched most; `stats`: its step
    statistics when the plan shows steps and the phase has some."""

    line: str
    stats: str | None


def phase_lines(rows: Sequence[Mapping[str, Any]], steps: Mapping[str, StepRow]) -> list[PhaseLine]:
    out = []
    for p in rows:
        m = matched_texts(p)
        parts = [f"{term(t['text'], 40)} {fmt_number(t['range_count'])}" for t in m.texts]
        if m.more:
            parts.append("+" + plural(m.more, "more text"))
        shown = f" ({', '.join(parts)})" if parts else ""
        step = steps.get(p["phase"])
        out.append(PhaseLine(f"{p['phase']}: {plural(p['range_count'], 'range')} matched{shown}",
                             step.stats if step else None))
    return out


@dataclass(frozen=True)
class FindingLines:
    """One finding: its head line (rule, subject, cost, agreeing rules); with `full`, the other lines."""

    finding: Finding
    full: bool
    head: str
    also_on: str
    evidence: str


def finding_lines(f: Finding, full: bool = True) -> FindingLines:
    cost = ""
    if f.impact is not None:
        of_phase = f" of {f.phase}, {fmt_ratio(f.run_impact, 0)} of the run" if f.phase else ""
        cost = f" · costs {fmt_ratio(f.impact, 0)}{of_phase}"
    subject = f" · {term(f.subject, 40)}" if f.subject else ""
    agrees = f" · also {', '.join(f.agrees)}" if f.agrees else ""
    also_on = ", ".join(a.subject + (f" (costs {fmt_ratio(a.impact, 0)})" if a.impact is not None else "")
                        for a in f.also_on)
    evidence = "; ".join(f"{e.label} {e.display} ({e.op} {e.threshold_display})"
                         for e in f.evidence if e.threshold_display)
    return FindingLines(f, full, f"{f.rule}{subject}{cost}{agrees}", also_on, evidence)


def overrides_line(overrides: Sequence[Any]) -> str:
    return "non-default: " + ", ".join(f"{o.target}={o.value}" for o in overrides)


def skipped_groups(report: Report) -> list[tuple[str, list[str]]]:
    """Skipped rules grouped by reason: several rules usually miss the same table."""
    ordered = sorted(report.skipped, key=lambda s: (s.reason or "", s.rule))
    return [(reason, [s.rule for s in group]) for reason, group in groupby(ordered, key=lambda s: s.reason or "")]


def report_lines(report: Report, step_rows: Sequence[StepRow], no_steps: str, plan: Mapping[str, Any]
                 ) -> dict[str, Any]:
    """The terminal template's values for one plan (render.py's terminal_plans)."""
    listed, full, skipped = plan.get("listed", 0), plan.get("full", 0), plan.get("skipped", 0)
    phase_rows = [p for p in report.facts.get("phases", []) if p.get("range_count") and not p.get("inferred")]
    by_phase = {s.phase: s for s in step_rows} if plan.get("steps") else {}
    phases = phase_lines(phase_rows, by_phase) if plan.get("phases") else []
    show_steps = bool(plan.get("steps") and step_rows and not phases)
    groups = skipped_groups(report)
    rest = [rule for _, rules in groups[skipped:] for rule in rules]
    return {
        "header_line": header_line(report),
        "window_lines": window_lines(report.window),
        "phase_block": phases,
        "phases_title": ("PHASES (record_function ranges)" if report.profile.source_format == "kineto"
                         else "PHASES (NVTX)"),
        "steps_block": [s.line for s in step_rows] if show_steps else [],
        "step_evidence": [f"inferred from shape: prefill steps {s.evidence}" for s in step_rows
                          if s.evidence and s.phase == "prefill"] if show_steps else [],
        "no_steps_line": no_steps if plan.get("steps") and not show_steps else "",
        "listed_findings": [finding_lines(f, i < full) for i, f in enumerate(report.findings[:listed])],
        "more_findings": max(len(report.findings) - listed, 0),
        "skipped_shown": groups[:skipped],
        "skipped_rest": ", ".join(rest),
        "also_checked_rules": ", ".join(unique_names(a.rule for a in report.also_checked)),
        "overrides_line": overrides_line(report.overrides),
    }
