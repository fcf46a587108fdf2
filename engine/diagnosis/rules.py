"""Rules are YAML data: load the rule files of the bundled pack and of team rule directories, each checked
against the facts (engine/diagnosis/rule_checks.py) into a Rule (engine/diagnosis/rule_spec.py), its conditions
parsed, never evaluated (engine/diagnosis/rule_conditions.py)."""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import yaml

from ..base.text import did_you_mean
from ..facts.catalog import Fact
from ..pack.yamlfile import SAFE_LOADER, error_position, error_problem, safe_compose
from ..pack.layout import bundled_pack, is_rule_file, vocabulary_file
from ..pack.opclasses import CLASSES_FILE
from ..pack.headlines import HEADLINES_FILE
from ..pack.categories import CATEGORY_FILE, Category, CategoryError, load_categories
from ..pack.stacks import StackError, load_stacks
from .rule_checks import check_spec, template_errors, validate_spec
from .rule_spec import Rule, RuleError


def _key_lines(text: str) -> dict[str, tuple[int, int]]:
    """Top-level keys and list items of `when` -> (line, col), 1-based, for error messages."""
    out: dict[str, tuple[int, int]] = {}
    try:
        node = safe_compose(text)
    except yaml.YAMLError:
        return out
    if not isinstance(node, yaml.MappingNode):
        return out
    for key, value in node.value:
        out[key.value] = (key.start_mark.line + 1, key.start_mark.column + 1)
        if key.value in ("when", "when_any", "remediation") and isinstance(value, yaml.SequenceNode):
            for i, item in enumerate(value.value):
                out[f"{key.value}.{i}"] = (item.start_mark.line + 1, item.start_mark.column + 1)
        if key.value == "stack_remediation" and isinstance(value, yaml.MappingNode):
            for stack, steps in value.value:
                out[f"{key.value}.{stack.value}"] = (stack.start_mark.line + 1, stack.start_mark.column + 1)
                if isinstance(steps, yaml.SequenceNode):
                    for i, item in enumerate(steps.value):
                        out[f"{key.value}.{stack.value}.{i}"] = (item.start_mark.line + 1, item.start_mark.column + 1)
        if isinstance(value, yaml.MappingNode):  # e.g. capture.pass
            for sub, _ in value.value:
                out[f"{key.value}.{sub.value}"] = (sub.start_mark.line + 1, sub.start_mark.column + 1)
        if key.value in ("params", "evidence") and isinstance(value, (yaml.MappingNode, yaml.SequenceNode)):
            items = value.value
            for i, item in enumerate(items):
                if isinstance(item, tuple):
                    out[f"{key.value}.{item[0].value}"] = (item[0].start_mark.line + 1, item[0].start_mark.column + 1)
                else:
                    out[f"{key.value}.{i}"] = (item.start_mark.line + 1, item.start_mark.column + 1)
    return out


def load_rule_file(path: Path, facts: dict[str, Fact], source: str = "bundled",
                   categories: dict[str, Category] | None = None, stack_keys: Collection[str] | None = None) -> Rule:
    """One rule file, checked against the facts, the categories and the stack keys (default: the bundled ones and,
    for a team file, the categories.yaml and vocabulary/stacks.yaml of its directory or above). A broken file
    raises one RuleError listing every independent problem (a YAML syntax error alone stops the reading)."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleError(f"{where}:1:1: cannot read rule file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise RuleError(f"{where}:1:1: not UTF-8 text (byte {exc.start} is 0x{exc.object[exc.start]:02x}); save "
                        f"the rule file as UTF-8") from None
    try:
        data = _parsed_yaml(text)
    except yaml.YAMLError as exc:
        line, col = error_position(exc) or (1, 1)
        raise RuleError(f"{where}:{line}:{col}: invalid YAML: {error_problem(exc)}") from None
    rule_id = data.get("id") if isinstance(data, dict) and isinstance(data.get("id"), str) else None
    key_lines: dict[str, tuple[int, int]] = {}

    def lines() -> dict[str, tuple[int, int]]:  # composed again only when a message needs a position
        if not key_lines:
            key_lines.update(_key_lines(text) or {"": (1, 1)})
        return key_lines

    def err(key: str, message: str) -> RuleError:
        line, col = lines().get(key, lines().get(key.split(".")[0], (1, 1)))
        prefix = f'rule "{rule_id}": ' if rule_id else ""
        return RuleError(f"{where}:{line}:{col}: {prefix}{message}")

    if not isinstance(data, dict):
        raise err("", "a rule file must be a YAML mapping with id, title, fact, when, message ...")
    problems: list[RuleError] = []
    spec, bad = validate_spec(data, err, problems)
    rule = None
    if spec is not None:
        rule = check_spec(spec, bad, path, source, facts, categories, err, problems, stack_keys)
    problems += template_errors(data, err)
    if problems:
        messages = sorted(dict.fromkeys(str(p) for p in problems), key=problem_position)
        raise RuleError(*messages, rule=rule if not bad else None)
    assert rule is not None
    return rule


@functools.lru_cache(maxsize=1024)
def _parse_yaml_once(text: str) -> Any:
    return yaml.load(text, Loader=SAFE_LOADER)


def _parsed_yaml(text: str) -> Any:
    """The YAML document of a rule file's text, parsed once per process (every diagnosis loads every rule file, and
    parsing is most of that cost); a copy, so nothing a caller does reaches the next one."""
    return copy.deepcopy(_parse_yaml_once(text))


def problem_position(message: str) -> tuple[int, int]:
    """(line, col) of a `FILE:LINE:COL: ...` message, to list a file's problems top to bottom."""
    match = re.match(r"^.*?:(\d+):(\d+): ", message)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def key_position(path: str | Path, key: str) -> tuple[int, int]:
    """(line, col) of a key ("message") or list item ("remediation.1") of a rule file; (1, 1) when unknown."""
    try:
        lines = _key_lines(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return (1, 1)
    return lines.get(key, lines.get(key.split(".")[0], (1, 1)))


def bundled_rules_dir() -> Path:
    return bundled_pack()


def rule_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.yaml") if is_rule_file(p, directory)
                  and not (p.parent == directory and p.name in (CATEGORY_FILE, CLASSES_FILE, HEADLINES_FILE)))


def rule_categories(extra_dirs: list[Path] | None = None) -> dict[str, Category]:
    """The bundled categories and those of each team rule directory (DIR/categories.yaml), in display order."""
    files = [vocabulary_file(Path(d), CATEGORY_FILE) for d in extra_dirs or []]
    try:
        return load_categories([f for f in files if f.is_file()])
    except CategoryError as exc:
        raise RuleError(str(exc)) from None


def load_rules(facts: dict[str, Fact], extra_dirs: list[Path] | None = None,
               include_bundled: bool = True, scope: Literal["profile", "run"] | None = "profile",
               broken: list[Path] | None = None) -> dict[str, Rule]:
    """Every rule file is loaded and checked; the result holds the rules of `scope` (None: all of them). `broken`:
    a rule file with errors is added to it and left out instead of raising (`rules check` then checks the other
    rules' tests)."""
    rules: dict[str, Rule] = {}
    categories = rule_categories([d for d in extra_dirs or [] if Path(d).is_dir()])
    try:  # the stacks a rule's stack_remediation may name: the bundled ones and the teams' stacks.yaml
        stack_keys = load_stacks([Path(d) for d in extra_dirs or [] if Path(d).is_dir()]).keys()
    except StackError as exc:
        raise RuleError(str(exc)) from None
    sources: list[tuple[Path, str]] = []
    if include_bundled:
        sources.append((bundled_rules_dir(), "bundled"))
    for d in extra_dirs or []:
        sources.append((Path(d), str(d)))
    for directory, source in sources:
        if not directory.is_dir():
            raise RuleError(f"{directory}:1:1: rule directory does not exist")
        for path in rule_files(directory):
            try:
                rule = load_rule_file(path, facts, source, categories, stack_keys)
            except RuleError:
                if broken is None:
                    raise
                broken.append(path)
                continue
            namespaced = "/" in rule.id
            if source != "bundled" and not namespaced:
                line = _key_lines(path.read_text(encoding="utf-8")).get("id", (1, 1))[0]
                raise RuleError(f"{path}:{line}:1: rule \"{rule.id}\": team rule ids carry a namespace, "
                                f"e.g. \"acme/{rule.id}\", so they never collide with bundled rules")
            if source == "bundled" and namespaced:
                raise RuleError(f"{path}:1:1: rule \"{rule.id}\": bundled rule ids have no namespace")
            if rule.id in rules:
                raise RuleError(f"{path}:1:1: rule id {rule.id!r} is already defined in {rules[rule.id].path}")
            rules[rule.id] = rule
    for rule in rules.values():
        for other in rule.spec.absorbs:
            if other not in rules or other == rule.id:
                line = _key_lines(Path(rule.path).read_text(encoding="utf-8")).get("absorbs", (1, 1))[0]
                raise RuleError(f"{rule.path}:{line}:1: rule \"{rule.id}\" absorbs {other!r}, which is not another "
                                f"loaded rule{did_you_mean(other, sorted(rules))}")
    return {rid: r for rid, r in rules.items() if scope is None or r.spec.scope == scope}
