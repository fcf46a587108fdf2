"""What a rule file may say (RuleSpec and its parts, validated by pydantic) and the loaded rule (Rule: the spec
with its parsed conditions); RuleError, a broken rule file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..base.errors import PackError
from ..base.units import PARAM_RANGES, PARAM_UNITS, describe_range, fmt_limit
from ..base.vocabulary import Kind, Severity
from .whatif import TRANSFORMS as _TRANSFORMS
from .rule_conditions import Condition


class RuleError(PackError):
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
# A stack's key (rules/vocabulary/stacks.yaml, or a team's DIR/vocabulary/stacks.yaml): checked against the stacks
# of the pack in force when the rule file loads (rule_checks.check_stack_keys), not here.
StackKey = str


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
    # Steps for one software stack (rules/vocabulary/stacks.yaml), shown before the generic steps when the
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
