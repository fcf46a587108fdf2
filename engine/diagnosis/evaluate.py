"""Match fact rows against rules: each rule that holds on a row becomes a finding (its message, evidence, cost
and remediation). Which finding is the bottleneck, and how the verdict says it, is engine/diagnosis/verdict.py."""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Collection, Sequence
from typing import Any

from . import templating
from .template_limits import RULE_RENDER_SECONDS
from ..pack.presets import capture_line
from ..pack.headlines import Headlines, load_headlines
from ..facts.compute import FactSet
from ..model.findings import Evidence, Finding, RuleOutcome
from .rule_conditions import Condition, Operand
from .rule_spec import Rule, RuleError, step_text, template_fields
from .rules import key_position
from .ruleset import RuleSet
from .phase_verdict import ranking_cost
from . import whatif
from ..base.vocabulary import Kind, Severity
from ..base.text import column_label
from ..base.units import PARAM_UNITS, column_unit, fmt_param, fmt_ratio, fmt_value

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
        "==": operator.eq, "!=": operator.ne}

# A finding that costs less than this share of GPU time is reported as info (a rule's info_below_impact overrides).
INFO_BELOW_IMPACT = 0.05


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


def _phase_cost(rule: Rule, phase: str | None, impact: float | None, run_impact: float | None,
                said: Headlines) -> list[Evidence]:
    """A phase finding's cost to its phase beside its cost to the run, as a context row of its evidence (worded by
    `said`: evidence_phase_cost, evidence_phase_cost_value)."""
    if phase is None or impact is None or run_impact is None or rule.spec.impact is None:
        return []
    return [Evidence(label=said.say("evidence_phase_cost", phase=phase), column=rule.spec.impact, value=impact,
                     display=said.say("evidence_phase_cost_value", phase=phase, impact=fmt_ratio(impact, 0),
                                      run_impact=fmt_ratio(run_impact, 0)))]


def _saving_model(rule: Rule, row: dict[str, Any], share: float | None, phase: str | None,
                  facts: FactSet) -> whatif.Saving | None:
    """The saving model of a cause finding whose rule names a what-if transform: its replay, capped by the share
    the rule measured (whatif.saving); None for other findings and where nothing was replayed."""
    if rule.spec.what_if is None or rule.spec.kind != Kind.CAUSE or share is None:
        return None
    return whatif.saving(rule.spec.what_if, whatif.replay_row(facts, row.get("device_id"), phase), share)


def _sampled_cost(rule: Rule, phase: str | None, model: whatif.Saving | None) -> list[Evidence]:
    """The 95 % interval of the finding's cost, as a context row, when the cost is a replay's saving over a sample
    of the steps (whatif.Saving.cost_interval): the report then says its cost is an estimate, and how close."""
    if model is None or model.cost_interval is None or rule.spec.impact is None:
        return []
    low, high = model.cost_interval
    of = f"{phase}'s GPU time" if phase else "GPU time"
    return [Evidence(label="Cost's 95 % interval (its replay ran on a sample of the steps)",
                     column=rule.spec.impact, value=model.cost,
                     display=f"{fmt_ratio(low, 1).removesuffix(' %')} to {fmt_ratio(high, 1)} of {of}")]


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
             capture_preset: str | None = None, said: Headlines | None = None) -> Evaluation:
    """Judge every rule of `rules` on its fact's rows, with the params, severities and disabled rules the rule set
    holds. `stack`: the profile's stack lineage (StackInfo.lineage); each finding lists those stacks' remediation
    steps first, then the rule's generic steps. `phase`: the facts are
    one inference phase's (FactSet.phases), which takes `phase_share` of the run's GPU window; its findings
    carry the phase and both costs. Their severity follows their cost to the phase (impact) when the phase has
    steps enough to be `judged_alone` (the `phases` fact), else their cost to the run (run_impact).
    `run_facts`: the whole run's facts, which remediation steps' FACT.COLUMN conditions read (default: `facts`).
    `said`: the wording of the evidence rows the engine adds (headlines.yaml; default: the bundled one)."""
    said = said or load_headlines()
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
        not_after = time.monotonic() + RULE_RENDER_SECONDS
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
                evidence=(_evidence(rule, row, params, column_docs) + _phase_cost(rule, phase, impact, run_impact, said)
                          + _measured_share(rule, row, model) + _sampled_cost(rule, phase, model)),
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
