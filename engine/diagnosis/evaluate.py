"""Match fact rows against rules, then name the primary bottleneck."""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Collection, Sequence
from typing import Any

from . import templating
from ..pack.presets import capture_line
from ..facts.compute import FactSet
from ..model.report import Evidence, Finding, RuleOutcome, Verdict
from ..pack.headlines import Headlines, load_headlines
from .rules import Condition, Operand, Rule, RuleError, key_position, step_text, template_fields
from .ruleset import RuleSet
from .phase_verdict import GOAL_WORDS, goal_of, judged_alone_phases, lower_first, phase_verdicts, ranking_cost
from .stacks import detect_stack
from .startup import startup_note
from . import whatif
from .whatif import serves_llm
from ..base.vocabulary import IDLE_CAUSES, Kind, Severity, WindowPart
from ..base.text import column_label
from ..base.units import PARAM_UNITS, column_unit, fmt_param, fmt_ratio, fmt_value

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
        "==": operator.eq, "!=": operator.ne}

# A cause must cost at least this share of the profiled time to be named the primary bottleneck.
PRIMARY_MIN_IMPACT = 0.05
# The capture finding of graph-mode CUDA graphs (rules/capture/graph-mode-hides-kernels.yaml).
GRAPH_MODE_RULE = "graph-mode-hides-kernels"
# A finding that costs less than this share of GPU time is reported as info (a rule's info_below_impact overrides).
INFO_BELOW_IMPACT = 0.05
# Above this overhead ratio (launch-bound's default max_overhead_ratio) the verdict accounts for the gaps.
OVERHEAD_RATIO_NOTABLE = 0.3
# On a GPU whose kernels run at least BUSY_GPU of the judged window, an overhead costing less than BUSY_GPU_OVERHEAD
# of it is not the bottleneck: the kernels are (the verdict says so), and the overhead is a secondary finding.
BUSY_GPU = 0.9
BUSY_GPU_OVERHEAD = 0.10


class ConditionError(RuleError):
    """A condition that cannot be judged on a row's values (text ordered against a number): the rule is wrong."""


def _render(rule: Rule, field_name: str, template: str, context: dict[str, Any], not_after: float) -> str:
    """A rule template rendered in the bounded sandbox of engine/templating; any failure is a RuleError."""
    try:
        return templating.render(template, context, not_after=not_after)
    except templating.TemplateFailure as exc:
        raise template_error(rule, field_name, exc) from None


def template_error(rule: Rule, field_name: str, failure: templating.TemplateFailure, where: object | None = None,
                   sample: str = "") -> RuleError:
    """`FILE: rule "ID": its message template divides by zero; guard the division ...`"""
    return RuleError(f'{where or rule.path}: rule "{rule.id}": its {field_name} template {failure.reason}{sample}; '
                     f"{failure.advice}")


@dataclass
class Evaluation:
    findings: list[Finding] = field(default_factory=list)
    passed: list[RuleOutcome] = field(default_factory=list)
    skipped: list[RuleOutcome] = field(default_factory=list)


# The rows `rules check` renders every template with: a template that fails on all-zero, all-one or empty
# (NULL) columns fails on real data too.
_SAMPLE_ROWS: tuple[tuple[str, Any], ...] = (("every column 0", 0), ("every column 1", 1),
                                             ("every column empty (None)", None))


@dataclass(frozen=True)
class _Position:
    """FILE:LINE:COL of a rule file's key, looked up only when an error is written: finding it parses the file's
    YAML nodes again, and most templates have no error."""

    path: str | Path
    key: str

    def __str__(self) -> str:
        line, col = key_position(self.path, self.key)
        return f"{self.path}:{line}:{col}"


def check_templates(rule: Rule, columns: list[str]) -> list[RuleError]:
    """Template errors found before any profile is diagnosed, one per field, as FILE:LINE:COL errors: attributes
    the sandbox refuses, and failures rendering the sample rows with the params' defaults (division by zero,
    undefined names, limits). Failures that depend on the values' types (None + 1) are left to run time."""
    params = RuleSet.resolve({rule.id: rule}).params[rule.id]  # the defaults
    errors: list[RuleError] = []
    for key, name, source in template_fields(rule.spec):
        if templating.compile_problem(source) is not None:  # reported when the rule was loaded
            continue
        where = _Position(rule.path, key)
        forbidden = templating.forbidden_attributes(source, [*columns, *params])
        if forbidden:
            errors.append(template_error(rule, name, templating.forbidden_failure(forbidden[0]), where))
            continue
        for label, value in _SAMPLE_ROWS:
            row = dict.fromkeys(columns, value)
            impact = row.get(rule.spec.impact) if rule.spec.impact else None
            context = {"row": row, "params": params, "impact": None if impact is None else float(impact)}
            try:
                templating.render(source, context)
            except templating.TemplateFailure as exc:
                if exc.kind != "value":
                    sample = f" (with {label})" if exc.kind in ("zero-division", "overflow") else ""
                    errors.append(template_error(rule, name, exc, where, sample))
                    break
    return errors


def _resolve(operand: Operand, row: dict[str, Any], params: dict[str, float], rule: Rule, column_unit_: str | None,
             facts: FactSet | None = None):
    if operand.kind == "column":
        return row.get(operand.value)
    if operand.kind == "fact":
        name, column = operand.value
        return facts.first(name).get(column) if facts is not None and name in facts.results else None
    if operand.kind == "param":
        unit = rule.spec.params[operand.value].unit
        return params[operand.value] * PARAM_UNITS[unit][1]
    return operand.value


def _holds(cond: Condition, row: dict[str, Any], params: dict[str, float], rule: Rule,
           facts: FactSet | None = None) -> bool:
    left = _resolve(cond.left, row, params, rule, None, facts)
    right = _resolve(cond.right, row, params, rule, None, facts)
    if left is None or right is None:  # NULL: not measured, so the condition does not hold
        return False
    try:
        return bool(_OPS[cond.op](left, right))
    except TypeError:  # text ordered against a number: the rule compares the wrong column, it would never fire
        raise ConditionError(f'{rule.path}:{_condition_position(rule, cond)}: rule "{rule.id}": condition '
                        f'`{cond.source}` cannot compare {left!r} ({_type_word(left)}) with {right!r} '
                        f'({_type_word(right)}); compare a column with a value of its own type') from None


def _condition_position(rule: Rule, cond: Condition) -> str:
    """'LINE:COL' of a condition in its rule file: an item of `when`, `when_any` or a remediation step's `when`."""
    keys = [f"when.{i}" for i, c in enumerate(rule.conditions) if c is cond]
    keys += [f"when_any.{i}" for i, c in enumerate(rule.any_conditions) if c is cond]
    keys += [key for key, conditions in rule.step_conditions.items() if any(c is cond for c in conditions)]
    line, col = key_position(rule.path, keys[0] if keys else "when")
    return f"{line}:{col}"


def _type_word(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    return "text" if isinstance(value, str) else type(value).__name__


def _display_unit(column: str) -> str:
    # Ratios such as the overhead ratio (or calls per kernel) read better as 0.63 than as 63 %.
    return "plain" if column.endswith(("_ratio", "_per_kernel")) else column_unit(column)


def _compared_units(column: str, param_unit: str | None) -> tuple[str, str | None]:
    """(unit of the value, unit of the threshold) as an evidence row shows them: the same unit on both sides, so
    a 0-1 share judged against a percentage reads '37.3 %' beside '50.0 %', never '0.37' beside it. None for the
    threshold: the param's own unit (fmt_param)."""
    unit = _display_unit(column)
    if param_unit is None:
        return unit, unit
    if unit == "plain":
        return unit, unit
    percent_param = PARAM_UNITS.get(param_unit, ("number", 1.0))[0] in ("ratio", "percent")
    if unit in ("ratio", "percent"):
        return unit, unit if percent_param else None
    if percent_param:  # a column without a unit suffix judged against a share: show the value as the param does
        return PARAM_UNITS[param_unit][0], None
    return unit, None


def _evidence(rule: Rule, row: dict[str, Any], params: dict[str, float],
              column_docs: dict[str, str] | None = None) -> list[Evidence]:
    """The evidence rows of a finding: one per column its conditions read (value beside threshold), then the
    context columns of the rule's `evidence:` list. A column the rule gives no label is labelled from its
    documentation (`-- @column` line of the fact); a true/false condition reads as a word ('Straggler: yes')."""
    docs = column_docs or {}
    labels = {ev.column: ev.label for ev in rule.spec.evidence}
    items: list[Evidence] = []
    seen: set[str] = set()
    for cond in rule.conditions + [c for c in rule.any_conditions if _holds(c, row, params, rule)]:
        col = cond.left if cond.left.kind == "column" else cond.right if cond.right.kind == "column" else None
        if col is None or col.value in seen:
            continue
        seen.add(col.value)
        other = cond.right if col is cond.left else cond.left
        op = cond.op if col is cond.left else {">": "<", "<": ">", ">=": "<=", "<=": ">="}.get(cond.op, cond.op)
        value = row.get(col.value)
        label = labels.get(col.value) or column_label(col.value, docs.get(col.value))
        threshold = threshold_display = param = None
        p_unit = rule.spec.params[other.value].unit if other.kind == "param" else None
        unit, threshold_unit = _compared_units(col.value, p_unit)
        if other.kind == "param":
            param = other.value
            threshold = params[param]
            param_unit = rule.spec.params[param].unit  # p_unit, known to be set here
            threshold_display = (fmt_param(threshold, param_unit) if threshold_unit is None
                                 else fmt_value(threshold * PARAM_UNITS[param_unit][1], threshold_unit))
        elif other.kind in ("number", "bool"):
            threshold = other.value
            threshold_display = fmt_value(other.value, unit)
        if other.kind == "bool" or isinstance(value, bool):
            # The condition is a yes/no gate: the row reads 'Straggler: yes', the comparison stays in the JSON.
            threshold_display = None
        items.append(Evidence(label=label, column=col.value, value=value, display=fmt_value(value, unit), op=op,
                              threshold=threshold, threshold_display=threshold_display, param=param))
    for ev in rule.spec.evidence:
        if ev.column in seen:
            continue
        seen.add(ev.column)
        items.append(Evidence(label=ev.label, column=ev.column, value=row.get(ev.column),
                              display=fmt_value(row.get(ev.column), _display_unit(ev.column))))
    return items


def _phase_cost(rule: Rule, phase: str | None, impact: float | None, run_impact: float | None) -> list[Evidence]:
    """A phase finding's cost to its phase beside its cost to the run, as a context row of its evidence."""
    if phase is None or impact is None or run_impact is None or rule.spec.impact is None:
        return []
    return [Evidence(label=f"Cost in {phase} and in the run", column=rule.spec.impact, value=impact,
                     display=f"{fmt_ratio(impact, 0)} of {phase}'s GPU time, {fmt_ratio(run_impact, 0)} of the "
                             f"run's")]


def _saving_model(rule: Rule, row: dict[str, Any], share: float | None, phase: str | None,
                  facts: FactSet) -> whatif.Saving | None:
    """The saving model of a cause finding whose rule names a what-if transform: its replay, capped by the share
    the rule measured (whatif.saving); None for other findings and where nothing was replayed."""
    if rule.spec.what_if is None or rule.spec.kind != Kind.CAUSE or share is None:
        return None
    return whatif.saving(rule.spec.what_if, whatif.replay_row(facts, row.get("device_id"), phase), share)


def _measured_share(rule: Rule, row: dict[str, Any], model: whatif.Saving | None) -> list[Evidence]:
    """The share of time the rule measured, as a context row, when the finding states another cost (what its fix
    buys, by the replay)."""
    if model is None or model.share is None or rule.spec.impact is None or abs(model.share - model.cost) < 0.005:
        return []
    return [Evidence(label="Share of GPU time the rule measured (the most removing the cause can give)",
                     column=rule.spec.impact, value=model.share, display=fmt_ratio(model.share, 1))]


def _remediation(rule: Rule, stack: Sequence[str], context: dict[str, Any], not_after: float,
                 facts: FactSet | None = None, capture_preset: str | None = None) -> list[str]:
    """The stack's steps, then the generic ones, leaving out every step whose `when` does not hold on the
    evidence (a step that says "pin host memory" is not shown when every copy is pinned)."""
    row, params = context["row"], context["params"]

    def shown(key: str) -> bool:
        return all(_holds(c, row, params, rule, facts) for c in rule.step_conditions.get(key, ()))

    steps = [_render(rule, f"{key} remediation {i}", step_text(r), context, not_after)
             for key in stack for i, r in enumerate(rule.spec.stack_remediation.get(key, ()), 1)
             if shown(f"stack_remediation.{key}.{i - 1}")]
    capture = rule.spec.capture
    if capture is not None:
        line = capture_line(stack, capture.profile, capture.pass_switches, capture.nsys, capture_preset)
        steps = [_render(rule, "capture", line, context, not_after), *steps]
    return steps + [_render(rule, f"remediation {i}", step_text(r), context, not_after)
                    for i, r in enumerate(rule.spec.remediation, 1) if shown(f"remediation.{i - 1}")]


def _references(rule: Rule, stack: Sequence[str]) -> list[str]:
    """The stack's own references first, then the generic ones; another stack's pages never."""
    refs = [ref for key in stack for ref in rule.spec.stack_references.get(key, ())] + list(rule.spec.references)
    return list(dict.fromkeys(refs))


def evaluate(rules: RuleSet, facts: FactSet, *, stack: Sequence[str] = (), phase: str | None = None,
             phase_share: float = 1.0, judged_alone: bool = False, run_facts: FactSet | None = None,
             capture_preset: str | None = None) -> Evaluation:
    """Judge every rule of `rules` on its fact's rows, with the params, severities and disabled rules the rule set
    holds. `stack`: the profile's stack lineage (StackInfo.lineage); each finding lists those stacks' remediation
    steps first, then the rule's generic steps. `phase`: the facts are
    one inference phase's (FactSet.phases), which takes `phase_share` of the run's GPU window; its findings
    carry the phase and both costs. Their severity follows their cost to the phase (impact) when the phase has
    steps enough to be `judged_alone` (the `phases` fact), else their cost to the run (run_impact).
    `run_facts`: the whole run's facts, which remediation steps' FACT.COLUMN conditions read (default: `facts`)."""
    out = Evaluation()
    for rule_id in sorted(rules.rules):
        rule = rules.rules[rule_id]
        spec = rule.spec
        outcome = RuleOutcome(rule=rule.id, title=spec.title, category=spec.category)
        if rule.id in rules.disabled:
            outcome.reason = "disabled by configuration"
            out.skipped.append(outcome)
            continue
        result = facts.results.get(spec.fact)
        if result is None:
            outcome.reason = f"fact {spec.fact} was not computed"
            out.skipped.append(outcome)
            continue
        if result.skipped and spec.kind != Kind.CAPTURE:
            outcome.reason = result.skipped
            out.skipped.append(outcome)
            continue
        params = dict(rules.params[rule.id])
        column_docs = {c.name: c.doc for c in result.fact.columns}
        fired = False
        not_after = time.monotonic() + templating.RULE_RENDER_SECONDS
        for row in result.rows:
            if not all(_holds(c, row, params, rule) for c in rule.conditions):
                continue
            if rule.any_conditions and not any(_holds(c, row, params, rule) for c in rule.any_conditions):
                continue
            fired = True
            impact = whatif.share_of(row, spec.impact)
            model = _saving_model(rule, row, impact, phase, run_facts or facts)
            if model is not None:
                impact = model.cost  # the cost the finding states is its what-if's (one saving model)
            run_impact = None if impact is None else impact * phase_share
            cost = impact if judged_alone else run_impact
            severity = rules.severity(rule.id)
            if cost is not None and spec.kind != Kind.CAPTURE and rule.id not in rules.severities:
                # Severity follows cost: a finding that costs little GPU time is information, whatever the rule's
                # severity (a rule may set its own floor; an explicit rules.<id>.severity is kept as given).
                limit = (params[spec.info_below_impact.lstrip("$")] if isinstance(spec.info_below_impact, str)
                         else INFO_BELOW_IMPACT if spec.info_below_impact is None else float(spec.info_below_impact))
                if cost < limit:
                    severity = Severity.INFO
            context = {"row": row, "params": params, "impact": impact}
            subject = _render(rule, "label", spec.label, context, not_after) if spec.label else None
            if phase is not None:
                subject = f"{phase} · {subject}" if subject else phase
            kind = spec.kind
            assert kind is not None  # filled from the rule's category when the rule loads (rules.py)
            out.findings.append(Finding(
                rule=rule.id, title=spec.title, category=spec.category, kind=kind, severity=severity,
                subject=subject, message=_render(rule, "message", spec.message, context, not_after),
                impact=impact, phase=phase, run_impact=run_impact,
                evidence=(_evidence(rule, row, params, column_docs) + _phase_cost(rule, phase, impact, run_impact)
                          + _measured_share(rule, row, model)),
                remediation=_remediation(rule, stack, context, not_after, run_facts or facts, capture_preset),
                references=_references(rule, stack), row=row))
        if not fired:
            out.passed.append(outcome)
    sort_findings(out.findings)
    return out


def sort_findings(findings: list[Finding], alone: Collection[str] = ()) -> None:
    """Severity first, then kind (cause, capture, symptom), then the cost: to the phase for the phases judged
    `alone` (phase_verdict.judged_alone_phases), to the run for the rest."""
    findings.sort(key=lambda f: (-f.severity.rank, f.kind.rank, -ranking_cost(f, alone), f.rule, f.subject or ""))


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
            overheads: Collection[str] = ()) -> Verdict:
    """The primary bottleneck. `idle_rules` (idle_cause_rules): which rule judges each idle cause, so that a symptom
    whose idle time one traced cause mostly explains gives way to that cause. `headlines`: the headline's wording
    (load_headlines: bundled, or a team pack's). `overheads`: the categories that are overheads around the kernels
    (Category.overhead), which a GPU busy in its kernels does not take as the primary when they cost little."""
    phases = phase_verdicts(evaluation.findings, facts)
    said = headlines or load_headlines()
    return _verdict(evaluation, facts, blocking_rules, idle_rules, said, set(overheads)).model_copy(
        update={"phases": phases})


def _verdict(evaluation: Evaluation, facts: FactSet, blocking_rules: set[str],
             idle_rules: dict[str, tuple[str, str]] | None, said: Headlines, overheads: set[str]) -> Verdict:
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
        return Verdict(primary=None, headline=_gpu_bound_headline(facts, said, busy, cause))
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
                                             cause=lower_first(part.label.removeprefix('Idle: ')), cost=cost,
                                             message=symptom.message, also_on=_also_on(symptom),
                                             notes=_window_notes(facts)))
    top = cause or symptom or strongest(Kind.CAPTURE, 0.0)
    # The verdict never contradicts the overhead ratio the key metrics print: when no cause explains gaps that
    # large, it says where they come from.
    gaps = ("" if cause is not None else _unexplained_gaps(facts)) + _window_notes(facts)
    if top is not None:
        if top.phase is not None:
            cost = (said.say("phase_cost", phase=top.phase, impact=fmt_ratio(top.impact, 0),
                             run_impact=fmt_ratio(top.run_impact, 0)) if top.impact is not None else "")
            goal = goal_of(top.phase)
            bounds = said.say("phase_bounds", goal=GOAL_WORDS[goal]) if goal else ""
            # How the other phases fare is in the per-phase lines (Verdict.phases).
            headline = said.say("phase_primary", phase=top.phase, bounds=bounds, title=top.title, cost=cost,
                                message=top.message, also_on=_also_on(top), notes=gaps)
        else:
            cost = said.say("cost", impact=fmt_ratio(top.impact, 0)) if top.impact is not None else ""
            headline = said.say("primary", title=top.title, cost=cost, message=top.message, also_on=_also_on(top),
                                notes=gaps)
        return Verdict(primary=top.category, rule=top.rule, subject=top.subject, phase=top.phase,
                       impact=top.run_impact, headline=headline)
    # In graph trace mode the first thing to do is the node-trace capture: its finding leads the report.
    hidden = next((f for f in findings if f.rule == GRAPH_MODE_RULE), None)
    return Verdict(primary=None, rule=hidden.rule if hidden else None, subject=hidden.subject if hidden else None,
                   headline=_healthy_headline(facts, said, gaps))


def _window_notes(facts: FactSet) -> str:
    """What the verdict leaves out of the judged window: stretches with nothing in flight, a one-off start-up."""
    return _server_idle_note(facts) + startup_note(facts)


# A traced idle cause that takes more than this share of a mostly-idle GPU's idle time is the bottleneck, not the
# idleness it causes.
DOMINANT_IDLE_SHARE = 0.5


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


def _also_on(finding: Finding) -> str:
    """' The same on GPU 0 (≈95 %) and GPU 2 (≈41 %).' for a finding merged over several GPUs."""
    if not finding.also_on:
        return ""
    parts = [a.subject.rsplit(" · ", 1)[-1] + (f" (≈{fmt_ratio(a.impact, 0)})" if a.impact is not None else "")
             for a in finding.also_on]
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return f" The same on {listed}."


def _unexplained_gaps(facts: FactSet) -> str:
    """' The GPUs wait between kernels (overhead ratio 0.43): ...', naming the idle causes, largest first; empty
    when the overhead ratio is at most OVERHEAD_RATIO_NOTABLE."""
    summary = facts.first("summary") if "summary" in facts.results else {}
    ratio = summary.get("overhead_ratio")
    gpus = facts.rows("gpu_utilization") if "gpu_utilization" in facts.results else []
    if ratio is None or ratio <= OVERHEAD_RATIO_NOTABLE or not gpus:
        return ""
    idle = {c: sum(g.get(c.column) or 0 for g in gpus) for c in IDLE_CAUSES}
    total = sum(idle.values())
    if total <= 0:
        return ""
    parts = [f"{fmt_ratio(ns / total, 0)} {lower_first(c.label.removeprefix('Idle: '))}"
             for c, ns in sorted(idle.items(), key=lambda kv: -kv[1]) if ns / total >= 0.005]
    return (f" The GPUs still wait between kernels (overhead ratio {ratio:.2f}), but no cause rule passes its "
            f"threshold; that idle time is {', '.join(parts)}.")


def _server_idle_note(facts: FactSet) -> str:
    """' Waiting for requests 45 % of the capture (9 quiet stretches with no GPU work, no CUDA calls and no engine
    step; 9 with the issuing thread in epoll_wait); this verdict judges the 501.5 ms of active work.' when the run
    waited (fact server_idle); empty otherwise."""
    idle = facts.first("server_idle") if "server_idle" in facts.results else {}
    count = idle.get("stretch_count") or 0
    if not count:
        return ""
    stretches = "one quiet stretch" if count == 1 else f"{count:,} quiet stretches"
    how = []
    if idle.get("os_wait_count"):
        how.append(f"{idle['os_wait_count']:,} with the issuing thread in {idle.get('wait_calls')}")
    if idle.get("off_cpu_count"):
        how.append(f"{idle['off_cpu_count']:,} with the issuing thread off the CPU")
    recognised = "".join(f"; {h}" for h in how)
    # Only a run that serves an LLM waits for requests; any other program with nothing in flight works on the host
    # or waits for something the trace cannot name.
    what = "Waiting for requests" if serves_llm(detect_stack(facts).name, facts, None) else "Nothing in flight for"
    return (f" {what} {fmt_ratio(idle.get('idle_fraction'), 0)} of the capture ({stretches} with no GPU "
            f"work, no CUDA calls and no engine step{recognised}); this verdict judges the "
            f"{fmt_value(idle.get('active_ns'), 'ns')} of active work.")


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


def _gpu_bound_headline(facts: FactSet, said: Headlines, busy: float, overhead: Finding) -> str:
    cost = f" ≈{fmt_ratio(overhead.run_impact, 0)}" if overhead.run_impact is not None else ""
    return said.say("gpu_bound", utilization=fmt_ratio(busy, 0), where=_heaviest_kernel(facts, said),
                    overhead=f"{lower_first(overhead.title)} ({overhead.rule}{cost})",
                    limit=fmt_ratio(BUSY_GPU_OVERHEAD, 0), notes=_window_notes(facts))


def _healthy_headline(facts: FactSet, said: Headlines, notes: str) -> str:
    summary = facts.first("summary") if "summary" in facts.results else {}
    util = summary.get("gpu_utilization")
    if util is None:
        return said.say("no_gpu_work", notes=notes)
    return said.say("healthy", utilization=fmt_ratio(util, 0), min_impact=fmt_ratio(PRIMARY_MIN_IMPACT, 0),
                    where=_heaviest_kernel(facts, said), notes=notes)
