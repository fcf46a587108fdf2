"""The comparison of two diagnosed profiles (`diagnose compare BEFORE AFTER`): metric deltas over the key
metrics of engine/reports/metrics.py, finding changes, a verdict and the CI gates. Built by engine/runs/compare.py."""

from __future__ import annotations

from typing import Literal

from .document import Document, Model
from .metrics import MetricInfo
from ..base.vocabulary import Severity

COMPARISON_SCHEMA_VERSION = "1.3"
Assessment = Literal["improved", "regressed", "unchanged", "changed", "n/a"]
GateUnit = Literal["percent", "points", "absolute", "ns", "us", "ms", "s"]


class MetricDelta(MetricInfo):
    """One metric before and after."""

    before: float | None
    after: float | None
    change: float | None
    """after - before, in the metric's unit."""
    relative: float | None
    """change / |before|; null when before is 0 or missing."""
    assessment: Assessment
    """improved / regressed (by at least 2 %, in the metric's good or bad direction), unchanged, changed (a metric
    with no good direction) or n/a (missing in a profile)."""
    before_display: str
    after_display: str
    change_display: str
    note: str | None = None
    """Why the assessment is not what the metric's own change says: a per-call mean judged with the calls it
    multiplies ('per call, but 262× fewer calls: total -99 %'), a count with its rate per second of work; null
    otherwise."""


class FindingChange(Model):
    """A finding (matched on rule and subject) that appeared, disappeared or changed severity."""

    rule: str
    subject: str | None
    title: str
    change: Literal["appeared", "disappeared", "severity changed"]
    before_severity: Severity | None
    after_severity: Severity | None


class ProjectionCheck(Model):
    """The before run's what-if projection for a finding, beside the after run's measurement of the same step
    (same device and phase), so teams learn how far to trust the estimates."""

    rule: str
    subject: str | None
    transform: str
    label: str
    phase: str | None
    device_id: int | None
    before_step_ns: int
    """The step the before run measured."""
    projected_step_ns: int
    """What the before run projected without the cause."""
    measured_step_ns: int | None
    """The same step measured in the after run (median over its steps); null when it has none to compare or the
    fix was not applied (applied false)."""
    error: float | None
    """measured / projected - 1: above 0 the projection was optimistic."""
    applied: bool = True
    """Whether the after run shows the fix applied: the finding (same rule, subject and phase) is gone or its cost
    fell by at least half. When false the cause is still present and the projection is not checked."""
    before_step_source: str | None = None
    """How the before run found the steps (nvtx, graph-launch, sync), null for a window."""
    after_step_source: str | None = None
    """How the after run found them; when the two differ the steps compared are not the same kind."""
    line: str


class Side(Model):
    """One of the two diagnosed profiles."""

    path: str
    verdict: str | None
    """Category of its primary bottleneck; null when none."""
    headline: str
    duration_ns: int | None
    findings: int
    """How many findings it has."""


class Gate(Model):
    """A --fail-on-regression gate and its outcome."""

    spec: str
    """As given, e.g. 'gpu_utilization:-5pt'."""
    metric: str
    direction: Literal["+", "-"]
    """'+': fail when the metric rises by more than the threshold; '-': when it falls by more."""
    threshold: float
    """As written, in the gate's unit: 5 for ':-5pt', ':-5%' and ':+5us'."""
    relative: bool
    """The threshold is in % of the before value (unit 'percent')."""
    unit: GateUnit
    """What the threshold counts: percent of the before value; points, percentage points of a 0-1 metric (its
    change × 100); absolute, the change in the metric's own unit (ns for a time); ns, us, ms or s, the change of
    a time metric in that unit."""
    optional: bool = False
    """Marked with '?' after the metric: when the metric is missing in a profile, or a percent gate meets a
    before value of 0, the gate is not evaluated and passes (otherwise that stops the comparison, exit 2)."""
    observed: float | None = None
    """The change in the gate's unit; null when it was not evaluated."""
    crossed: bool = False
    message: str = ""


class TimeBin(Model):
    """Mean busy share of the used GPUs in one bin, its times relative to the profile's first bin."""

    t_start_ns: float
    t_end_ns: float
    busy: float


class Comparison(Document):
    """Output of `diagnose compare BEFORE AFTER --format json`."""

    # a constant in Literal[...]: pydantic reads it at run time (the JSON Schema const), mypy wants a literal
    schema_version: Literal[COMPARISON_SCHEMA_VERSION] = COMPARISON_SCHEMA_VERSION  # type: ignore[valid-type]
    before: Side
    after: Side
    tokens: int | None
    """Output tokens of the before run, or of each run when --tokens gave one N (tokens/s, time per output token)."""
    tokens_after: int | None = None
    """Output tokens of the after run when --tokens BEFORE,AFTER gave one per run; None: the same as tokens."""
    verdict: Literal["improved", "regressed", "unchanged"]
    reason: str
    """The main change behind the verdict, in words."""
    metrics: list[MetricDelta]
    findings: list[FindingChange]
    projections: list[ProjectionCheck] = []
    """Each what-if projection of the before run beside the after run's measurement."""
    gates: list[Gate]
    gate_crossed: bool
    timeline: dict[Literal["before", "after"], list[TimeBin]]
    """GPU utilisation over time of each profile."""
