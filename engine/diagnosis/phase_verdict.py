"""Each inference phase judged against its own service goal: what a phase costs, which goal it bounds, and one
verdict line per phase. Prefill steps make the time to first token (TTFT) and decode steps bound the time per
output token (TPOT), as `vllm bench serve` and SGLang's `bench_serving` define both per request; a 60 % loss in
either is the headline, however short the phase (docs/measures.md "Judged per phase")."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from ..facts.compute import FactSet
from ..model.findings import Finding
from ..model.verdict import PhaseVerdict
from ..pack.headlines import Headlines
from ..base.text import shorten
from ..base.units import fmt_ratio
from ..base.vocabulary import Kind, Severity

# The phase names (default or configured) whose steps bound each goal; TensorRT-LLM calls them context and generation.
Goal = Literal["TTFT", "TPOT"]
_GOALS: dict[str, Goal] = {"prefill": "TTFT", "context": "TTFT", "decode": "TPOT", "generation": "TPOT"}
# A kernel named in a phase line is shortened to this many characters (templated C++ names run to thousands).
KERNEL_NAME_CHARS = 60


def goal_of(phase: str | None) -> Goal | None:
    """'TTFT', 'TPOT' or None for the phase name."""
    return _GOALS.get((phase or "").lower())


def phase_share(facts: FactSet, phase: str) -> float:
    """The share of the run's GPU window (summed over devices) that `phase` owns; 0 when unknown."""
    def window(fs: FactSet) -> float:
        rows = fs.rows("gpu_utilization") if "gpu_utilization" in fs.results else []
        return float(sum(r.get("window_ns") or 0 for r in rows))

    run = window(facts)
    return window(facts.phases[phase]) / run if run > 0 and phase in facts.phases else 0.0


def _phase_rows(facts: FactSet) -> dict[str, dict]:
    return {r["phase"]: r for r in facts.rows("phases")} if "phases" in facts.results else {}


def judged_alone_phases(facts: FactSet) -> set[str]:
    """The judged phases with steps enough (phases.judged_alone, facts.phase_min_steps) to be rated on their own."""
    rows = _phase_rows(facts)
    return {p for p in facts.phases if (rows.get(p) or {}).get("judged_alone")}


def ranking_cost(finding: Finding, alone: Collection[str]) -> float:
    """What a finding costs the user: its share of its phase when that phase is judged alone, else of the run."""
    cost = finding.impact if finding.phase is not None and finding.phase in alone else finding.run_impact
    return cost or 0.0


def phase_verdicts(findings: list[Finding], facts: FactSet, said: Headlines) -> list[PhaseVerdict]:
    """One verdict per judged phase: its costliest cause at warning or above (else symptom), or where its time
    goes when nothing fired; worded by `said` (the phase_line sentences of headlines.yaml)."""
    rows = _phase_rows(facts)
    out = []
    for phase, scoped in facts.phases.items():
        row = rows.get(phase) or {}
        goal = goal_of(phase)
        steps = int(row.get("step_count") or 0)
        alone = bool(row.get("judged_alone"))
        own = [f for f in findings if f.phase == phase and f.severity.at_least(Severity.WARNING)]
        top = (max((f for f in own if f.kind == Kind.CAUSE), key=_cost, default=None)
               or max((f for f in own if f.kind == Kind.SYMPTOM), key=_cost, default=None))
        if top is not None:
            cost = (said.say("phase_line_cost", phase=phase, impact=fmt_ratio(top.impact, 0),
                             run_impact=fmt_ratio(top.run_impact, 0))
                    if top.impact is not None and top.run_impact is not None else "")
            judgement = said.say("phase_line_finding", category=str(top.category), cost=cost,
                                 title=lower_first(top.title))
        else:
            judgement = said.say("phase_line_healthy", where=_where_time_goes(scoped, said))
        share = fmt_ratio(phase_share(facts, phase), 0)
        size = (said.say("phase_size", steps=_steps(steps, said), share=share) if steps
                else said.say("phase_size_no_steps", share=share))
        too_few = said.say("phase_too_few") if steps and not alone else ""
        line = said.say("phase_line", phase=phase, bounds=said.say("phase_line_bounds", goal=goal) if goal else "",
                        judgement=judgement, size=size, too_few=too_few)
        out.append(PhaseVerdict(phase=phase, goal=goal, primary=top.category if top else None,
                                rule=top.rule if top else None, impact=top.impact if top else None,
                                run_impact=top.run_impact if top else None, step_count=steps, judged_alone=alone,
                                line=line))
    return out


def _steps(count: int, said: Headlines) -> str:
    return said.say("phase_steps_one" if count == 1 else "phase_steps_many", count=f"{count:,}")


def _cost(finding: Finding) -> tuple[float, int]:
    return finding.impact or 0.0, finding.severity.rank


def _where_time_goes(scoped: FactSet, said: Headlines) -> str:
    """'GPU busy 99 %, time goes to kernels led by flash_fwd_kernel (41 %)' for the phase's own facts."""
    gpus = scoped.rows("gpu_utilization") if "gpu_utilization" in scoped.results else []
    window = sum(g.get("window_ns") or 0 for g in gpus)
    if window <= 0:
        return said.say("phase_no_gpu_work")
    busy = sum(g.get("compute_busy_ns") or 0 for g in gpus) / window
    kernels = scoped.rows("kernel_occupancy") if "kernel_occupancy" in scoped.results else []
    lead = max(kernels, key=lambda k: k.get("total_ns") or 0, default=None)
    named = ""
    if lead is not None:
        name = lead.get("short_name") or lead.get("name")
        named = said.say("phase_kernels", kernel=shorten(name, KERNEL_NAME_CHARS),
                         share=fmt_ratio(lead.get("kernel_time_share"), 0))
    return said.say("phase_busy", busy=fmt_ratio(busy, 0), kernels=named)


def goal_words(goal: Goal, said: Headlines) -> str:
    """'time to first token' for TTFT, as headlines.yaml words it (goal_ttft, goal_tpot)."""
    return said.say(f"goal_{goal.lower()}")


def lower_first(text: str) -> str:
    """'Launch cost' -> 'launch cost'; 'GPU-side gaps' stays."""
    return text if text[:2].isupper() else text[:1].lower() + text[1:]
