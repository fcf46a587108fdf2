"""One finding per rule: the same rule firing on several GPUs (in the same phase) is read once."""

from __future__ import annotations

import re

from ..reports.model import AlsoOn, Finding

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
