"""Rules are YAML data: load, validate against the facts, and parse their conditions (never eval)."""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from ..base.errors import DiagnoseError
from ..base.text import did_you_mean
from ..facts.catalog import Fact
from ..facts.cross_rank import load_run_facts
from .templating import compile_problem
from ..base.units import PARAM_RANGES, PARAM_UNITS, column_unit, describe_range, fmt_limit
from ..base.vocabulary import IDLE_CAUSES, STACK_KEYS, Kind, Severity
from ..pack.yamlfile import SAFE_LOADER, error_position, error_problem
from .whatif import TRANSFORMS as _TRANSFORMS
from ..pack.layout import bundled_pack, is_rule_file, vocabulary_file
from ..pack.opclasses import CLASSES_FILE
from ..pack.headlines import HEADLINES_FILE
from ..pack.categories import CATEGORY_FILE, Category, CategoryError, load_categories, team_category_file



class RuleError(DiagnoseError):
    """A rule file is broken: each of `problems` starts with file:line:col (str() lists them, one per line).
    `rule` is the rule otherwise loaded when its spec is sound, so `rules check` can render its templates."""

    def __init__(self, *problems: str, rule: Rule | None = None):
        super().__init__("\n".join(problems))
        self.problems = list(problems)
        self.rule = rule


class ParamSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default: float
    unit: str
    doc: str

    @field_validator("unit")
    @classmethod
    def _known_unit(cls, v: str) -> str:
        if v not in PARAM_UNITS:
            raise ValueError(f"unknown unit {v!r}; use one of {', '.join(PARAM_UNITS)}")
        return v

    # The values a team may set (--set, diagnose.yaml); when left out, the unit's range (units.PARAM_RANGES:
    # a ratio 0-1, a percent 0-100, durations, sizes and counts >= 0). YAML writes "no limit" as .inf / -.inf.
    min: float | None = None
    max: float | None = None

    @field_validator("default")
    @classmethod
    def _finite_default(cls, v: float) -> float:
        if v != v or v in (float("inf"), float("-inf")):  # a NaN or infinite threshold never (or always) fires
            raise ValueError(f"the default must be a finite number, not {v}; write the threshold the rule should "
                             f"use (a rule is turned off with `enabled: false` in diagnose.yaml)")
        return v

    @field_validator("min", "max")
    @classmethod
    def _not_nan(cls, v: float | None) -> float | None:
        if v is not None and v != v:
            raise ValueError("a range limit must be a number (.inf or -.inf for none), not NaN")
        return v

    @model_validator(mode="after")
    def _default_in_range(self) -> "ParamSpec":
        if self.unit not in PARAM_UNITS:
            return self  # reported by _known_unit
        lo, hi = self.bounds
        if lo > hi:
            raise ValueError(f"min {fmt_limit(lo)} is above max {fmt_limit(hi)}")
        if not lo <= self.default <= hi:
            raise ValueError(f"the default {fmt_limit(self.default)} is outside the param's range "
                             f"({describe_range(lo, hi)}); change the default, or declare the range with min/max")
        return self

    @property
    def bounds(self) -> tuple[float, float]:
        lo, hi = PARAM_RANGES.get(self.unit, (float("-inf"), float("inf")))
        return (lo if self.min is None else self.min, hi if self.max is None else self.max)

    @property
    def range_text(self) -> str:
        return describe_range(*self.bounds)

    def in_range(self, value: float) -> bool:
        lo, hi = self.bounds
        return lo <= value <= hi


class EvidenceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    column: str
    label: str


class CaptureSpec(BaseModel):
    """How to capture again so that a capture problem goes: `diagnose profile` options (besides the preset of the
    profile's stack, which the remediation names), the switches no option sets (passed with --nsys-arg unless the
    preset already sets them) and the raw nsys switches all that amounts to, for a capture by hand."""
    model_config = ConfigDict(extra="forbid")
    profile: str = ""
    pass_switches: list[str] = Field(default_factory=list, alias="pass")
    nsys: str

    @field_validator("pass_switches")
    @classmethod
    def _whole_switches(cls, v: list[str]) -> list[str]:
        # YAML splits an unquoted [--trace=cuda,nvtx] at its commas; each piece would become an --nsys-arg
        # that `diagnose profile` refuses.
        bad = [s for s in v if not s.startswith("--")]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an nsys switch: each item must be one whole --switch=value (quote "
                             f"a value with commas: [\"--trace=cuda,nvtx\"])")
        return v


class StepSpec(BaseModel):
    """A remediation step shown only when its conditions hold on the evidence: `when` lists conditions in the
    syntax of the rule's own `when`, over the finding's row (`pageable_bytes > 0`) or the first row of a whole-run
    fact (`capture_health.osrt_call_count == 0`), so advice never contradicts the numbers printed beside it."""
    model_config = ConfigDict(extra="forbid")
    text: str
    when: list[str] = Field(min_length=1)


def step_text(step: str | StepSpec) -> str:
    return step if isinstance(step, str) else step.text


WHATIF_TRANSFORMS = tuple(_TRANSFORMS)
StackKey = Literal[STACK_KEYS]  # type: ignore[valid-type]


class RuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*(/[a-z0-9]+(-[a-z0-9]+)*)?$")
    title: str
    category: str
    kind: Kind | None = None  # default: the kind of the rule's category (rules/vocabulary/categories.yaml)
    # profile: judges one export (the facts of rules/facts); run: judges the ranks of a multi-rank run
    # together (`diagnose RANK0 RANK1 ...`, the cross-rank facts of rules/facts/cross_rank).
    scope: Literal["profile", "run"] = "profile"
    blocking: bool = False  # capture problems that make the rest of the diagnosis meaningless
    severity: Severity
    fact: str
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    when: list[str] = Field(min_length=1)
    when_any: list[str] = Field(default_factory=list)  # besides `when`, at least one of these must hold
    impact: str | None = None
    # The idle cause (a `cause` of the _idle_gaps fact: sync, allocation, launch, host, gpu-side, uvm) this rule
    # judges: when a GPU is mostly idle and this cause explains most of that idle time, the verdict names this
    # rule (its finding, or its category) instead of the idle symptom.
    idle_cause: str | None = None
    info_below_impact: str | float | None = None
    # What removing this rule's cause would buy: the transform the what-if replay applies to its findings
    # (engine/diagnosis/whatif.py TRANSFORMS).
    what_if: Literal[WHATIF_TRANSFORMS] | None = None  # type: ignore[valid-type]
    label: str | None = None  # Jinja template naming the row, e.g. "GPU {{ row.device_id }}"
    message: str
    why: str
    evidence: list[EvidenceSpec] = Field(default_factory=list)
    remediation: list[str | StepSpec] = Field(min_length=1)
    # Steps for one software stack (engine/base/vocabulary.py STACKS), shown before the generic steps when the
    # profile comes from that stack and never otherwise: serving flags reach only serving profiles.
    stack_remediation: dict[StackKey, list[str | StepSpec]] = Field(default_factory=dict)
    # A capture problem: the `diagnose profile` line that fixes it comes first in the remediation.
    capture: CaptureSpec | None = None
    references: list[str] = Field(default_factory=list)
    # References for one stack, listed before the generic ones for that stack only (a vLLM page never reaches
    # an OpenACC report).
    stack_references: dict[StackKey, list[str]] = Field(default_factory=dict)
    aliases: list[str] = Field(default_factory=list)
    # Rules that say the same thing about the same subject from other evidence (fp32-gemms from the kernel names,
    # tensor-cores-idle from GPU metrics): when both fire on one subject and phase, their finding is folded into
    # this rule's (engine/diagnosis/merge.py), its evidence kept.
    absorbs: list[str] = Field(default_factory=list)


_OPS = (">=", "<=", "==", "!=", ">", "<")
_COND = re.compile(r"^\s*(\S+)\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


@dataclass(frozen=True)
class Operand:
    # "fact": FACT.COLUMN, a column of the first row of another (whole-run) fact; only in remediation steps.
    kind: Literal["column", "fact", "param", "number", "bool", "string"]
    value: Any

    def text(self) -> str:
        return f"${self.value}" if self.kind == "param" else str(self.value)


@dataclass(frozen=True)
class Condition:
    left: Operand
    op: str
    right: Operand
    source: str


@dataclass
class Rule:
    spec: RuleSpec
    path: str
    source: str  # 'bundled' or the directory it came from
    conditions: list[Condition] = field(default_factory=list)
    any_conditions: list[Condition] = field(default_factory=list)
    # The parsed `when` of each conditional remediation step, by its key in the file ("remediation.2",
    # "stack_remediation.pytorch.0"); a step without conditions is absent.
    step_conditions: dict[str, list[Condition]] = field(default_factory=dict)
    overhead: bool = False  # its category is an overhead around the kernels (Category.overhead)

    @property
    def id(self) -> str:
        return self.spec.id


def _operand(token: str) -> Operand:
    if token.startswith("$"):
        return Operand("param", token[1:])
    if _NUMBER.match(token):
        return Operand("number", float(token))
    if token in ("true", "false"):
        return Operand("bool", token == "true")
    if token.startswith(("'", '"')) and token.endswith(token[0]) and len(token) >= 2:
        return Operand("string", token[1:-1])
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*", token):
        return Operand("fact", tuple(token.split(".", 1)))
    return Operand("column", token)


def parse_condition(text: str) -> Condition:
    m = _COND.match(text)
    if not m:
        raise ValueError(f"cannot parse condition {text!r}; write 'COLUMN OP VALUE' with OP one of "
                         f"{' '.join(_OPS)}, e.g. 'overhead_ratio > $max_overhead_ratio'")
    return Condition(_operand(m.group(1)), m.group(2), _operand(m.group(3)), text)


# libyaml's safe loader when PyYAML was built with it (ten times faster); both build plain data only.


def _key_lines(text: str) -> dict[str, tuple[int, int]]:
    """Top-level keys and list items of `when` -> (line, col), 1-based, for error messages."""
    out: dict[str, tuple[int, int]] = {}
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
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


def _check_condition(text: str, key: str, spec: RuleSpec, check_column, err,
                     params_known: bool) -> tuple[Condition | None, list[RuleError]]:
    """The parsed condition and its problems: unknown columns and params, a param unit the column does not
    share. `check_column` returns the problem of a column, or None; `params_known`: the params validated."""
    try:
        cond = parse_condition(text)
    except ValueError as exc:
        return None, [err(key, str(exc))]
    problems: list[RuleError] = []
    col_unit = None
    for side in (cond.left, cond.right):
        if side.kind in ("column", "fact"):
            problem = check_column(side.value, key)
            if problem is not None:
                problems.append(problem)
            col_unit = column_unit(side.value if side.kind == "column" else side.value[1])
        elif side.kind == "param" and params_known and side.value not in spec.params:
            problems.append(err(key, f"param ${side.value} is not declared under params"
                                     f"{did_you_mean(side.value, list(spec.params))}"))
    if problems or not params_known:
        return cond, problems
    for side in (cond.left, cond.right):
        if side.kind == "param" and col_unit is not None:
            p_unit = spec.params[side.value].unit
            if PARAM_UNITS[p_unit][0] != col_unit and col_unit not in ("number", "id"):
                problems.append(err(key, f"param ${side.value} is in {p_unit!r} but the column it is compared "
                                         f"with is in {col_unit!r}"))
    return cond, problems


# Valid stand-ins for the required keys a file gets wrong, so its other keys are still checked.
_STAND_INS: dict[str, Any] = {"id": "x", "title": "", "category": "", "severity": Severity.INFO, "fact": "",
                              "when": ["x == 0"], "message": "", "why": "", "remediation": [""]}


def _validation_problem(error: ErrorDetails, err) -> RuleError:
    loc = ".".join(str(p) for p in error["loc"])
    key = ".".join(str(p) for p in error["loc"][:2])
    if error["type"] == "extra_forbidden":
        return err(key, f"unknown key {loc!r}{did_you_mean(str(error['loc'][-1]), list(RuleSpec.model_fields))}")
    if error["type"] == "missing":
        return err(key, f"missing required key {loc!r}")
    return err(key, f"{loc}: {error['msg'].removeprefix('Value error, ')}")


def _validate(data: dict[str, Any], err, problems: list[RuleError]) -> tuple[RuleSpec | None, set[str]]:
    """The spec, and the top-level keys that failed validation (each failure appended to `problems`). When
    keys fail, the spec is built from the others and stand-ins, so the checks that do not depend on the
    failed keys still run; None when even that fails."""
    try:
        return RuleSpec.model_validate(data), set()
    except ValidationError as exc:
        errors = exc.errors()
    problems += [_validation_problem(e, err) for e in errors]
    bad = {str(e["loc"][0]) for e in errors if e["loc"]}
    try:
        return RuleSpec.model_validate({**_STAND_INS, **{k: v for k, v in data.items() if k not in bad}}), bad
    except ValidationError:
        return None, bad


def load_rule_file(path: Path, facts: dict[str, Fact], source: str = "bundled",
                   categories: dict[str, Category] | None = None) -> Rule:
    """One rule file, checked against the facts and the categories (default: the bundled ones and, for a team
    file, the categories.yaml of its directory or above). A broken file raises one RuleError listing every
    independent problem (a YAML syntax error alone stops the reading)."""
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
    spec, bad = _validate(data, err, problems)
    rule = None
    if spec is not None:
        rule = _check_spec(spec, bad, path, source, facts, categories, err, problems)
    problems += _template_errors(data, err)
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


def _check_spec(spec: RuleSpec, bad: set[str], path: Path, source: str, facts: dict[str, Fact],
                categories: dict[str, Category] | None, err, problems: list[RuleError]) -> Rule | None:
    """Check a validated spec against the categories, the file name, the facts and its params, appending each
    problem; keys in `bad` failed validation, and the checks that read them are left out. The rule, or None
    when its fact is unknown (its templates cannot be tried on the fact's columns then)."""
    if categories is None:
        team_file = None if source == "bundled" else team_category_file(path)
        try:
            categories = load_categories([team_file] if team_file else [])
        except CategoryError as exc:
            problems.append(RuleError(str(exc)))
            categories = None
    if categories is not None and "category" not in bad:
        if spec.category not in categories:
            problems.append(err("category", f"unknown category {spec.category!r}"
                                            f"{did_you_mean(spec.category, list(categories))}; use one of "
                                            f"{', '.join(categories)}, or define it in a {CATEGORY_FILE} beside "
                                            f"your team rules"))
        elif spec.kind is None:
            spec.kind = categories[spec.category].kind
    if "id" not in bad and spec.id.split("/")[-1] != path.stem and spec.id != path.stem:
        problems.append(err("id", f"id {spec.id!r} must equal the file name stem {path.stem!r}"))
    fact = None
    if not bad & {"fact", "scope"}:
        fact, problem = _rule_fact(spec, facts, err)
        if problem is not None:
            problems.append(problem)
    columns = fact.column_names if fact is not None else None
    rule = Rule(spec, str(path), source)
    if categories is not None and spec.category in categories:
        rule.overhead = categories[spec.category].overhead

    def check_column(name: str | tuple[str, str], key: str) -> RuleError | None:
        if isinstance(name, tuple):
            return err(key, f"{'.'.join(name)}: a FACT.COLUMN operand reads another fact, which only a remediation "
                            f"step's `when` may do; a rule's own conditions read the columns of its fact "
                            f"{spec.fact!r}")
        if columns is None or name in columns:
            return None
        return err(key, f"fact {spec.fact!r} has no column {name!r}{did_you_mean(name, columns)}")

    def check_step_column(name: str | tuple[str, str], key: str) -> RuleError | None:
        if not isinstance(name, tuple):
            return check_column(name, key)
        other, column = name
        public = [n for n, f in facts.items() if not f.is_helper]
        if other not in public:
            return err(key, f"unknown fact {other!r} in {other}.{column}{did_you_mean(other, public)}")
        known = facts[other].column_names
        if column not in known:
            return err(key, f"fact {other!r} has no column {column!r}{did_you_mean(column, known)}")
        return None

    params_known = "params" not in bad
    for group, texts, target in (("when", spec.when, rule.conditions),
                                 ("when_any", spec.when_any, rule.any_conditions)):
        if group in bad:
            continue
        for i, text_cond in enumerate(texts):
            cond, found = _check_condition(text_cond, f"{group}.{i}", spec, check_column, err, params_known)
            problems += found
            if cond is not None:
                target.append(cond)
    steps = [] if "remediation" in bad else [(f"remediation.{i}", step) for i, step in enumerate(spec.remediation)]
    if "stack_remediation" not in bad:
        steps += [(f"stack_remediation.{stack}.{i}", step) for stack, items in spec.stack_remediation.items()
                  for i, step in enumerate(items)]
    for key, step in steps:
        if isinstance(step, str):
            continue
        parsed: list[Condition] = []
        for text_cond in step.when:
            cond, found = _check_condition(text_cond, key, spec, check_step_column, err, params_known)
            problems += found
            if cond is not None:
                parsed.append(cond)
        rule.step_conditions[key] = parsed
    causes = [c.key for c in IDLE_CAUSES if c.key != "other"]
    if spec.idle_cause is not None and "idle_cause" not in bad and spec.idle_cause not in causes:
        problems.append(err("idle_cause", f"unknown idle cause {spec.idle_cause!r}"
                                          f"{did_you_mean(spec.idle_cause, causes)}; use one of {', '.join(causes)}"))
    if spec.impact is not None and "impact" not in bad:
        problem = check_column(spec.impact, "impact")
        if problem is None and column_unit(spec.impact) != "ratio":
            problem = err("impact", f"impact column {spec.impact!r} must be a 0-1 share of time (a *_fraction column)")
        if problem is not None:
            problems.append(problem)
    if isinstance(spec.info_below_impact, str) and "info_below_impact" not in bad:
        ref = spec.info_below_impact.lstrip("$")
        if params_known and ref not in spec.params:
            problems.append(err("info_below_impact", f"param ${ref} is not declared under params"))
        elif spec.impact is None and "impact" not in bad:
            problems.append(err("info_below_impact", "info_below_impact needs an impact column"))
    if "evidence" not in bad:
        problems += [p for i, ev in enumerate(spec.evidence) if (p := check_column(ev.column, f"evidence.{i}"))]
    return rule if fact is not None else None


def _rule_fact(spec: RuleSpec, facts: dict[str, Fact], err) -> tuple[Fact | None, RuleError | None]:
    """The fact the rule reads (a cross-rank one for `scope: run`), or the problem naming it."""
    if spec.scope == "run":  # cross-rank rules read the facts of rules/facts/cross_rank
        facts, other = load_run_facts(), facts
        hint = "; a rule with `scope: run` reads a cross-rank fact of rules/facts/cross_rank, such as 'rank_balance'"
    else:
        other, hint = load_run_facts(), "; it is a cross-rank fact: add `scope: run` to judge multi-rank runs"
    if spec.fact not in facts or facts[spec.fact].is_helper:
        public = [n for n, f in facts.items() if not f.is_helper]
        extra = hint if spec.fact in other else did_you_mean(spec.fact, public)
        return None, err("fact", f"unknown fact {spec.fact!r}{extra}")
    return facts[spec.fact], None


def template_fields(rule: RuleSpec | dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key in the file, name in messages, template) of the Jinja fields: label, message, remediation N."""
    get = rule.get if isinstance(rule, dict) else lambda key: getattr(rule, key, None)
    fields = [("label", "label", get("label")), ("message", "message", get("message"))]
    def text(step: Any) -> Any:  # a step is a template, or a mapping {text, when} (StepSpec)
        if isinstance(step, StepSpec):
            return step.text
        return step.get("text") if isinstance(step, dict) else step

    steps = get("remediation")
    if isinstance(steps, list):
        fields += [(f"remediation.{i}", f"remediation {i + 1}", text(step)) for i, step in enumerate(steps)]
    by_stack = get("stack_remediation")
    if isinstance(by_stack, dict):
        fields += [(f"stack_remediation.{stack}.{i}", f"{stack} remediation {i + 1}", text(step))
                   for stack, stack_steps in by_stack.items() if isinstance(stack_steps, list)
                   for i, step in enumerate(stack_steps)]
    return [(key, name, text) for key, name, text in fields if isinstance(text, str)]


def _template_errors(data: dict[str, Any], err) -> list[RuleError]:
    return [err(key, f"its {name} template {problem}") for key, name, text in template_fields(data)
            if (problem := compile_problem(text)) is not None]


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
                rule = load_rule_file(path, facts, source, categories)
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
