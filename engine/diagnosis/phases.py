"""Rules judged per inference phase: the rules whose fact is computed again over each phase (`-- @per-phase`,
engine/facts/scopes.py) are evaluated on each phase's facts too, and their findings merged with the run's."""

from __future__ import annotations

from collections.abc import Sequence

from ..facts.catalog import Fact
from ..facts.compute import FactSet
from ..pack.headlines import Headlines
from .evaluate import Evaluation, evaluate, sort_findings
from .phase_verdict import judged_alone_phases, phase_share
from .ruleset import RuleSet
from ..base.vocabulary import Kind


def judge_phases(run: Evaluation, rules: RuleSet, facts: FactSet, fact_defs: dict[str, Fact], *,
                 stack: Sequence[str], capture_preset: str | None = None, said: Headlines | None = None) -> Evaluation:
    """`run` with the per-phase findings added (capture rules aside). A rule that fires in a phase speaks for that
    phase: its whole-run finding on the same subject is dropped (the phases split the run, so the phase findings
    say more), and it no longer counts as passed. A rule that fires only over the whole run keeps that finding.
    A phase with steps enough to judge on its own (phases.judged_alone) rates its findings by their cost to it."""
    if not facts.phases:
        return run
    # Capture problems (sampling too coarse, unknown metric names) belong to the capture, not to a phase.
    phased = rules.only(rid for rid, r in rules.rules.items() if r.spec.fact in fact_defs
                        and fact_defs[r.spec.fact].per_phase and r.spec.kind != Kind.CAPTURE)
    found = []
    alone = judged_alone_phases(facts)
    for phase, scoped in facts.phases.items():
        found += evaluate(phased, scoped, stack=stack, capture_preset=capture_preset, phase=phase,
                          phase_share=phase_share(facts, phase), judged_alone=phase in alone,
                          run_facts=facts, said=said).findings
    if not found:
        return run
    covered = {(f.rule, f.subject.split(" · ", 1)[1] if f.subject and " · " in f.subject else None) for f in found}
    findings = [f for f in run.findings if (f.rule, f.subject) not in covered] + found
    sort_findings(findings, alone)
    fired = {f.rule for f in found}
    return Evaluation(findings=findings, passed=[o for o in run.passed if o.rule not in fired], skipped=run.skipped)
