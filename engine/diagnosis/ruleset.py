"""The rule set in force: the loaded rules with the settings of diagnose.yaml and --set resolved once
(docs/configuration.md): each rule's effective params, the severities set, the disabled rules.

The api builds one per diagnosis (a multi-rank run one more for its cross-rank rules) and passes it down: the
evaluation, the per-phase judging and the key metrics' thresholds read it, and none of them resolves a setting
again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from .config import Config, ConfigError, Setting
from .rule_spec import Rule
from ..facts.catalog import Fact, fact_param_range
from ..model.settings import ParamOverride
from ..base.text import did_you_mean
from ..base.units import PARAM_UNITS, describe_range, fmt_limit
from ..base.vocabulary import Severity

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
    overrides: tuple[ParamOverride, ...] = ()
    """Every non-default setting in force (rule params, severities, disabled rules, then fact params), as the
    report lists them."""

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
    def from_config(cls, rules: Mapping[str, Rule], config: Config,
                    facts: Mapping[str, Fact] | None = None) -> RuleSet:
        """`rules` with the settings of `config` in force. A setting of a rule that is not in `rules`, a param the
        rule (or, for `facts.NAME`, none of `facts`) lacks, or a value outside its range is refused with one
        sentence (a ConfigError), so no setting is ever silently dropped."""
        facts = facts or {}
        _validate(config, rules, facts)
        ruleset = cls.resolve(rules, {r: config.params_for(r) for r in config.rule_params},
                              {r: s.value for r, s in config.severities.items()}, config.disabled)
        return RuleSet(rules=ruleset.rules, params=ruleset.params, severities=ruleset.severities,
                       disabled=ruleset.disabled, overrides=tuple(_overrides(config, rules, facts)))

    def only(self, rule_ids: Iterable[str], *, fact_settings: bool = True) -> RuleSet:
        """The same settings over a subset of the rules; `fact_settings`: keep the `facts.NAME` overrides."""
        keep = set(rule_ids) & set(self.rules)
        return RuleSet(rules={r: self.rules[r] for r in self.rules if r in keep},
                       params={r: self.params[r] for r in keep},
                       severities={r: s for r, s in self.severities.items() if r in keep},
                       disabled=self.disabled & keep,
                       overrides=tuple(o for o in self.overrides if _owner(o) in keep
                                       or (fact_settings and o.target.startswith("facts."))))

    def explained(self, rule_id: str) -> dict[str, tuple[float, ParamOverride | None]]:
        """Each param of `rule_id`: (the value in force, the override that set it or None for the default)."""
        set_by = {o.target: o for o in self.overrides}
        return {name: (value, set_by.get(f"{rule_id}.{name}")) for name, value in self.params[rule_id].items()}

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


def _owner(override: ParamOverride) -> str:
    return override.target.rpartition(".")[0]


def _settings_of(config: Config) -> list[tuple[str, str, Setting, str]]:
    """(rule id, key, setting, the value as written) of every rule setting: params, severities, disabled rules."""
    return ([(rule_id, name, setting, fmt_limit(setting.value))
             for rule_id, params in config.rule_params.items() for name, setting in params.items()]
            + [(rule_id, "severity", setting, str(setting.value)) for rule_id, setting in config.severities.items()]
            + [(rule_id, "enabled", setting, "false") for rule_id, setting in config.disabled.items()])


def _place(setting: Setting, rule_id: str, key: str, written: str) -> str:
    """Where a rule setting was made: `--set RULE.KEY=VALUE` or `diagnose.yaml: rules.RULE.KEY`."""
    if setting.origin == "command line":
        return f"--set {rule_id}.{key}={written}"
    return f"{setting.origin}: rules.{rule_id}.{key}"


def _validate(config: Config, rules: Mapping[str, Rule], facts: Mapping[str, Fact]) -> None:
    ids = sorted(rules)
    for rule_id, key, setting, written in _settings_of(config):
        if rule_id not in rules:
            hint = did_you_mean(rule_id, ids) or "; `diagnose rules list` lists the rules"
            raise ConfigError(f"{_place(setting, rule_id, key, written)}: unknown rule {rule_id!r}{hint}")
    for rule_id, params in config.rule_params.items():
        known = list(rules[rule_id].spec.params)
        for name, setting in params.items():
            if name not in known:
                hint = did_you_mean(name, known) or (f"; its params are {', '.join(known)}" if known else
                                                 "; it has no params")
                raise ConfigError(f"{_place(setting, rule_id, name, fmt_limit(setting.value))}: rule {rule_id!r} "
                                  f"has no param {name!r}{hint}")
    fact_params = sorted({p for f in facts.values() for p in f.params})
    for name in config.fact_params:
        if name not in fact_params:
            raise ConfigError(f"no fact has a param {name!r}{did_you_mean(name, fact_params)}; "
                              f"fact params are {', '.join(fact_params)}")
    _check_ranges(config, rules, facts)


def _setting_place(setting: Setting, target: str, yaml_key: str) -> str:
    """Where a setting was made: `--set TARGET=VALUE` or `diagnose.yaml: rules.RULE.PARAM`."""
    if setting.origin == "command line":
        return f"--set {target}={fmt_limit(setting.value)}"
    return f"{setting.origin}: {yaml_key}"


def _check_ranges(config: Config, rules: Mapping[str, Rule], facts: Mapping[str, Fact]) -> None:
    """A value outside the range its rule (ParamSpec min/max, else its unit's) or fact (@param ... range) declares
    is refused: a negative ratio or count is a typo that would silently turn the rule on or off everywhere."""
    for rule_id, params in config.rule_params.items():
        for name, setting in params.items():
            spec = rules[rule_id].spec.params[name]
            if not spec.in_range(setting.value):
                target = f"{rule_id}.{name}"
                raise ConfigError(f"{_setting_place(setting, target, f'rules.{rule_id}.{name}')}: {target} must be "
                                  f"{spec.range_text} (unit: {spec.unit}), not {fmt_limit(setting.value)}; "
                                  f"`diagnose rules explain {rule_id}` describes it")
    for name, setting in config.fact_params.items():
        lo, hi = fact_param_range(dict(facts), name)
        if not lo <= setting.value <= hi:
            raise ConfigError(f"{_setting_place(setting, f'facts.{name}', f'facts.{name}')}: facts.{name} must be "
                              f"{describe_range(lo, hi)}, not {fmt_limit(setting.value)}")


def _overrides(config: Config, rules: Mapping[str, Rule], facts: Mapping[str, Fact]) -> list[ParamOverride]:
    out: list[ParamOverride] = []
    for rule_id, params in sorted(config.rule_params.items()):
        for name, setting in sorted(params.items()):
            out.append(ParamOverride(target=f"{rule_id}.{name}", value=setting.value,
                                     default=rules[rule_id].spec.params[name].default, origin=setting.origin))
    for rule_id, setting in sorted(config.severities.items()):
        out.append(ParamOverride(target=f"{rule_id}.severity", value=setting.value,
                                 default=rules[rule_id].spec.severity, origin=setting.origin))
    for rule_id, setting in sorted(config.disabled.items()):
        out.append(ParamOverride(target=f"{rule_id}.enabled", value=False, default=True, origin=setting.origin))
    defaults = {p: v for f in facts.values() for p, v in f.params.items()}
    for name, setting in sorted(config.fact_params.items()):
        out.append(ParamOverride(target=f"facts.{name}", value=setting.value, default=defaults[name],
                                 origin=setting.origin))
    return out
