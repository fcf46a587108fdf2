"""The single-profile report (`diagnose PROFILE --format json`) and the summary of the profile it was made from:
the export, its devices and canonical views, the software stack detected. The pieces shared with the multi-rank
run and the comparison live beside it (document.py, findings.py, whatif.py, verdict.py, settings.py, metrics.py,
measures.py). The diagnosis builds these classes; the renderer (engine/reports/render.py) and the JSON Schemas
(engine/reports/schema.py) read them, nothing else. This package sits below both, so it imports nothing but the
shared vocabulary.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from .document import Document, Model, Number
from .findings import Finding, RuleOutcome
from .measures import GpuWindow, OperationBreakdown, StartUp, Throughput
from .metrics import MetricRow
from .settings import ParamOverride
from .verdict import Verdict
from .whatif import BatchWhatIf

REPORT_SCHEMA_VERSION = "2.6"


@with_config(ConfigDict(extra="forbid", use_attribute_docstrings=True))
class Device(TypedDict):
    """A GPU of the profiled machine."""

    device_id: int
    name: str | None
    used: bool
    """The GPU ran at least one operation."""
    sm_count: int | None
    memory_bandwidth_bytes_per_s: Number | None


@with_config(ConfigDict(extra="forbid", use_attribute_docstrings=True))
class View(TypedDict):
    """A canonical view: its rows, and why it is empty when the export lacks its table."""

    rows: int
    reason: str | None


class StackInfo(Model):
    """The software stack the profile comes from (software_stack fact; docs/verdict.md "Advice for your stack")."""

    name: str
    """Stack id: vllm, sglang, tensorrt-llm, tensorrt, jax, rapids, openacc, openmp, pytorch or cuda."""
    label: str
    lineage: list[str]
    """Stacks whose remediation steps the findings show, most specific first."""
    evidence: list[str]
    """What identified it (kernel names, NVTX ranges, process names of the processes that launched GPU work), then
    any process on the host named like a stack that launched no GPU work ("also on the host, not counted")."""
    also: list[str] = []
    """Other stacks with evidence in the profile (less specific ones, e.g. pytorch under vllm)."""
    serving: bool | None = Field(default=None, exclude=True)
    """Whether the stack serves tokens (`serving` in its stacks.yaml, a team's included); not written to the JSON,
    so None in a report read back from it."""


class ProfileSummary(Model):
    """The export that was read."""

    path: str
    """The export as given on the command line."""
    source_format: Literal["nsys", "kineto"] = "nsys"
    """What was read: an nsys export ('nsys') or a PyTorch-profiler trace ('kineto')."""
    producer: str = ""
    """What wrote it, for the report's header: 'nsys 2024.6.2', 'nsys version not recorded' or
    'PyTorch profiler trace'."""
    rank: int | None = None
    """The rank of a distributed run the profile is, when it records one (a trace's distributedInfo)."""
    world_size: int | None = None
    """The ranks of that run."""
    nsys_version: str | None
    schema_version: str | None
    """The export's own schema version."""
    export_time_utc: str | None
    graph_trace_mode: str | None
    """'graph' or 'node' when CUDA graphs were traced."""
    duration_ns: int | None
    """Capture duration [nanoseconds]."""
    stack: StackInfo | None = None
    """The software stack detected from the export."""
    devices: list[Device]
    views: dict[str, View]
    """Every canonical view by name."""


class Report(Document):
    """Output of `diagnose PROFILE --format json`."""

    # a constant in Literal[...]: pydantic reads it at run time (the JSON Schema const), mypy wants a literal
    schema_version: Literal[REPORT_SCHEMA_VERSION] = REPORT_SCHEMA_VERSION  # type: ignore[valid-type]
    profile: ProfileSummary
    verdict: Verdict
    metrics: dict[str, Any]
    """The headline numbers: the row of the `summary` fact (empty when the export has nothing to summarise)."""
    key_metrics: list[MetricRow] = []
    """The key metrics as the reports show them (engine/reports/metrics.py), with their rule thresholds; empty
    when the profile ran no kernels."""
    findings: list[Finding]
    passed: list[RuleOutcome]
    skipped: list[RuleOutcome]
    also_checked: list[RuleOutcome] = []
    """Rules that fired but whose cost rounds to 0 % of GPU time: named in one line, not listed as findings (the
    reason says where and how little)."""
    overrides: list[ParamOverride]
    facts: dict[str, list[dict[str, Any]]]
    """Rows of each reported fact (long tables cut: kernel_summary and api_summary to 50 rows, kernel_gaps to
    200); team facts (--rule-dir) appear under their own names."""
    phase_facts: dict[str, dict[str, list[dict[str, Any]]]] = {}
    """When the rules judged each inference phase on its own: per phase, the rows of its per-phase facts
    (gpu_utilization, launch_overhead, gpu_metrics_summary) computed over that phase's work alone."""
    throughput: Throughput | None = None
    """Null when neither --tokens nor decode steps give one."""
    operations: list[OperationBreakdown] = []
    """Per phase (or the whole run) and GPU, where the GPU's time went by operation class: GEMM, attention, norm,
    elementwise, communication ... (the operation_classes fact)."""
    window: list[GpuWindow] = []
    """Per GPU that did work, its window split into kernels running, only copies running and idle time by cause
    (engine/reports/breakdown.py)."""
    startup: StartUp | None = None
    """The one-off start-up (model load, warm-up) the capture opens with, reported apart; null when there is none.
    When `startup.judged_after`, every fact, finding and metric of this report covers the steady window after it."""
    batch_what_if: BatchWhatIf | None = None
    """The projection of a larger batch (--what-if batch=N, or by default when the primary is launch- or host-bound
    at a small batch); null otherwise."""
