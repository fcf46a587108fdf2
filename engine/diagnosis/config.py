"""What a user may tune: rule params, severities, disabled rules, extra rule dirs, fact params, phases, start-up
patterns.

Precedence: command line (--set) > config file (diagnose.yaml) > rule defaults.
"""

from __future__ import annotations

import math
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ..base.errors import DiagnoseError
from ..base.regexes import regex_problem, scratch_cursor
from ..base.vocabulary import Severity
from ..pack.yamlfile import error_position, safe_load


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
    startup_patterns: dict[str, str] | None = None
    """NVTX start-up patterns by kind (load, warmup); None: the defaults (engine/facts/compute.py)."""
    step_patterns: dict[str, str] | None = None
    """NVTX step patterns by name (any names); None: the defaults (engine/facts/compute.py)."""

    def params_for(self, rule_id: str) -> dict[str, float]:
        return {k: s.value for k, s in self.rule_params.get(rule_id, {}).items()}


# What each top-level key of diagnose.yaml looks like, quoted in the error when one has the wrong shape.
_EXAMPLES = {
    "rules": "rules: {launch-bound: {max_overhead_ratio: 0.25, severity: error}}",
    "facts": "facts: {gap_threshold_ns: 5000}",
    "phases": 'phases: {decode: "(?i)(^|[^a-z])decode([^a-z]|$)"}',
    "startup": 'startup: {load: "(?i)^init_model$", warmup: "(?i)^warmup$"}',
    "steps": 'steps: {engine: "(?i)^engine_step$"}',
    "rule_dirs": "rule_dirs: [ci/nsys-rules]",
}


def _number(text: Any, where: str, hint: str = "") -> float:
    """A finite number: NaN compares false with everything, so a NaN threshold would silently never fire."""
    if isinstance(text, bool):
        raise ConfigError(f"{where}: expected a number, got {text!r}")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {text!r}{'; ' + hint if hint else ''}")
    return value


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
        if value not in Severity.names():
            raise ConfigError(f"{where}: severity must be {Severity.described()}")
        config.severities[rule_id] = Setting(value, "command line")
    elif key == "enabled":
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{where}: enabled must be true or false")
        if value.lower() == "false":
            config.disabled[rule_id] = Setting(True, "command line")
        else:
            config.disabled.pop(rule_id, None)
    else:
        config.rule_params.setdefault(rule_id, {})[key] = Setting(
            _number(value, where, f"to turn the rule off, write {rule_id}.enabled=false"), "command line")


def _read_text(path: Path) -> str:
    """The file's text; never opens a FIFO or device (reading one would block or never end)."""
    where = str(path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read config ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{where} is a directory; give --config the path of a YAML file such as diagnose.yaml")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{where} is not a regular file; give --config the path of a YAML file such as "
                          f"diagnose.yaml")
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read config ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte {exc.start + 1} is {exc.object[exc.start]:#04x}); save "
                          f"the configuration as UTF-8") from None


def _parse_yaml(path: Path) -> dict[str, Any]:
    where = str(path)
    try:
        data = safe_load(_read_text(path))
    except yaml.YAMLError as exc:
        at = error_position(exc)
        pos = f":{at[0]}:{at[1]}" if at else ""
        raise ConfigError(f"{where}{pos}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the config must be a mapping of rules, facts, phases and rule_dirs, not "
                          f"{_kind(data)}; write e.g. `{_EXAMPLES['rules']}`")
    allowed = {"rules", "facts", "rule_dirs", "phases", "startup", "steps"}
    unknown = sorted((str(k) for k in set(data) - allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(sorted(allowed))}")
    return data


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"the text {value!r}" if isinstance(value, str) else f"the value {value!r}"


def _mapping(value: Any, where: str, key: str, example: str) -> dict[str, Any]:
    """`value` as a mapping with string keys (None: empty), or one sentence naming `key` and an example."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key} must be a mapping, not {_kind(value)}; write e.g. `{example}`")
    for name in value:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: {key} has the key {name!r}, which is not a name; write e.g. `{example}`")
    return value


def _load_rules(config: Config, rules: Any, where: str) -> None:
    for rule_id, body in _mapping(rules, where, "rules", _EXAMPLES["rules"]).items():
        example = f"rules: {{{rule_id}: {{PARAM: NUMBER, severity: warning, enabled: true}}}}"
        for key, value in _mapping(body, where, f"rules.{rule_id}", example).items():
            at = f"{where}: rules.{rule_id}.{key}"
            if key == "severity":
                if value not in Severity.names():
                    raise ConfigError(f"{where}: rules.{rule_id}.severity must be {Severity.described()}")
                config.severities[rule_id] = Setting(value, where)
            elif key == "enabled":
                if not isinstance(value, bool):
                    raise ConfigError(f"{at} must be true or false, got {value!r}")
                if value is False:
                    config.disabled[rule_id] = Setting(True, where)
            else:
                hint = f"to turn the rule off, write `enabled: false` under rules.{rule_id}"
                config.rule_params.setdefault(rule_id, {})[key] = Setting(_number(value, at, hint), where)


def _load_rule_dirs(config: Config, dirs: Any, path: Path) -> None:
    where = str(path)
    if dirs is None:
        return
    if not isinstance(dirs, list):
        raise ConfigError(f"{where}: rule_dirs must be a list of directories, not {_kind(dirs)}; write e.g. "
                          f"`{_EXAMPLES['rule_dirs']}`")
    for d in dirs:
        if not isinstance(d, str) or not d:
            raise ConfigError(f"{where}: rule_dirs holds {d!r}, which is not a directory path; write e.g. "
                              f"`{_EXAMPLES['rule_dirs']}`")
        config.rule_dirs.append((path.parent / d).resolve())


def _load_phases(phases: Any, where: str, key: str = "phases") -> dict[str, str] | None:
    """NVTX phase patterns (or, with key `startup`, start-up patterns; with key `steps`, step patterns), each
    checked by DuckDB, whose RE2 dialect differs from Python's `re`."""
    if phases is None:
        return None  # `phases:` left empty keeps the default patterns, as the key left out does
    example = _EXAMPLES[key]
    if isinstance(phases, dict) and not phases:
        what = {"phases": "phase detection", "startup": "start-up detection by NVTX name",
                "steps": "step detection by NVTX name"}[key]
        raise ConfigError(f"{where}: {key} is empty, and {what} cannot be turned off; list at least one "
                          f"pattern, e.g. `{example}`, or remove the key to use the default patterns")
    patterns = _mapping(phases, where, key, example)
    if key == "startup":
        unknown = sorted(set(patterns) - {"load", "warmup"})
        if unknown:
            raise ConfigError(f"{where}: startup.{unknown[0]}: the start-up kinds are load and warmup; write e.g. "
                              f"`{example}`")
    with scratch_cursor() as con:  # in memory: only compiles each pattern
        for name, pattern in patterns.items():
            if not isinstance(pattern, str):
                raise ConfigError(f"{where}: {key}.{name} must be a regular expression in quotes, not "
                                  f"{pattern!r}; write e.g. `{example}`")
            problem = regex_problem(con, pattern)
            if problem:
                raise ConfigError(f"{where}: {key}.{name}: {pattern!r} is not a regular expression DuckDB accepts "
                                  f"({problem}); patterns are RE2 syntax (no look-behind or back-references), "
                                  f'e.g. "(?i)(^|[^a-z])decode([^a-z]|$)"')
    return dict(patterns)


def load_config_file(path: Path) -> Config:
    where = str(path)
    data = _parse_yaml(path)
    config = Config()
    _load_rules(config, data.get("rules"), where)
    for key, value in _mapping(data.get("facts"), where, "facts", _EXAMPLES["facts"]).items():
        config.fact_params[key] = Setting(_number(value, f"{where}: facts.{key}"), where)
    _load_rule_dirs(config, data.get("rule_dirs"), path)
    config.phase_patterns = _load_phases(data.get("phases"), where)
    config.startup_patterns = _load_phases(data.get("startup"), where, "startup")
    config.step_patterns = _load_phases(data.get("steps"), where, "steps")
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
