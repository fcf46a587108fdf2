"""The rule set in force: the loaded rules with the settings of diagnose.yaml and --set resolved once
(docs/configuration.md): each rule's effective params, the severities set, the disabled rules.

The api builds one per diagnosis (a multi-rank run one more for its cross-rank rules) and passes it down: the
evaluation, the per-phase judging and the key metrics' thresholds read it, and none of them resolves a setting
again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from .config import Config
from .rules import Rule
from ..units import PARAM_UNITS
from ..vocabulary import Severity

_COMPARISONS = (">", ">=", "<", "<=")
_FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">="}


@dataclass(frozen=True)
class ParamThreshold:
    """A rule param in force, as a key metric is judged against it."""

    value: float  # in the unit of the fact column the rule compares (the param's value times its unit's factor)
    op: str | None  # the comparison the rule fires on, column on the left; None when no condition reads the param
    param: str  # RULE.PARAM


@dataclass(frozen=True)
class RuleSet:
    rules: Mapping[str, Rule]
    params: Mapping[str, Mapping[str, float]]
    """Every rule's params: its defaults with the configured values applied (unknown names are left out)."""
    severities: Mapping[str, Severity] = field(default_factory=dict)
    """Severities the configuration sets; such a finding keeps its severity whatever its cost."""
    disabled: frozenset[str] = frozenset()

    @classmethod
    def resolve(cls, rules: Mapping[str, Rule], params: Mapping[str, Mapping[str, float]] | None = None,
                severities: Mapping[str, str] | None = None, disabled: Collection[str] = ()) -> RuleSet:
        """`rules` with `params` ({rule: {param: value}}), `severities` and `disabled` in force; settings of rules
        that are not in `rules` are ignored."""
        params = params or {}
        resolved = {}
        for rule_id, rule in rules.items():
            values = {name: spec.default for name, spec in rule.spec.params.items()}
            values.update({k: v for k, v in params.get(rule_id, {}).items() if k in values})
            resolved[rule_id] = values
        return cls(rules=dict(rules), params=resolved,
                   severities={r: Severity(s) for r, s in (severities or {}).items() if r in rules},
                   disabled=frozenset(r for r in disabled if r in rules))

    @classmethod
    def from_config(cls, rules: Mapping[str, Rule], config: Config) -> RuleSet:
        return cls.resolve(rules, {r: config.params_for(r) for r in config.rule_params},
                           {r: s.value for r, s in config.severities.items()}, config.disabled)

    def only(self, rule_ids: Iterable[str]) -> RuleSet:
        """The same settings over a subset of the rules."""
        keep = set(rule_ids) & set(self.rules)
        return RuleSet(rules={r: self.rules[r] for r in self.rules if r in keep},
                       params={r: self.params[r] for r in keep},
                       severities={r: s for r, s in self.severities.items() if r in keep},
                       disabled=self.disabled & keep)

    def severity(self, rule_id: str) -> Severity:
        return self.severities.get(rule_id, self.rules[rule_id].spec.severity)

    def threshold(self, target: str) -> ParamThreshold | None:
        """The param `target` (RULE.PARAM) in force in the unit of the column it is compared with; None when the
        rule is not loaded, is disabled (it judges nothing) or has no such param."""
        rule_id, _, param = target.rpartition(".")
        rule = self.rules.get(rule_id)
        if rule is None or rule_id in self.disabled or param not in rule.spec.params:
            return None
        factor = PARAM_UNITS[rule.spec.params[param].unit][1]
        return ParamThreshold(self.params[rule_id][param] * factor, _fires_on(rule, param), target)


def _fires_on(rule: Rule, param: str) -> str | None:
    """The comparison of the first condition that reads `param`, written with the column on the left."""
    for cond in rule.conditions + rule.any_conditions:
        if cond.right.kind == "param" and cond.right.value == param and cond.op in _COMPARISONS:
            return cond.op
        if cond.left.kind == "param" and cond.left.value == param and cond.op in _COMPARISONS:
            return _FLIP[cond.op]
    return None
