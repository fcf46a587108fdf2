"""The domain model: the pieces every report is made of (verdict, findings with their evidence, metric rows,
rule outcomes, settings) and the single-profile report. The multi-rank run (runmodel.py) and the comparison
(comparemodel.py) are built from the same pieces. The diagnosis builds these classes; the renderer
(engine/reports/render.py) and the JSON Schemas (engine/reports/schema.py) read them, nothing else. This package
sits below both, so it imports nothing but the shared vocabulary.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from ..base.units import fmt_range, fmt_span, fmt_step
from ..base.vocabulary import Kind, Severity

REPORT_SCHEMA_VERSION = "2.6"
Number = int | float  # integer nanoseconds and counts stay integers in the JSON; means may be fractional
Better = Literal["higher", "lower"] | None


class Model(BaseModel):
    """Unknown fields are refused, and the JSON Schema lists every field as required: the JSON always has them."""

    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True,
                              use_attribute_docstrings=True)


class Document(Model):
    """What every report written by nsys-diagnose starts with."""

    schema_version: str
    """MAJOR.MINOR: a minor version adds fields, a major one renames or removes them."""
    tool: Literal["nsys-diagnose"] = "nsys-diagnose"
    tool_version: str


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


class WhatIf(Model):
    """What removing a finding's cause would buy: the measured schedule replayed with the cause's time taken out
    (engine/diagnosis/whatif.py, facts _whatif_steps and whatif_replay; docs/measures.md "What a fix would buy")."""

    transform: str
    """The transform replayed: launch-gaps, host-gaps, sync, allocation, copies-pinned or fused (the rule's
    `what_if`)."""
    label: str
    """The transform in words, e.g. 'without launch gaps'."""
    device_id: int | None = None
    phase: str | None = None
    """The phase whose steps were replayed; null: every step of the device."""
    basis: Literal["steps", "window"]
    """steps: the median step, measured and replayed; window: the device's judged window as one step (no steps)."""
    step_source: str | None = None
    """How the steps were found: nvtx, sync or graph-launch (null for the window)."""
    steps: int = Field(ge=0)
    measured_step_ns: int = Field(ge=0)
    """Median measured step (or the window): busy time plus the idle gaps before its operations."""
    projected_step_ns: int = Field(ge=0)
    """Median step replayed with the cause removed."""
    projected_step_slow_ns: int | None = Field(None, ge=0)
    """copies-pinned without a pinned bandwidth measured in the profile: the step at the low end of what pinned
    copies reach (facts.whatif_pinned_gbps_low, PCIe 3.0 x16), projected_step_ns being the high end
    (facts.whatif_pinned_gbps, PCIe 4.0 x16); null otherwise."""
    speedup: float | None = None
    """measured / projected: the factor on steps per second."""
    measured_steps_per_s: float | None = None
    projected_steps_per_s: float | None = None
    measured_tokens_per_s: float | None = None
    """With --tokens: the run's tokens/s."""
    projected_tokens_per_s: float | None = None
    """With --tokens: the run's tokens/s times the speed-up (the rest of the run scales with its steps)."""
    why_not: str | None = None
    """Why the replayed fix buys less than the finding costs, and which fix would buy it (the host's own work sets
    the pace; the copies already run pinned); null when the replay's saving is the finding's cost."""
    assumptions: list[str]
    """The model's edges and constraints, in words."""
    line: str
    """One line for people: 'without launch gaps: decode step 1.02 ms -> ~0.47 ms (~2.2x steps/s)'."""


class BatchWhatIf(Model):
    """What a larger batch would buy: the fixed per-step cost spread over more requests (docs/measures.md "What a
    fix would buy")."""

    batch: int = Field(ge=2)
    """The batch projected: N requests per step, or N x the current batch when that is unknown."""
    current_batch: float | None = None
    """Requests per step measured (TensorRT-LLM step ranges); null when the profile does not say."""
    factor: float
    """Requests per step projected over those measured."""
    method: Literal["model", "fit"]
    """model: kernel time by the documented model; fit: least squares of step time against batch size."""
    device_id: int | None = None
    phase: str | None = None
    measured_step_ns: int = Field(ge=0)
    projected_step_low_ns: int = Field(ge=0)
    projected_step_high_ns: int = Field(ge=0)
    throughput_gain_low: float
    """Tokens/s projected over measured, at the longer projected step."""
    throughput_gain_high: float
    tpot_rise_low: float
    """Rise of the time per output token (the step time), at the shorter projected step (0.2 = 20 %)."""
    tpot_rise_high: float
    assumptions: list[str]
    line: str

    @property
    def measured_display(self) -> str:
        """The measured step to the precision of the projection beside it ('4.19 ms')."""
        return fmt_step(self.measured_step_ns)

    @property
    def projected_display(self) -> str:
        """The projected step as the reports show it: '4.19 ms', or '4.19..4.61 ms' where the ends differ."""
        return fmt_range(self.projected_step_low_ns, self.projected_step_high_ns)

    @property
    def gain_display(self) -> str:
        """The throughput gain as the reports show it: '8.0×', or '7.2×..8.0×' where the ends differ."""
        return fmt_span(self.throughput_gain_low, self.throughput_gain_high, lambda x: f"{x:.1f}×")


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


class PhaseVerdict(Model):
    """How one inference phase fares, judged against the service goal its steps bound."""

    phase: str
    """prefill, decode, other or a configured phase."""
    goal: Literal["TTFT", "TPOT"] | None = None
    """The goal the phase's step time bounds: prefill (or context) steps the time to first token, decode (or
    generation) steps the time per output token; null for other phases."""
    primary: str | None = None
    """Category of the phase's costliest finding at warning or above; null when none."""
    rule: str | None = None
    """Rule behind that finding."""
    impact: float | None = Field(None, ge=0, le=1)
    """Its cost as a share of the phase's GPU time."""
    run_impact: float | None = Field(None, ge=0, le=1)
    """Its cost as a share of the run's GPU time."""
    step_count: int = Field(0, ge=0)
    """Steps of the phase (phases.step_count)."""
    judged_alone: bool = False
    """The phase has facts.phase_min_steps steps or more, so its findings are rated by their cost to the phase."""
    line: str
    """One line for people, e.g. 'decode (bounds TPOT): launch-bound, ...'."""


class Verdict(Model):
    """The primary bottleneck."""

    primary: str | None = None
    """Category of the primary bottleneck, or null when none. When a mostly idle GPU's idle time is mostly one traced
    cause whose rule stayed below its thresholds, this is that cause's category while `rule` names the symptom rule
    whose finding carries the evidence."""
    rule: str | None = None
    """Rule behind the verdict (the finding whose evidence the headline quotes)."""
    subject: str | None = None
    phase: str | None = None
    """The phase of the finding behind the verdict, when a rule judged that phase on its own."""
    impact: float | None = None
    """The cost of the finding behind the verdict as a share of the run's GPU time."""
    headline: str
    """One sentence for people."""
    phases: list[PhaseVerdict] = []
    """When the rules judged the inference phases one by one: one verdict per phase, in the order of the `phases`
    fact; empty otherwise."""


class ParamOverride(Model):
    """A non-default setting in force."""

    target: str
    """'rule-id.param', 'rule-id.severity', 'rule-id.enabled' or 'facts.param'."""
    value: Any
    """The value in force."""
    default: Any
    """The default it replaces."""
    origin: str
    """'command line' or the configuration file's path."""


class MetricInfo(Model):
    """A key metric as engine/reports/metrics.py defines it."""

    key: str
    """Metric id, e.g. 'overhead_ratio'; `diagnose compare --fail-on-regression` gates use it."""
    label: str
    unit: str
    """How the value reads: ratio (0-1 as 0.00), share (0-1 as %), ns, count, bytes or rate (per second)."""
    better: Better
    """Which way is an improvement; null when neither is."""


class MetricRow(MetricInfo):
    """One key metric of the profile, with the rule threshold it is judged against."""

    short_label: str
    """The label in the terminal summary."""
    group: str | None
    """Adjacent rows with the same group are shown as one, labelled with it (e.g. 'Gap mean / median')."""
    doc: str
    """What the number is, in words."""
    value: Number | None
    """In the unit of its source column (ns, bytes, 0-1 ratio, count, per second)."""
    display: str
    """The value formatted for people."""
    threshold: float | None = None
    """Where the metric turns bad, in the value's unit: a rule param's effective value (after diagnose.yaml and
    --set) or another metric's value; null when nothing judges it."""
    threshold_display: str | None = None
    op: str | None = None
    """The bad side of the threshold, e.g. '>' (the comparison of the rule the threshold belongs to)."""
    param: str | None = None
    """The rule param holding the threshold, RULE.PARAM (settable with --set)."""
    past: bool | None = None
    """The value is on the bad side of the threshold; null without a threshold or a value."""


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


class Throughput(Model):
    """Tokens/s and time per output token (with --tokens N), and the decode steps (fact `steps`)."""

    tokens: int | None = Field(None, description="Output tokens generated in the profiled run (--tokens).")
    duration_ns: float | None = Field(None, description="Profiled duration the rates are computed over (ns).")
    tokens_per_s: float | None = Field(None, description="tokens / duration.")
    time_per_token_ns: float | None = Field(None, description="Time per output token of a request (ns): the median "
                                                            "decode-step period, each request getting one token per "
                                                            "step; duration / tokens without decode steps.")
    decode_steps: int | None = Field(None, description="Decode steps, when steps were found to be decode by their "
                                                       "NVTX text or their shape, or, with --tokens, every step of a "
                                                       "run whose steps have no phase and none looks like a prefill.")
    step_time_ns: float | None = Field(None, description="Median decode-step period, start to the next step's start "
                                                         "(ns): a lower bound on the time per output token.")
    steps_per_s: float | None = Field(None, description="Decode steps per second at the median step period.")
    inferred: bool | None = Field(None, description="True when the decode steps were inferred from their shape, "
                                                    "not named by NVTX text.")


class WindowShare(Model):
    """One part of a GPU's window: kernels running, only copies running, or idle time of one cause."""

    key: str = Field(description="kernels, copies, or an idle cause: sync, allocation, uvm, launch, host, gpu-side, "
                                 "other (docs/measures.md \"Where the idle time goes\").")
    label: str
    short: str = Field(description="Short label, after \"idle:\" for the idle causes (terminal).")
    ns: int = Field(ge=0, description="Time of the window in this part (ns).")
    share: float = Field(ge=0, le=1, description="ns / the window.")
    idle: bool = Field(description="True for the idle causes.")


class StartUp(Model):
    """The one-off start-up the capture opens with (the `startup` fact): model load, then warm-up."""

    found_by: Literal["nvtx", "shape"] = Field(description="nvtx: start-up ranges (init/load, warm-up/compile/graph "
                                                           "capture); shape: a burst of host-to-device copies before "
                                                           "the first kernel.")
    startup_ns: int = Field(ge=0, description="From the first CUDA call to the end of the start-up (ns).")
    startup_fraction: float = Field(ge=0, le=1, description="startup_ns / the traced span.")
    load_ns: int = Field(ge=0, description="Length of the model load (ns).")
    load_bytes: int = Field(ge=0, description="Bytes copied host-to-device during the load.")
    load_copy_count: int = Field(ge=0, description="Host-to-device copies during the load.")
    load_gbps: float | None = Field(None, description="Their effective bandwidth (GB/s).")
    pageable_share: float | None = Field(None, ge=0, le=1, description="Share of those bytes read from pageable "
                                                                       "host memory.")
    alloc_count: int = Field(ge=0, description="Device-memory allocation calls during the start-up.")
    warmup_ns: int = Field(ge=0, description="Length of the warm-up ranges (ns); 0 without any.")
    warmup_kernel_count: int = Field(ge=0, description="Kernels and graph replays run during the warm-up.")
    graph_capture_count: int = Field(ge=0, description="CUDA-graph captures and instantiations during the start-up.")
    steady_ns: int = Field(ge=0, description="The steady window after the start-up (ns).")
    judged_after: bool = Field(description="True when the rules judged only the steady window; false when the "
                                           "capture is only start-up and was judged whole.")
    line: str = Field(description="One sentence for people: what the start-up did and what the verdict judges.")


class GpuWindow(Model):
    """Where one GPU's window went; the parts add up to the window."""

    device_id: int
    window_ns: int
    parts: list[WindowShare]


class ClassShare(Model):
    """One operation class of a GPU's time (the operation_classes fact)."""

    op_class: str = Field(description="Operation class (rules/vocabulary/operation_classes.yaml), memcpy, memset or "
                                      "other.")
    share: float = Field(ge=0, le=1, description="Share of the GPU's time in kernels, copies and memsets.")
    total_ns: int = Field(ge=0, description="Sum of the class's durations (ns).")
    op_count: int = Field(ge=0, description="Kernels (copies, memsets) of the class.")
    mean_ns: float | None = Field(None, description="Mean duration (ns).")
    top_kernels: list[dict[str, Any]] = Field(default_factory=list, description="Its heaviest kernels: {name, "
                                                                                "calls, total_ns, share}.")


class OperationBreakdown(Model):
    """Where one GPU's time went by operation, over the run or one phase; the classes in descending time."""

    phase: str | None = Field(None, description="The inference phase, or null for the whole run (judged whole).")
    device_id: int
    total_ns: int = Field(ge=0, description="The GPU's time in kernels, copies and memsets (sum of durations, ns).")
    classes: list[ClassShare]
    line: str = Field(description="One line for people: 'decode: attention 61 % · gemm 22 % · norm 6 %'.")


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
