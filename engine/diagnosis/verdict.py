"""From findings to the verdict: the primary bottleneck, the headline that names it and the notes after it, and
one line per inference phase. Every sentence is worded in rules/vocabulary/headlines.yaml (or a team pack's
headlines.yaml); this module decides which sentence applies and formats the numbers it is filled in with."""

from __future__ import annotations

from collections.abc import Collection

from ..facts.compute import FactSet
from ..model.findings import Finding
from ..model.verdict import Verdict
from ..pack.headlines import Headlines, load_headlines
from .evaluate import Evaluation
from .phase_verdict import goal_of, goal_words, judged_alone_phases, lower_first, phase_verdicts, ranking_cost
from .rule_spec import Rule
from .startup import startup_note
from .whatif import serves_llm
from ..base.vocabulary import IDLE_CAUSES, Kind, Severity, WindowPart
from ..base.units import fmt_ratio, fmt_value

# A cause must cost at least this share of the profiled time to be named the primary bottleneck.
PRIMARY_MIN_IMPACT = 0.05
# The capture finding of graph-mode CUDA graphs (rules/capture/graph-mode-hides-kernels.yaml).
GRAPH_MODE_RULE = "graph-mode-hides-kernels"
# Above this overhead ratio (launch-bound's default max_overhead_ratio) the verdict accounts for the gaps.
OVERHEAD_RATIO_NOTABLE = 0.3
# On a GPU whose kernels run at least BUSY_GPU of the judged window, an overhead costing less than BUSY_GPU_OVERHEAD
# of it is not the bottleneck: the kernels are (the verdict says so), and the overhead is a secondary finding.
BUSY_GPU = 0.9
BUSY_GPU_OVERHEAD = 0.10
# A traced idle cause that takes more than this share of a mostly-idle GPU's idle time is the bottleneck, not the
# idleness it causes.
DOMINANT_IDLE_SHARE = 0.5
# An idle cause under this share of the idle time rounds to 0 % and is not named.
_NAMED_IDLE_SHARE = 0.005


def idle_cause_rules(rules: dict[str, Rule]) -> dict[str, tuple[str, str]]:
    """{idle cause: (rule id, category)} of the rules that judge an idle cause (`idle_cause:`), bundled rules
    first, so a team rule never takes over a cause a bundled rule judges."""
    out: dict[str, tuple[str, str]] = {}
    for rule in sorted(rules.values(), key=lambda r: (r.source != "bundled", r.id)):
        if rule.spec.idle_cause is not None:
            out.setdefault(rule.spec.idle_cause, (rule.id, rule.spec.category))
    return out


def verdict(evaluation: Evaluation, facts: FactSet, blocking_rules: set[str],
            idle_rules: dict[str, tuple[str, str]] | None = None, headlines: Headlines | None = None,
            overheads: Collection[str] = (), stack: str | None = None) -> Verdict:
    """The primary bottleneck. `idle_rules` (idle_cause_rules): which rule judges each idle cause, so that a symptom
    whose idle time one traced cause mostly explains gives way to that cause. `headlines`: the verdict's wording
    (load_headlines: bundled, or a team pack's). `overheads`: the categories that are overheads around the kernels
    (Category.overhead), which a GPU busy in its kernels does not take as the primary when they cost little.
    `stack`: the profile's software stack (StackInfo.name, detected once by the caller), which says whether quiet
    stretches are a server waiting for requests."""
    said = headlines or load_headlines()
    phases = phase_verdicts(evaluation.findings, facts, said)
    notes = _Notes(facts, said, stack)
    return _verdict(evaluation, facts, blocking_rules, idle_rules, notes, set(overheads)).model_copy(
        update={"phases": phases})


class _Notes:
    """The sentences a headline ends with, worded by `said`."""

    def __init__(self, facts: FactSet, said: Headlines, stack: str | None) -> None:
        self.facts, self.said, self.stack = facts, said, stack

    def window(self) -> str:
        """What the verdict leaves out of the judged window: stretches with nothing in flight, a one-off start-up."""
        return self.server_idle() + startup_note(self.facts, self.said)

    def also_on(self, finding: Finding) -> str:
        """' The same on GPU 0 (≈95 %) and GPU 2 (≈41 %).' for a finding merged over several GPUs."""
        if not finding.also_on:
            return ""
        say = self.said.say
        parts = [say("also_on_gpu", gpu=gpu, impact=fmt_ratio(a.impact, 0)) if a.impact is not None else gpu
                 for a in finding.also_on for gpu in [a.subject.rsplit(" · ", 1)[-1]]]
        listed = parts[0] if len(parts) == 1 else say("list_and", items=", ".join(parts[:-1]), last=parts[-1])
        return say("also_on", gpus=listed)

    def unexplained_gaps(self) -> str:
        """' The GPUs still wait between kernels (overhead ratio 0.43): ...', naming the idle causes, largest
        first; empty when the overhead ratio is at most OVERHEAD_RATIO_NOTABLE."""
        facts = self.facts
        summary = facts.first("summary") if "summary" in facts.results else {}
        ratio = summary.get("overhead_ratio")
        gpus = facts.rows("gpu_utilization") if "gpu_utilization" in facts.results else []
        if ratio is None or ratio <= OVERHEAD_RATIO_NOTABLE or not gpus:
            return ""
        idle = {c: sum(g.get(c.column) or 0 for g in gpus) for c in IDLE_CAUSES}
        total = sum(idle.values())
        if total <= 0:
            return ""
        parts = [self.said.say("idle_cause_share", share=fmt_ratio(ns / total, 0), cause=_cause_words(c))
                 for c, ns in sorted(idle.items(), key=lambda kv: -kv[1]) if ns / total >= _NAMED_IDLE_SHARE]
        return self.said.say("unexplained_gaps", ratio=f"{ratio:.2f}", causes=", ".join(parts))

    def server_idle(self) -> str:
        """' Waiting for requests 45 % of the capture (9 quiet stretches with no GPU work, no CUDA calls and no
        engine step; 9 with the issuing thread in epoll_wait); this verdict judges the 501.5 ms of active work.'
        when the run waited (fact server_idle); empty otherwise."""
        facts, say = self.facts, self.said.say
        idle = facts.first("server_idle") if "server_idle" in facts.results else {}
        count = idle.get("stretch_count") or 0
        if not count:
            return ""
        stretches = say("server_idle_one") if count == 1 else say("server_idle_many", count=f"{count:,}")
        how = ""
        if idle.get("os_wait_count"):
            how += say("server_idle_os_wait", count=f"{idle['os_wait_count']:,}", calls=str(idle.get("wait_calls")))
        if idle.get("off_cpu_count"):
            how += say("server_idle_off_cpu", count=f"{idle['off_cpu_count']:,}")
        # Only a run that serves an LLM waits for requests; any other program with nothing in flight works on the
        # host or waits for something the trace cannot name.
        key = "server_idle_serving" if serves_llm(self.stack, facts, None) else "server_idle"
        return say(key, share=fmt_ratio(idle.get("idle_fraction"), 0), stretches=stretches, how=how,
                   active=fmt_value(idle.get("active_ns"), "ns"))


def _cause_words(cause: WindowPart) -> str:
    """'host-side gaps' for the idle cause labelled 'Idle: Host-side gaps'."""
    return lower_first(cause.label.removeprefix("Idle: "))


def _verdict(evaluation: Evaluation, facts: FactSet, blocking_rules: set[str],
             idle_rules: dict[str, tuple[str, str]] | None, notes: _Notes, overheads: set[str]) -> Verdict:
    said = notes.said
    findings = evaluation.findings
    blocking = [f for f in findings if f.rule in blocking_rules]
    if blocking:
        f = blocking[0]
        return Verdict(primary=f.category, rule=f.rule, subject=f.subject, phase=f.phase, impact=f.run_impact,
                       headline=said.say("blocking", title=f.title, message=f.message))
    # The finding that costs the user most: a phase judged alone counts its findings' share of the phase, since
    # its steps bound a service goal of their own (TTFT or TPOT), however little of the run the phase takes.
    alone = judged_alone_phases(facts)

    def user_cost(f: Finding) -> float:
        return ranking_cost(f, alone)

    def strongest(kind: Kind, min_impact: float) -> Finding | None:
        candidates = [f for f in findings if f.kind == kind and f.severity.at_least(Severity.WARNING)
                      and user_cost(f) >= min_impact]
        return max(candidates, key=lambda f: (user_cost(f), f.severity.rank), default=None)

    cause = strongest(Kind.CAUSE, PRIMARY_MIN_IMPACT)
    # Judged in its own scope: a phase judged alone by its own busy share and its cost to the phase.
    busy = _busy_gpu(facts.phases.get(cause.phase, facts) if cause is not None and cause.phase in alone else facts)
    if busy is not None and cause is not None and cause.category in overheads and user_cost(cause) < BUSY_GPU_OVERHEAD:
        return Verdict(primary=None, headline=_gpu_bound_headline(notes, busy, cause))
    symptom = None if cause is not None else strongest(Kind.SYMPTOM, PRIMARY_MIN_IMPACT)
    traced = _dominant_idle_cause(symptom, idle_rules or {}) if symptom is not None else None
    if traced is not None and symptom is not None:  # traced is only found for a symptom
        # The symptom never outranks a traced cause that explains most of its idle time: the cause's own finding
        # (reported below warning, or on another GPU) becomes the primary, else the verdict names the cause.
        part, share, (rule_id, category) = traced
        own = [f for f in findings if f.rule == rule_id and f.kind == Kind.CAUSE]
        if own:
            cause = max(own, key=lambda f: (user_cost(f), f.severity.rank))
        else:
            cost = (said.say("cost", impact=fmt_ratio(symptom.impact, 0)) if symptom.impact is not None else "")
            return Verdict(primary=category, rule=symptom.rule, subject=symptom.subject, phase=symptom.phase,
                           impact=symptom.run_impact,
                           headline=said.say("traced_symptom", title=symptom.title, share=fmt_ratio(share, 0),
                                             cause=_cause_words(part), cost=cost, message=symptom.message,
                                             also_on=notes.also_on(symptom), notes=notes.window()))
    top = cause or symptom or strongest(Kind.CAPTURE, 0.0)
    # The verdict never contradicts the overhead ratio the key metrics print: when no cause explains gaps that
    # large, it says where they come from.
    gaps = ("" if cause is not None else notes.unexplained_gaps()) + notes.window()
    if top is not None:
        if top.phase is not None:
            cost = (said.say("phase_cost", phase=top.phase, impact=fmt_ratio(top.impact, 0),
                             run_impact=fmt_ratio(top.run_impact, 0)) if top.impact is not None else "")
            goal = goal_of(top.phase)
            bounds = said.say("phase_bounds", goal=goal_words(goal, said)) if goal else ""
            # How the other phases fare is in the per-phase lines (Verdict.phases).
            headline = said.say("phase_primary", phase=top.phase, bounds=bounds, title=top.title, cost=cost,
                                message=top.message, also_on=notes.also_on(top), notes=gaps)
        else:
            cost = said.say("cost", impact=fmt_ratio(top.impact, 0)) if top.impact is not None else ""
            headline = said.say("primary", title=top.title, cost=cost, message=top.message,
                                also_on=notes.also_on(top), notes=gaps)
        return Verdict(primary=top.category, rule=top.rule, subject=top.subject, phase=top.phase,
                       impact=top.run_impact, headline=headline)
    # In graph trace mode the first thing to do is the node-trace capture: its finding leads the report.
    hidden = next((f for f in findings if f.rule == GRAPH_MODE_RULE), None)
    return Verdict(primary=None, rule=hidden.rule if hidden else None, subject=hidden.subject if hidden else None,
                   headline=_healthy_headline(facts, said, gaps))


def _dominant_idle_cause(symptom: Finding, idle_rules: dict[str, tuple[str, str]]
                         ) -> tuple[WindowPart, float, tuple[str, str]] | None:
    """(idle cause, its share of the idle time, (rule id, category) judging it) when one traced cause explains
    more than DOMINANT_IDLE_SHARE of the idle time of the symptom's row (gpu_utilization's idle split) and a rule
    judges it; None otherwise ('other' has no traced cause)."""
    row = symptom.row or {}
    split = {part: row.get(part.column) or 0 for part in IDLE_CAUSES}
    idle = sum(split.values())
    if idle <= 0:
        return None
    part, ns = max(split.items(), key=lambda kv: kv[1])
    if part.key not in idle_rules or ns / idle <= DOMINANT_IDLE_SHARE:
        return None
    return part, ns / idle, idle_rules[part.key]


def _busy_gpu(facts: FactSet) -> float | None:
    """The kernels' share of the judged window, over every used GPU (the union of kernels over the windows, as
    summary.gpu_utilization), when it is at least BUSY_GPU."""
    rows = facts.rows("gpu_utilization") if "gpu_utilization" in facts.results else []
    window = sum(r.get("window_ns") or 0 for r in rows)
    util = sum(r.get("compute_busy_ns") or 0 for r in rows) / window if window > 0 else None
    return util if util is not None and util >= BUSY_GPU else None


def _graph_replays(facts: FactSet, said: Headlines) -> str:
    """'; CUDA-graph replays fill 99.97 % of the window ...' when the capture traced graph replays in graph mode:
    the kernel table then holds only the eager kernels, so it cannot say where the time goes."""
    health = facts.first("capture_health") if "capture_health" in facts.results else {}
    if not health.get("graph_replays"):
        return ""
    return said.say("healthy_graphs", share=fmt_ratio(health.get("graph_replay_share"), 0))


def _heaviest_kernel(facts: FactSet, said: Headlines) -> str:
    graphs = _graph_replays(facts, said)
    if graphs:
        return graphs
    top = facts.rows("kernel_summary")[:1] if "kernel_summary" in facts.results else []
    if not top:
        return ""
    name = top[0].get("short_name") or top[0].get("name")
    return said.say("healthy_kernels", kernel=str(name), share=fmt_ratio(top[0].get("share_of_kernel_time"), 0))


def _gpu_bound_headline(notes: _Notes, busy: float, overhead: Finding) -> str:
    facts, said = notes.facts, notes.said
    cost = (said.say("gpu_bound_cost", impact=fmt_ratio(overhead.run_impact, 0))
            if overhead.run_impact is not None else "")
    named = said.say("gpu_bound_overhead", title=lower_first(overhead.title), rule=overhead.rule, cost=cost)
    return said.say("gpu_bound", utilization=fmt_ratio(busy, 0), where=_heaviest_kernel(facts, said),
                    overhead=named, limit=fmt_ratio(BUSY_GPU_OVERHEAD, 0), notes=notes.window())


def _healthy_headline(facts: FactSet, said: Headlines, notes: str) -> str:
    summary = facts.first("summary") if "summary" in facts.results else {}
    util = summary.get("gpu_utilization")
    if util is None:
        return said.say("no_gpu_work", notes=notes)
    return said.say("healthy", utilization=fmt_ratio(util, 0), min_impact=fmt_ratio(PRIMARY_MIN_IMPACT, 0),
                    where=_heaviest_kernel(facts, said), notes=notes)
