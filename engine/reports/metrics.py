"""The key metrics, defined once. Every renderer (terminal, Markdown, HTML, JSON `key_metrics`) and `diagnose
compare` (its metric deltas, its verdict and the --fail-on-regression gate names) read METRICS; no template lists
a metric.

To add a key metric whose value a fact already computes, add a Metric below: `source` names the fact column
(FACT.COLUMN, first row of a reported fact; `summary` is the report's `metrics`), `throughput.FIELD` or
`profile.FIELD`. Give it a `threshold` (RULE.PARAM) when a rule judges the same number, and the reports show the
rule's effective value (after diagnose.yaml and --set) and whether the profile is past it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..diagnosis.ruleset import ParamThreshold, RuleSet
from ..model.report import Better, MetricRow, Report, Throughput
from ..base.units import fmt_value

Unit = Literal["ratio", "share", "percent", "ns", "count", "bytes", "rate"]


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: Unit               # ratio: 0-1 shown as 0.00; share: 0-1 shown as %; rate: per second
    better: Better           # "higher", "lower" or None: reported, never judged
    source: str | tuple[str, ...]  # several: the first non-zero value wins
    doc: str = ""
    short_label: str = ""    # terminal label, when the label is too long for its grid
    group: str | None = None  # adjacent metrics of one group share a row labelled with it
    threshold: str | None = None  # RULE.PARAM: the rule that judges the same number
    versus: str | None = None     # or another metric: past when this one is worse than it
    missing: str = "n/a"     # shown when the profile has no value
    report: bool = True      # a row of the single-profile report's key metrics
    compare: bool = True     # compared (and gated) by `diagnose compare`
    headline: bool = False   # decides the comparison's verdict before the other metrics
    optional: bool = False   # a report row only when the profile has a value (e.g. GPU metrics were captured)

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,) if isinstance(self.source, str) else self.source

    @property
    def is_throughput(self) -> bool:
        """Computed from the profile's duration, --tokens and the decode steps (report.throughput)."""
        return any(s.startswith("throughput.") for s in self.sources)


_NO_TOKENS = "n/a (--tokens N)"
_NO_STEPS = "n/a (no decode steps)"

METRICS: tuple[Metric, ...] = (
    Metric("gpu_utilization", "GPU utilisation", "share", "higher", "summary.gpu_utilization",
           doc="share of each GPU's window with a kernel or CUDA-graph replay running", headline=True,
           threshold="low-utilization.min_utilization"),
    Metric("copy_only_fraction", "Copies only, no kernel", "share", "lower", "summary.copy_only_fraction",
           doc="share of each GPU's window with only copies or memsets running", short_label="Copies only"),
    Metric("gpu_active_fraction", "Any GPU activity", "share", None, "summary.gpu_active_fraction",
           doc="share of each GPU's window with kernels, copies or memsets running"),
    Metric("overhead_ratio", "Launch overhead ratio", "ratio", "lower", "summary.overhead_ratio",
           doc="gap / (kernel + gap)", short_label="Overhead ratio", headline=True,
           threshold="launch-bound.max_overhead_ratio"),
    Metric("kernel_count", "Kernels", "count", None, "summary.kernel_count", doc="kernels and graph replays"),
    Metric("mean_kernel_ns", "Mean kernel duration", "ns", None, "summary.mean_kernel_ns",
           doc="kernels and graph replays, as counted above", short_label="Mean kernel"),
    Metric("mean_gap_ns", "Mean gap between kernels", "ns", "lower", "summary.mean_gap_ns",
           doc="idle time between consecutive kernels on a GPU", group="Gap mean / median"),
    Metric("median_gap_ns", "Median gap between kernels", "ns", "lower", "summary.median_gap_ns",
           group="Gap mean / median", versus="mean_kernel_ns"),
    Metric("launch_calls", "Launch calls", "count", "lower", "summary.launch_calls",
           doc="cudaLaunchKernel, cuLaunchKernel(Ex) and graph launches"),
    Metric("launch_mean_ns", "Launch latency (mean)", "ns", "lower", "summary.launch_mean_ns",
           doc="CPU time of a launch call", group="Launch latency mean / median"),
    Metric("launch_p50_ns", "Launch latency (median)", "ns", "lower", "summary.launch_p50_ns",
           group="Launch latency mean / median", compare=False),
    Metric("sync_calls", "Synchronisations", "count", "lower", "sync_overview.sync_calls", report=False),
    Metric("gpu_active_ns", "GPU active time", "ns", None, "summary.gpu_active_ns",
           doc="sum of the durations of kernels and graph replays"),
    Metric("cpu_api_ns", "CPU time in CUDA API calls", "ns", None, "summary.cpu_api_ns",
           short_label="CPU time in CUDA"),
    Metric("pcie_ns", "Host-device copy time", "ns", "lower", "summary.pcie_ns",
           doc="sum of the durations of host-device copies (HtoD, DtoH, HtoA, AtoH), pinned and pageable"),
    Metric("pcie_bytes", "PCIe volume", "bytes", None, "summary.pcie_bytes", compare=False,
           doc="bytes of host-device copies; device-to-device and peer copies, memsets and unified-memory "
               "migrations are not counted"),
    Metric("pinned_bytes", "PCIe volume from/to pinned memory", "bytes", None, "summary.pinned_bytes",
           doc="host-device bytes from or to pinned host memory", group="PCIe pinned / pageable", compare=False),
    Metric("pageable_bytes", "PCIe volume from/to pageable memory", "bytes", "lower", "summary.pageable_bytes",
           doc="from or to pageable host memory, which the driver stages through a pinned buffer",
           group="PCIe pinned / pageable", compare=False),
    Metric("dtod_bytes", "Device-to-device copy volume", "bytes", None, "summary.dtod_bytes",
           doc="bytes of copies within a GPU, DtoD", group="D2D / peer copy volume", compare=False),
    Metric("peer_bytes", "Peer copy volume", "bytes", None, "summary.peer_bytes",
           doc="between GPUs, PtoP", group="D2D / peer copy volume", compare=False),
    Metric("memset_count", "Memsets", "count", None, "summary.memset_count",
           doc="memset operations, counted apart from copies", compare=False),
    Metric("sm_active_pct", "SMs Active (GPU metrics)", "percent", None, "gpu_metrics_summary.sm_active_pct",
           doc="share of SMs with a warp resident while kernels ran: residency, not throughput",
           group="SM active / issue", optional=True, compare=False),
    Metric("sm_issue_pct", "SM Issue (GPU metrics)", "percent", None, "gpu_metrics_summary.sm_issue_pct",
           doc="share of SM cycles that issued an instruction while kernels ran: how busy the SMs really are",
           group="SM active / issue", optional=True, compare=False),
    Metric("tensor_active_pct", "Tensor Active (GPU metrics)", "percent", None,
           "gpu_metrics_summary.tensor_active_pct", doc="share of SM cycles with the tensor cores busy",
           group="Tensor / DRAM", optional=True, compare=False),
    Metric("dram_pct", "DRAM bandwidth (GPU metrics)", "percent", None, "gpu_metrics_summary.dram_pct",
           doc="read and write, share of peak, while kernels ran", group="Tensor / DRAM", optional=True,
           compare=False),
    Metric("duration_ns", "Profiled duration", "ns", None, ("profile.duration_ns", "summary.duration_ns"),
           report=False),
    Metric("tokens_per_s", "Output tokens per second", "rate", "higher", "throughput.tokens_per_s",
           short_label="Output tokens/s", missing=_NO_TOKENS, headline=True),
    Metric("time_per_token_ns", "Time per output token", "ns", "lower", "throughput.time_per_token_ns",
           headline=True),
    Metric("decode_steps", "Decode steps", "count", None, "throughput.decode_steps",
           missing=_NO_STEPS),
    Metric("step_time_ns", "Decode step time (median)", "ns", "lower", "throughput.step_time_ns",
           short_label="Decode step time", missing=_NO_STEPS, headline=True),
    Metric("steps_per_s", "Decode steps per second", "rate", "higher", "throughput.steps_per_s", report=False,
           headline=True),
)
BY_KEY = {m.key: m for m in METRICS}
# One compared metric per NVTX phase: the time in its ranges (or its kernels' time without ranges).
PHASE_KEY = re.compile(r"^phase_(\w+)_ns$")


def definition(key: str) -> Metric:
    """The metric `key`, a phase_<name>_ns metric included."""
    if key in BY_KEY:
        return BY_KEY[key]
    phase = PHASE_KEY.match(key)
    return Metric(key, f"Time in phase {phase.group(1) if phase else key}", "ns", None, "phases.range_ns")


def compared() -> list[Metric]:
    return [m for m in METRICS if m.compare]


# ------------------------------------------------------------------------------------------------------------
# Values
# ------------------------------------------------------------------------------------------------------------
def number(v: Any) -> float | None:
    """A finite number, else None."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _lookup(source: str, report: Report, throughput: Throughput | None) -> Any:
    where, _, name = source.partition(".")
    if where == "throughput":
        return getattr(throughput, name) if throughput is not None else None
    if where == "profile":
        return getattr(report.profile, name)
    rows = report.facts.get(where) or []
    return rows[0].get(name) if rows else None


def raw_value(metric: Metric, report: Report, throughput: Throughput | None = None) -> Any:
    """The metric's value in `report` as its source holds it (None where the profile has no such number).
    `throughput`: rates other than the report's own (compare computes them with its --tokens)."""
    rates = report.throughput if throughput is None else throughput
    value = None
    for source in metric.sources:
        value = _lookup(source, report, rates)
        if value:
            return value
    return value


def phase_values(report: Report) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for p in report.facts.get("phases") or []:
        name = re.sub(r"\W+", "_", str(p.get("phase") or "other")).lower()
        out[f"phase_{name}_ns"] = number(p.get("range_ns")) or number(p.get("kernel_time_ns"))
    return out


# ------------------------------------------------------------------------------------------------------------
# Formatting
# ------------------------------------------------------------------------------------------------------------
# A metric's unit -> the display unit of engine/base/units.py fmt_value (a metric 'ratio' is shown as 0.00, a 'share'
# as a percentage).
_DISPLAY_UNIT = {"ratio": "plain", "share": "ratio", "percent": "percent", "ns": "ns", "bytes": "bytes",
                 "rate": "per_s", "count": "number"}


def fmt_metric(value: float | None, unit: str) -> str:
    return fmt_value(value, _DISPLAY_UNIT[unit])


def fmt_change(change: float | None, relative: float | None, unit: str) -> str:
    if change is None:
        return "n/a"
    if unit == "share":
        absolute = f"{change * 100:+.1f} pt"
    elif unit == "percent":
        absolute = f"{change:+.1f} pt"
    elif unit == "ratio":
        absolute = f"{change:+.2f}"
    else:
        absolute = ("+" if change >= 0 else "-") + fmt_metric(abs(change), unit)
    if relative is None:
        return absolute
    return f"{absolute}, {relative * 100:+.0f} %"


# ------------------------------------------------------------------------------------------------------------
# Thresholds and the report's rows
# ------------------------------------------------------------------------------------------------------------
_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def rule_thresholds(rules: RuleSet) -> dict[str, ParamThreshold]:
    """The value in force of each rule param a metric names (diagnose.yaml and --set applied, as the rule set
    resolved them); a rule that is not loaded or is disabled judges nothing."""
    out = {}
    for metric in METRICS:
        threshold = rules.threshold(metric.threshold) if metric.threshold is not None else None
        if threshold is not None:
            out[threshold.param] = threshold
    return out


def key_metric_rows(report: Report, thresholds: Mapping[str, ParamThreshold]) -> list[MetricRow]:
    """The report's key metrics (none when the profile ran no kernels). Throughput rows appear when the report
    has a throughput (--tokens or decode steps)."""
    if not report.metrics.get("kernel_count"):
        return []
    shown = [m for m in METRICS if m.report and (report.throughput is not None or not m.is_throughput)]
    values = {m.key: raw_value(m, report) for m in shown}
    shown = [m for m in shown if not m.optional or number(values[m.key]) is not None]
    rows = []
    for m in shown:
        value = values[m.key]
        limit, op, param, limit_display = None, None, None, None
        if m.threshold is not None and m.threshold in thresholds:
            t = thresholds[m.threshold]
            # the rule's own comparison; a param no condition reads is bad on the metric's worse side
            limit, op, param = t.value, t.op or ("<" if m.better == "higher" else ">"), t.param
            limit_display = fmt_metric(limit, m.unit)
        elif m.versus is not None and number(values.get(m.versus)) is not None:
            other = BY_KEY[m.versus]
            limit, op = number(values[m.versus]), "<" if m.better == "higher" else ">"
            limit_display = f"{fmt_metric(limit, m.unit)} ({other.label.lower()})"
        past = None
        measured = number(value)
        if limit is not None and op is not None and measured is not None:
            past = _OPS[op](measured, limit)
        display = m.missing if number(value) is None else fmt_metric(number(value), m.unit)
        rows.append(MetricRow(key=m.key, label=m.label, unit=m.unit, better=m.better,
                              short_label=m.short_label or m.label, group=m.group, doc=m.doc,
                              value=value if number(value) is not None else None,
                              display=display, threshold=limit, threshold_display=limit_display, op=op,
                              param=param, past=past))
    return rows
