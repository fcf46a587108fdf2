"""What a rule produced: a finding with its evidence (and the other GPUs it fired on), a rule that passed or was
skipped."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .document import Model
from .whatif import WhatIf
from ..base.vocabulary import Kind, Severity


class Evidence(Model):
    """One number that made the rule fire (with its threshold) or that gives context (op null)."""

    label: str
    """What was measured, in words."""
    column: str
    """Fact column the value comes from."""
    value: Any
    """The observed value in the column's unit (number, string, boolean or null)."""
    display: str
    """The value formatted for people, e.g. '9.6 µs'."""
    op: str | None = None
    """Comparison that held, e.g. '>'; null for context-only evidence."""
    threshold: float | None = None
    """Threshold in the param's own unit; null for context."""
    threshold_display: str | None = None
    """The threshold formatted for people."""
    param: str | None = None
    """Rule param holding the threshold (settable with --set)."""


class AlsoOn(Model):
    """Another GPU on which the same rule fired (in the same phase): its own numbers."""

    subject: str
    severity: Severity
    message: str
    impact: float | None = Field(None, ge=0, le=1)
    run_impact: float | None = Field(None, ge=0, le=1)
    row: dict[str, Any]


class Finding(Model):
    """A rule that fired. Findings are ordered by severity, then kind (cause, capture, symptom), then impact."""

    rule: str
    """Rule id, e.g. 'launch-bound' (team rules: 'namespace/id')."""
    title: str
    category: str
    """Bottleneck category (rules/vocabulary/categories.yaml or a team pack's own)."""
    kind: Kind
    severity: Severity
    subject: str | None = None
    """Which GPU / API / phase / rank the finding is about."""
    message: str
    """One paragraph with the numbers."""
    impact: float | None = Field(None, ge=0, le=1)
    """Estimated share (0-1) of GPU time this costs; null when not estimated. For a phase finding, the share of
    the phase's GPU time."""
    phase: str | None = None
    """The inference phase (prefill, decode, other or a configured one) the rule judged on its own; null when
    the rule judged the whole run."""
    run_impact: float | None = Field(None, ge=0, le=1)
    """The same cost as a share of the whole run's GPU time (equal to impact when phase is null)."""
    also_on: list[AlsoOn] = Field(default_factory=list)
    """The other GPUs on which the rule fired, when it fired on several: the finding then describes the worst
    one (subject 'GPUs 0, 1, 3'; message, impact, evidence and row are that GPU's) and lists the rest here."""
    evidence: list[Evidence]
    agrees: list[str] = Field(default_factory=list)
    """Rules that fired on the same subject from other evidence and were folded into this finding (fp32-gemms
    takes in tensor-cores-idle); their evidence is appended, labelled with the rule id."""
    remediation: list[str]
    """Steps, most effective first."""
    references: list[str]
    row: dict[str, Any]
    """The fact row the rule fired on (its columns)."""
    what_if: WhatIf | None = None
    """What removing this cause would buy (cause findings at warning or above whose rule names a `what_if`)."""


class RuleOutcome(Model):
    """A rule that passed or was skipped."""

    rule: str
    title: str
    category: str
    reason: str | None = None
    """Why the rule was skipped (null for passed rules)."""
