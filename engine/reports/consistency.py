"""The rules a report must keep to tell one story: its parts (verdict, costs, what-ifs, steps, wording) may not
contradict each other, and every format must render it. `check(report)` lists every broken rule as a sentence;
the test suite runs it on every bundled scenario, every real export and generated exports (docs/reports.md "One
story per report").

A reader who catches one contradiction ("costs 86 %" beside "no measurable gain") stops trusting the rest, so
each rule here is one such contradiction made impossible:

1. Every format renders, and shows the verdict.
2. A cause finding costing 10 % or more whose rule replays a fix has a what-if that gains, or says why not.
3. No what-if promises more than removing the finding's cost can give: speed-up <= 1 / (1 - cost).
4. The verdict's cost is its finding's cost, as the headline prints it.
5. On a GPU whose kernels run 90 % of the window, no overhead costing under 10 % is the primary.
6. Steps found from calls (syncs, graph launches) repeat: at least MIN_STEPS of them, each step's GPU-busy share
   at most 1.
7. No listed finding costs 0 % (rounded): those are named in `also_checked`.
8. Token wording (TPOT, TTFT, tokens/s, continuous batching) only where the run serves or generates tokens.
"""

from __future__ import annotations

import html
from collections.abc import Collection

from ..pack.categories import load_categories
from ..diagnosis.verdict import BUSY_GPU, BUSY_GPU_OVERHEAD
from ..diagnosis.merge import NEGLIGIBLE
from ..diagnosis.whatif import MIN_GAIN, MIN_STEPS
from ..model.report import Report
from ..base.units import fmt_ratio
from ..base.vocabulary import Kind, Severity
from .render import FORMATS, render
from .steps import serves_tokens

COST_NEEDS_WHAT_IF = 0.10
# Speed-ups and costs are rounded where they are printed; allow that much.
TOLERANCE = 1.01
TOKEN_WORDS = ("TPOT", "TTFT", "tokens/s", "time per output token", "time to first token", "continuous batching")


def check(report: Report, replayed_rules: Collection[str] = (), *, formats: Collection[str] = FORMATS) -> list[str]:
    """Every rule of this module the report breaks, one sentence each; empty when it tells one story.
    `replayed_rules`: the ids of the rules that name a what-if transform (rule `what_if:`), whose findings must
    carry a what-if; `formats`: the formats rendered (rule 1)."""
    problems: list[str] = []
    texts = _rendered(report, formats, problems)
    problems += _what_ifs(report, set(replayed_rules))
    problems += _verdict(report)
    problems += _steps(report)
    problems += [f"{f.rule}: listed at {fmt_ratio(f.impact, 1)}, which rounds to 0 %; it belongs in also_checked"
                 for f in report.findings if f.impact is not None and f.kind != Kind.CAPTURE
                 and f.impact < NEGLIGIBLE and (f.rule, f.subject) != (report.verdict.rule, report.verdict.subject)]
    if not serves_tokens(report):
        for fmt, text in texts.items():
            found = [w for w in TOKEN_WORDS if w in text]
            if found:
                problems.append(f"the {fmt} report speaks of {', '.join(found)} though the run serves no tokens")
    return problems


def _overheads() -> set[str]:
    """The bundled categories that are overheads around the kernels (rules/vocabulary/categories.yaml
    `overhead: true`)."""
    return {c.id for c in load_categories().values() if c.overhead}


def _rendered(report: Report, formats: Collection[str], problems: list[str]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for fmt in formats:
        try:
            text = render(report, fmt, colour=False)
        except Exception as exc:  # noqa: BLE001 - any failure to render is what this rule reports
            problems.append(f"the {fmt} report does not render: {type(exc).__name__}: {exc}")
            continue
        shown = html.unescape(text) if fmt == "html" else text
        if fmt != "json" and report.verdict.headline.split(":")[0][:40] not in shown.replace("\n", " "):
            problems.append(f"the {fmt} report does not show the verdict")
        texts[fmt] = text
    return texts


def _what_ifs(report: Report, replayed_rules: set[str]) -> list[str]:
    problems = []
    for f in report.findings:
        w = f.what_if
        if (w is None and f.rule in replayed_rules and f.kind == Kind.CAUSE and f.severity.at_least(Severity.WARNING)
                and (f.impact or 0.0) >= COST_NEEDS_WHAT_IF):
            problems.append(f"{f.rule}: costs {fmt_ratio(f.impact, 0)} but has no what-if")
        if w is None:
            continue
        gains = w.speedup is not None and w.speedup >= MIN_GAIN
        if (f.impact or 0.0) >= COST_NEEDS_WHAT_IF and not gains and not w.why_not:
            problems.append(f"{f.rule}: costs {fmt_ratio(f.impact, 0)} but its what-if gains nothing and does not "
                            f"say why ({w.line})")
        if f.impact is not None and w.speedup is not None and f.impact < 1:
            bound = 1 / (1 - f.impact)
            if w.speedup > bound * TOLERANCE:
                problems.append(f"{f.rule}: its what-if promises {w.speedup:.2f}x, more than removing its cost "
                                f"({fmt_ratio(f.impact, 0)}) can give ({bound:.2f}x)")
    return problems


def _verdict(report: Report) -> list[str]:
    v = report.verdict
    problems = []
    finding = next((f for f in report.findings if (f.rule, f.subject) == (v.rule, v.subject)), None)
    if v.rule is not None and finding is None:
        problems.append(f"the verdict names {v.rule}, which is not among the findings")
    if finding is not None and finding.run_impact is not None and v.impact is not None:
        if abs(finding.run_impact - v.impact) > 1e-9:
            problems.append(f"the verdict costs {fmt_ratio(v.impact, 0)}, its finding "
                            f"{fmt_ratio(finding.run_impact, 0)}")
        printed = fmt_ratio(finding.impact, 0)
        if "costs ≈" in v.headline and f"costs ≈{printed}" not in v.headline:
            problems.append(f"the headline's cost is not its finding's ({printed})")
    util = (report.metrics or {}).get("gpu_utilization")
    cost = finding.run_impact if finding is not None else None
    alone = {p.phase for p in v.phases if p.judged_alone}
    if finding is not None and finding.phase in alone:
        # a phase judged alone is judged by its own busy share and its cost to the phase
        rows = report.phase_facts.get(finding.phase or "", {}).get("gpu_utilization", [])
        window = sum(r.get("window_ns") or 0 for r in rows)
        util = sum(r.get("compute_busy_ns") or 0 for r in rows) / window if window else util
        cost = finding.impact
    if (finding is not None and util is not None and util >= BUSY_GPU and finding.kind == Kind.CAUSE
            and finding.category in _overheads() and (cost or 0.0) < BUSY_GPU_OVERHEAD):
        problems.append(f"the GPU is {fmt_ratio(util, 0)} busy in kernels, yet the verdict is an overhead costing "
                        f"{fmt_ratio(cost, 0)} ({finding.rule})")
    return problems


def _steps(report: Report) -> list[str]:
    problems = []
    for row in report.facts.get("steps", []):
        count = row.get("step_count") or 0
        if row.get("source") in ("sync", "graph-launch") and 0 < count < MIN_STEPS:
            problems.append(f"{count} step(s) found from {row['source']} calls: too few to be a loop")
        busy = row.get("busy_share")
        if busy is not None and not 0 <= busy <= 1:
            problems.append(f"step GPU-busy share {busy} is not a share")
    return problems
