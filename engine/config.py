"""What a user may tune: rule params, severities, disabled rules, extra rule dirs, fact params, phases.

Precedence: command line (--set) > config file (diagnose.yaml) > rule defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import DiagnoseError


class ConfigError(DiagnoseError):
    pass


@dataclass
class Setting:
    value: Any
    origin: str


@dataclass
class Config:
    rule_params: dict[str, dict[str, Setting]] = field(default_factory=dict)
    severities: dict[str, Setting] = field(default_factory=dict)
    disabled: dict[str, Setting] = field(default_factory=dict)
    fact_params: dict[str, Setting] = field(default_factory=dict)
    rule_dirs: list[Path] = field(default_factory=list)
    phase_patterns: dict[str, str] | None = None

    def params_for(self, rule_id: str) -> dict[str, float]:
        return {k: s.value for k, s in self.rule_params.get(rule_id, {}).items()}


def _number(text: Any, where: str) -> float:
    if isinstance(text, bool):
        raise ConfigError(f"{where}: expected a number, got {text!r}")
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a number, got {text!r}") from None


def apply_set(config: Config, assignment: str) -> None:
    """Apply one `--set TARGET.KEY=VALUE` (e.g. launch-bound.max_overhead_ratio=0.2)."""
    where = f"--set {assignment}"
    target, eq, value = assignment.partition("=")
    rule_id, dot, key = target.rpartition(".")
    if not eq or not dot or not rule_id or not key:
        raise ConfigError(f"{where}: write RULE.PARAM=VALUE, e.g. launch-bound.max_overhead_ratio=0.2")
    value = value.strip()
    if rule_id == "facts":
        config.fact_params[key] = Setting(_number(value, where), "command line")
    elif key == "severity":
        if value not in ("info", "warning", "error"):
            raise ConfigError(f"{where}: severity must be info, warning or error")
        config.severities[rule_id] = Setting(value, "command line")
    elif key == "enabled":
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{where}: enabled must be true or false")
        if value.lower() == "false":
            config.disabled[rule_id] = Setting(True, "command line")
        else:
            config.disabled.pop(rule_id, None)
    else:
        config.rule_params.setdefault(rule_id, {})[key] = Setting(_number(value, where), "command line")


def load_config_file(path: Path) -> Config:
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read config ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        pos = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}{pos}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the config must be a mapping")
    allowed = {"rules", "facts", "rule_dirs", "phases"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(sorted(allowed))}")
    config = Config()
    for rule_id, body in (data.get("rules") or {}).items():
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: rules.{rule_id} must be a mapping of params, severity, enabled")
        for key, value in body.items():
            if key == "severity":
                if value not in ("info", "warning", "error"):
                    raise ConfigError(f"{where}: rules.{rule_id}.severity must be info, warning or error")
                config.severities[rule_id] = Setting(value, where)
            elif key == "enabled":
                if value is False:
                    config.disabled[rule_id] = Setting(True, where)
            else:
                config.rule_params.setdefault(rule_id, {})[key] = Setting(
                    _number(value, f"{where}: rules.{rule_id}.{key}"), where)
    for key, value in (data.get("facts") or {}).items():
        config.fact_params[key] = Setting(_number(value, f"{where}: facts.{key}"), where)
    for d in data.get("rule_dirs") or []:
        config.rule_dirs.append((path.parent / d).resolve())
    phases = data.get("phases")
    if phases is not None:
        if not isinstance(phases, dict) or not all(isinstance(v, str) for v in phases.values()):
            raise ConfigError(f"{where}: phases must map a phase name to a regular expression")
        config.phase_patterns = dict(phases)
    return config


def resolve_config(path: Path | None, rule_dirs: list[Path], assignments: list[str]) -> Config:
    """The configuration in force: the file (given, or ./diagnose.yaml when present), then the command line."""
    if path is None and Path("diagnose.yaml").is_file():
        path = Path("diagnose.yaml")
    config = load_config_file(path) if path else Config()
    config.rule_dirs += [d.resolve() for d in rule_dirs]
    for d in config.rule_dirs:
        if not d.is_dir():
            raise ConfigError(f"rule directory {d} does not exist")
    for assignment in assignments:
        apply_set(config, assignment)
    return config


def split_config(config: Config, rule_ids: set[str]) -> tuple[Config, Config]:
    """(the settings of every rule not in `rule_ids`, plus facts, phases and rule dirs; the settings of the
    rules in `rule_ids`). One configuration serves both a multi-rank run's cross-rank rules and the
    diagnosis of each rank (and a single profile ignores the cross-rank part)."""
    def part(mapping: dict, inside: bool) -> dict:
        return {rule: v for rule, v in mapping.items() if (rule in rule_ids) == inside}

    rest = replace(config, rule_params=part(config.rule_params, False), severities=part(config.severities, False),
                   disabled=part(config.disabled, False))
    mine = Config(rule_params=part(config.rule_params, True), severities=part(config.severities, True),
                  disabled=part(config.disabled, True), rule_dirs=list(config.rule_dirs))
    return rest, mine
