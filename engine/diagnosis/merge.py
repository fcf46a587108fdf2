"""One finding per rule: the same rule firing on several GPUs (in the same phase) is read once; and one finding per
cause: a rule that absorbs another (RuleSpec.absorbs) takes in that rule's finding on the same subject."""

from __future__ import annotations

import re

from ..model.findings import AlsoOn, Finding, RuleOutcome
from ..pack.headlines import Headlines
from ..base.units import fmt_ratio
from ..base.vocabulary import Kind

_ON_GPU = re.compile(r"(?:(?P<phase>.+) · )?GPU (?P<device>\d+)")


def merge_gpus(findings: list[Finding]) -> list[Finding]:
    """Findings of one rule and phase whose subjects are single GPUs ('GPU 3', 'decode · GPU 3') become one: the
    worst GPU's finding (highest severity, then cost to the run) with subject 'GPUs 0, 3' and the others in
    `also_on`. Order is kept: the merged finding takes the place of its first member."""
    groups: dict[tuple[str, str | None], list[tuple[int, Finding]]] = {}
    for f in findings:
        match = _ON_GPU.fullmatch(f.subject or "")
        if match and match["phase"] == f.phase:
            groups.setdefault((f.rule, f.phase), []).append((int(match["device"]), f))
    out: list[Finding] = []
    placed: set[tuple[str, str | None]] = set()
    for f in findings:
        key = (f.rule, f.phase)
        members = groups.get(key)
        if not members or not any(m is f for _, m in members):
            out.append(f)
            continue
        if len(members) == 1:
            out.append(f)
        elif key not in placed:
            placed.add(key)
            out.append(_merged(members))
    return out


def _merged(members: list[tuple[int, Finding]]) -> Finding:
    _, lead = max(members, key=lambda m: (m[1].severity.rank, m[1].run_impact or 0.0, -m[0]))
    devices = ", ".join(str(d) for d, _ in sorted(members, key=lambda m: m[0]))
    subject = f"GPUs {devices}" if lead.phase is None else f"{lead.phase} · GPUs {devices}"
    others = [AlsoOn(subject=m.subject or "", severity=m.severity, message=m.message, impact=m.impact,
                     run_impact=m.run_impact, row=m.row)
              for _, m in sorted(members, key=lambda m: m[0]) if m is not lead]
    return lead.model_copy(update={"subject": subject, "also_on": others})


def merge_agreeing(findings: list[Finding], absorbs: dict[str, list[str]]) -> list[Finding]:
    """Findings of a rule listed in `absorbs[R]` whose subject and phase equal those of a finding of rule R are
    folded into R's finding: their evidence is appended (labelled with their rule), their rule id recorded in
    `agrees`, and the larger cost kept. `absorbs`: rule id -> the rule ids it absorbs."""
    by_key = {(f.rule, f.subject, f.phase): f for f in findings}
    folded: dict[int, Finding] = {}
    dropped: set[int] = set()
    for f in findings:
        for other_rule in absorbs.get(f.rule, []):
            other = by_key.get((other_rule, f.subject, f.phase))
            if other is None or id(other) in dropped:
                continue
            dropped.add(id(other))
            lead = folded.get(id(f), f)
            extra = [e.model_copy(update={"label": f"{e.label} ({other.rule})"}) for e in other.evidence]
            folded[id(f)] = lead.model_copy(update={
                "evidence": [*lead.evidence, *extra], "agrees": [*lead.agrees, other.rule],
                "impact": _larger(lead.impact, other.impact), "run_impact": _larger(lead.run_impact, other.run_impact),
                "severity": max(lead.severity, other.severity, key=lambda s: s.rank)})
    return [folded.get(id(f), f) for f in findings if id(f) not in dropped]


def _larger(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


# A finding whose cost is below this share rounds to 0 % where reports print it: it is named, not listed.
NEGLIGIBLE = 0.005
# A symptom restates a cause when the cause's measured share is at least this part of the symptom's cost (the
# same idle time seen twice); two causes restate each other when their costs differ by less than NEGLIGIBLE and
# their what-ifs replay the same fix.
RESTATES = 0.8


def set_aside_negligible(findings: list[Finding], said: Headlines) -> tuple[list[Finding], list[RuleOutcome]]:
    """(the findings worth listing, the rules whose findings cost under 0.5 %): a finding that rounds to 0 % says
    nothing a reader can act on, so it goes to one "also checked" line, its reason worded by `said` (negligible).
    Capture problems and findings without an estimated cost stay."""
    kept: list[Finding] = []
    aside: list[RuleOutcome] = []
    for f in findings:
        if f.impact is not None and f.kind != Kind.CAPTURE and f.impact < NEGLIGIBLE:
            where = said.say("negligible_where", subject=f.subject) if f.subject else ""
            aside.append(RuleOutcome(rule=f.rule, title=f.title, category=f.category,
                                     reason=said.say("negligible", where=where, limit=fmt_ratio(NEGLIGIBLE, 1))))
        else:
            kept.append(f)
    return kept, aside


def fold_restatements(findings: list[Finding], shares: dict[str, str]) -> list[Finding]:
    """Findings that restate another's cause and cost fold into it, their rule recorded in `agrees` (the reports
    print "also: RULE"): a cause whose what-if replays the same fix at the same cost (pcie-bound and
    pageable-memory-copies on the same copies), and a symptom whose idle time a cause on the same GPU and phase
    accounts for (low-utilization beside launch-bound). `shares`: rule id -> its impact column, the share of time
    the rule measured. The first finding (the higher ranked) keeps its place."""
    out: list[Finding] = []
    for f in findings:
        lead = next((i for i, kept in enumerate(out) if _restates(f, kept, shares)), None)
        if lead is None:
            out.append(f)
            continue
        out[lead] = out[lead].model_copy(update={"agrees": [*out[lead].agrees, f.rule]})
    return out


def _device(f: Finding) -> object:
    return (f.row or {}).get("device_id")


def _restates(f: Finding, kept: Finding, shares: dict[str, str]) -> bool:
    if f.phase != kept.phase or _device(f) != _device(kept) or f.impact is None or kept.impact is None:
        return False
    if f.kind == Kind.CAUSE and kept.kind == Kind.CAUSE:
        return (f.what_if is not None and kept.what_if is not None and f.what_if.transform == kept.what_if.transform
                and abs(f.impact - kept.impact) < NEGLIGIBLE)
    if f.kind == Kind.SYMPTOM and kept.kind == Kind.CAUSE and f.impact > 0:
        share = (kept.row or {}).get(shares.get(kept.rule, ""))
        return share is not None and float(share) >= RESTATES * f.impact
    return False
