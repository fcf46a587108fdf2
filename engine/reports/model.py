"""The report data model: what every renderer (terminal, Markdown, HTML, JSON) reads."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..vocabulary import Kind, Severity

REPORT_SCHEMA_VERSION = "1.1"


class Evidence(BaseModel):
    label: str
    column: str
    value: Any
    display: str
    op: str | None = None          # comparison that fired, e.g. '>'
    threshold: float | None = None  # in the param's own unit
    threshold_display: str | None = None
    param: str | None = None


class Finding(BaseModel):
    rule: str
    title: str
    category: str
    kind: Kind
    severity: Severity
    subject: str | None = None  # which GPU / API / phase the finding is about
    message: str
    impact: float | None = Field(None, description="Estimated share (0-1) of the profiled time this costs.")
    evidence: list[Evidence]
    remediation: list[str]
    references: list[str]
    row: dict[str, Any]


class RuleOutcome(BaseModel):
    rule: str
    title: str
    category: str
    reason: str | None = None


class Verdict(BaseModel):
    primary: str | None = Field(None, description="Category of the primary bottleneck, or null when none.")
    rule: str | None = None
    subject: str | None = None
    impact: float | None = None
    headline: str


class ParamOverride(BaseModel):
    target: str  # 'rule-id.param' or 'facts.param' or 'rule-id.severity'
    value: Any
    default: Any
    origin: str  # 'command line' or the config file path


class ProfileSummary(BaseModel):
    path: str
    nsys_version: str | None
    schema_version: str | None
    export_time_utc: str | None
    graph_trace_mode: str | None
    duration_ns: int | None
    devices: list[dict[str, Any]]
    views: dict[str, dict[str, Any]]


class Throughput(BaseModel):
    tokens: int | None = Field(None, description="Output tokens generated in the profiled run (--tokens).")
    duration_ns: float | None = Field(None, description="Profiled duration the rates are computed over (ns).")
    tokens_per_s: float | None = Field(None, description="tokens / duration.")
    time_per_token_ns: float | None = Field(None, description="duration / tokens (ns).")
    decode_steps: int | None = Field(None, description="NVTX decode-step ranges, when the profile has them.")
    step_time_ns: float | None = Field(None, description="Mean decode-step duration (ns).")
    steps_per_s: float | None = Field(None, description="Decode steps per second at the mean step duration.")


class Report(BaseModel):
    schema_version: str = REPORT_SCHEMA_VERSION
    tool: str = "nsys-diagnose"
    tool_version: str
    profile: ProfileSummary
    verdict: Verdict
    metrics: dict[str, Any]
    findings: list[Finding]
    passed: list[RuleOutcome]
    skipped: list[RuleOutcome]
    overrides: list[ParamOverride]
    facts: dict[str, list[dict[str, Any]]]
    throughput: Throughput | None = None
