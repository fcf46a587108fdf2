"""What a fix would buy: per cause finding, the step time and steps/s if its cause were removed, and what a larger
batch would buy.

The replay itself is SQL (facts _whatif_steps and whatif_replay): following Daydream (Zhu et al., "Daydream:
Accurately Estimating the Efficacy of Optimizations for DNN Training", USENIX ATC 2020), the measured schedule is
the dependency graph, a transform re-times the edges of one cause, and the schedule is replayed, never a total
subtracted. Here each device's operations in start order form a chain; every idle gap has one cause (_idle_gaps)
and a transform re-times the gaps of its causes while every other edge keeps its measured delay. This module
picks the transform a rule names (`what_if:` in its YAML), reads the replayed medians and builds the WhatIf and
BatchWhatIf objects of the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..facts.compute import FactSet
from ..pack.stacks import bundled_stacks
from ..model.findings import Finding
from ..model.measures import Throughput
from ..model.whatif import BatchWhatIf, WhatIf
from .whatif_notes import cost_interval, node_gap_note, pinned_note, replay_rows, sample_assumption, sample_note
from ..base.units import fmt_range, fmt_ratio, fmt_span, fmt_step
from ..base.vocabulary import Kind, Severity

FACT = "whatif_replay"


@dataclass(frozen=True)
class Transform:
    column: str  # whatif_replay column holding the median replayed step
    label: str
    edges: str  # the edges it re-times and the constraints it keeps, in words


TRANSFORMS: dict[str, Transform] = {
    "launch-gaps": Transform(
        "launch_gaps_step_ns", "without launch gaps",
        "CUDA graphs: launch and GPU-side gaps after a step's first operation become the per-node replay gap; the "
        "gap before each step's first operation (one graph launch, the host's scheduling) and every sync, copy and "
        "host gap stay as measured. Graphs also pad the batch to a captured size, and scheduling, sampling and "
        "detokenising stay on the CPU."),
    "host-gaps": Transform(
        "host_gaps_step_ns", "with host work overlapped",
        "Async scheduling: host gaps overlap the previous step's GPU work and become the per-node gap, but a step "
        "cannot be shorter than the host's own work per step (the step's thread outside synchronisations), so the "
        "projected step is max(GPU chain, host work)."),
    "sync": Transform(
        "sync_step_ns", "without the syncs",
        "Only the GPU idle time the syncs caused (drain, wake-up, relaunch) goes: sync-caused gaps become the "
        "per-node gap, not the time the CPU spent blocked. A sync that carries a data dependency (the sampled "
        "token's .item()) moves rather than vanishes, unless the scheduler runs ahead asynchronously."),
    "allocation": Transform(
        "allocation_step_ns", "without allocation in the loop",
        "A caching allocator or pool: allocation-caused gaps become the per-node gap; the rest stays as measured."),
    "copies-pinned": Transform(
        "copies_pinned_step_ns", "with pinned host memory",
        "Pageable host-device copies run at the pinned bandwidth; their gaps and every other edge stay as "
        "measured."),
    "fused": Transform(
        "fused_step_ns", "with the glue fused",
        "Fusion: each repeated run of k elementwise, normalisation, activation or reduction kernels (the fusion "
        "candidates) becomes one kernel taking 1/k of the run's time, as such kernels are memory-bound and the "
        "fused kernel reads and writes the run's tensor once instead of k times (a cast, of a tensor of its own, "
        "keeps its time); it starts when the run's first "
        "kernel could, and the run's other launches go. Every other operation keeps its duration and starts no "
        "earlier than the host issued it, so a host that cannot issue faster keeps the step as long."),
}

# A batch projection is made by default when the primary finding's transform is one of these (fixed per-step costs
# a larger batch amortises) and the batch is at most SMALL_BATCH (or unknown).
BATCH_TRANSFORMS = ("launch-gaps", "host-gaps")
# ... and the run serves an LLM: a serving stack, steps in an inference phase, or output tokens given (--tokens).
# Elsewhere (a stencil loop, a CNN) "batch" and "time per output token" mean nothing the profile can vouch for, so
# only an explicit --what-if batch=N projects, in steps, not tokens.
INFERENCE_PHASES = ("prefill", "decode")
SMALL_BATCH = 4
DEFAULT_BATCH = 8
# Decode GEMMs read the same weights whatever the batch, so they stay nearly flat until they turn compute-bound
# (Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023): the low end
# keeps them flat, the high end lets them grow 5 % per extra current batch (facts.whatif_gemm_growth, whose
# default this is: the replay itself is SQL).
GEMM_GROWTH_HIGH = 0.05
# Fits of step time against batch size need this many steps and two sizes; no projection, per finding or of the
# batch, is made from fewer steps (a one-step estimate says too little).
FIT_MIN_STEPS = 5
MIN_STEPS = 5  # as facts.whatif_min_steps: fewer steps on a GPU replay its whole window
# The largest batch projected (`--what-if batch=N`): far beyond any measured step.
MAX_BATCH = 4096


def _factor(x: float) -> str:
    return f"{x:.1f}×" if x < 10 else f"{x:.0f}×"


def _pick(rows: list[dict[str, Any]], device_id: Any, phase: str | None) -> dict[str, Any] | None:
    """The row of `device_id` (else the device with the longest measured time) for `phase` (else all steps)."""
    if not rows:
        return None
    devices = {r["device_id"] for r in rows}
    if device_id not in devices:
        device_id = max((r for r in rows if r.get("phase") is None),
                        key=lambda r: (r.get("steps") or 0) * (r.get("measured_step_ns") or 0),
                        default=rows[0])["device_id"]
    mine = [r for r in rows if r["device_id"] == device_id]
    return (next((r for r in mine if phase is not None and r.get("phase") == phase), None)
            or next((r for r in mine if r.get("phase") is None), None))


def _where(row: dict[str, Any], basis: str) -> str:
    if basis == "window":
        return f"GPU {row['device_id']}'s window"
    return f"{row['phase']} step" if row.get("phase") else "step"


# A replay gains when it shortens the step by at least this factor; below it the line says "no measurable gain".
MIN_GAIN = 1.01
# The host's own work binds the host-gaps replay when it takes at least this share of the replayed step: overlapping
# the host work then buys (almost) nothing, and only making that work faster shortens the step.
HOST_BINDS = 0.75


@dataclass(frozen=True)
class Saving:
    """One finding's saving model: the replay of its rule's transform, capped by the share of time the rule
    measured, and the cost the finding states. The finding's cost, the verdict's "costs ≈X %" and the what-if line
    all read this one object, so they cannot disagree (docs/measures.md "What a fix would buy")."""

    transform: str
    row: dict[str, Any]
    basis: Literal["steps", "window"]
    measured_ns: int
    projected_ns: int
    """The replayed step, never shorter than the measured step without the rule's whole share."""
    slow_ns: int | None
    share: float | None
    """The share of GPU time the rule measured (its impact column): the most removing the cause can give."""
    cost: float
    """What the finding states as its cost: the replay's saving (1 - projected/measured) when the replay gains or
    finds nothing to gain; the rule's share when the fix the replay models is not the one that helps (why_not)."""
    capped: bool
    """The replay promised more than the share; the projection was cut back to it."""
    why_not: str | None
    """Why the replayed fix gains little while the cause costs more, and which fix would gain."""
    cost_interval: tuple[float, float] | None = None
    """The 95 % interval of `cost` when it is the saving of a replay over a sample of the steps (whatif_sample):
    1 - the projected median's high end over the measured median's low end, to 1 - its low end over their high end;
    None when the cost is exact (every step replayed, or the cost is the share the rule measured)."""

    @property
    def speedup(self) -> float | None:
        return self.measured_ns / self.projected_ns if self.projected_ns > 0 else None

    @property
    def gains(self) -> bool:
        return self.speedup is not None and self.speedup >= MIN_GAIN


def saving(transform: str, row: dict[str, Any] | None, share: float | None) -> Saving | None:
    """The saving model of a finding whose rule names `transform`, on its whatif_replay row, with the share of time
    the rule measured; None when the row projects nothing (no row, no time, a handful of steps)."""
    if row is None:
        return None
    spec = TRANSFORMS[transform]
    measured, projected = row.get("measured_step_ns"), row.get(spec.column)
    if not measured or projected is None:
        return None
    basis: Literal["steps", "window"] = "window" if row.get("source") == "window" else "steps"
    if basis == "steps" and (row.get("steps") or 0) < MIN_STEPS:
        return None  # say nothing rather than project from a handful of steps
    measured, projected = int(measured), min(int(projected), int(measured))
    slow = None
    if transform == "copies-pinned" and not row.get("pinned_measured") and row.get("copies_pinned_slow_step_ns"):
        slow = max(min(int(row["copies_pinned_slow_step_ns"]), measured), projected)
    capped = False
    if share is not None:
        # Removing the cause cannot give more than the time the rule charges to it.
        floor = round(measured * (1 - min(max(share, 0.0), 1.0)))
        if projected < floor:
            projected, capped = floor, True
            slow = max(slow, projected) if slow is not None else None
    replayed = 1 - projected / measured
    why_not = _why_not(transform, row, basis, measured, projected, share)
    cost = share if why_not is not None and share is not None else replayed
    interval = None if why_not is not None or capped else cost_interval(row, spec.column, share)
    return Saving(transform=transform, row=row, basis=basis, measured_ns=measured, projected_ns=projected,
                  slow_ns=slow, share=share, cost=max(0.0, min(1.0, cost)), capped=capped, why_not=why_not,
                  cost_interval=interval)


def _why_not(transform: str, row: dict[str, Any], basis: str, measured: int, projected: int,
             share: float | None) -> str | None:
    """Why the fix the replay models buys less than the cause costs, when the evidence says which other fix would
    buy it: the host's own work is the step (host-gaps), or the copies already run pinned (copies-pinned). None
    otherwise: then the replay's saving is the finding's cost."""
    if share is None or share <= 1 - projected / measured + 0.05:
        return None  # the replay buys (about) what the cause costs
    where = _where(row, basis)
    host = row.get("host_work_ns") or 0
    if transform == "host-gaps" and host >= HOST_BINDS * projected:
        return (f"the host's own work, {fmt_step(host)} per {where}, sets the pace: overlapping it shortens the "
                f"{where} at most to that, and only making the host work itself faster shortens it further")
    if transform == "copies-pinned" and row.get("pinned_measured"):
        return (f"the copies already run pinned at {row.get('pinned_gbps') or 0:.1f} GB/s, so pinning gains "
                f"nothing; their time is the cost: copy fewer bytes, keep the data on the GPU, or overlap the copies "
                f"with kernels on another stream")
    if basis != "steps" or measured / projected >= MIN_GAIN:
        return None  # the whole window was replayed, or the replay gains: what it buys is the cost
    if transform == "fused":
        return (f"the host, not the GPU, sets the {where}'s pace: fused kernels would still wait for its launches; "
                f"make the host issue faster first (CUDA graphs, a compiler that fuses and captures)")
    return (f"the median {where} holds little of it: the {fmt_ratio(share, 0)} the rule measured lies outside the "
            f"repeating steps (before, between or after them), where the fix shortens the capture, not a {where}")


def what_if(transform: str, row: dict[str, Any], throughput: Throughput | None = None,
            share: float | None = None) -> WhatIf | None:
    """The projection of `transform` on one whatif_replay row, capped by the rule's `share` (saving())."""
    model = saving(transform, row, share)
    if model is None:
        return None
    spec = TRANSFORMS[transform]
    measured, projected, slow, basis = model.measured_ns, model.projected_ns, model.slow_ns, model.basis
    speedup = model.speedup
    steps_ps = 1e9 / measured if basis == "steps" else None
    tokens = throughput.tokens_per_s if throughput is not None else None
    assumptions = [spec.edges, node_gap_note(row)]
    if transform == "copies-pinned":
        assumptions.append(pinned_note(row))
    if model.capped and share is not None:
        assumptions.append(f"Capped at the {fmt_ratio(share, 0)} of GPU time the rule charges to the cause: the "
                           f"replay alone would promise more than removing the cause can give.")
    if tokens is not None:
        assumptions.append("Tokens/s scales with the speed-up: the whole run is taken to be made of such steps.")
    where = _where(row, basis)
    per = "steps/s" if basis == "steps" else "faster"
    gain = f"~{_factor(speedup)} {per}" if model.gains and speedup is not None else "no measurable gain"
    if slow is not None and slow > projected and model.gains and speedup is not None:
        gain = f"~{fmt_span(measured / slow, speedup, _factor)} {per}"
    if model.why_not is not None:
        gain += f": {model.why_not}"
    elif not model.gains and share is not None and share >= 0.005:
        gain += (f": the {fmt_ratio(share, 0)} the rule measured is off the GPU's critical path, so removing it "
                 f"alone does not shorten the {where}")
    # a projection cut back to the rule's share is no replayed median: only the measured step's interval applies
    sample = sample_note(row, None if model.capped else spec.column,
                         "copies_pinned_slow_step_ns" if slow is not None else None)
    if sample is not None:
        gain += f"; {sample}"
        assumptions.append(sample_assumption(row) or sample)
    to = fmt_range(projected, slow) if slow is not None and slow > projected else fmt_step(projected)
    line = f"{spec.label}: {where} {fmt_step(measured)} → ~{to} ({gain})"
    return WhatIf(transform=transform, label=spec.label, device_id=row.get("device_id"), phase=row.get("phase"),
                  basis=basis, step_source=None if basis == "window" else row.get("source"),
                  steps=int(row.get("steps") or 0), measured_step_ns=measured, projected_step_ns=projected,
                  projected_step_slow_ns=slow,
                  speedup=speedup, measured_steps_per_s=steps_ps,
                  projected_steps_per_s=steps_ps * speedup if steps_ps and speedup else None,
                  measured_tokens_per_s=tokens,
                  projected_tokens_per_s=tokens * speedup if tokens and speedup else None,
                  why_not=model.why_not, assumptions=assumptions, line=line)


def replay_row(facts: FactSet, device_id: Any, phase: str | None) -> dict[str, Any] | None:
    """The whatif_replay row a finding on `device_id` in `phase` is projected on (_pick)."""
    return _pick(replay_rows(facts), device_id, phase)


def attach(findings: list[Finding], transforms: dict[str, tuple[str, str | None]], facts: FactSet,
           throughput: Throughput | None = None) -> None:
    """Set `what_if` on every cause finding at warning or above whose rule names a transform (`transforms`: rule
    id -> (transform, the rule's impact column)), from the same saving model that set the finding's cost."""
    for f in findings:
        transform, impact_column = transforms.get(f.rule, (None, None))
        if transform is None or not f.severity.at_least(Severity.WARNING) or f.kind != Kind.CAUSE:
            continue
        row = replay_row(facts, (f.row or {}).get("device_id"), f.phase)
        if row is not None:
            f.what_if = what_if(transform, row, throughput, share_of(f.row, impact_column))


def share_of(row: dict[str, Any] | None, impact_column: str | None) -> float | None:
    """The share of GPU time a rule measured on its row (its impact column), clamped to 0-1."""
    value = (row or {}).get(impact_column) if impact_column else None
    return None if value is None else max(0.0, min(1.0, float(value)))


def serves_llm(stack: str | None, facts: FactSet, tokens: int | None) -> bool:
    """Whether the run serves an LLM: a serving stack, steps in prefill or decode, or output tokens given."""
    steps = facts.rows("steps") if "steps" in facts.results else []
    return (stack in (facts.stacks or bundled_stacks()).serving_keys() or bool(tokens)
            or any(r.get("phase") in INFERENCE_PHASES and (r.get("step_count") or 0) > 0 for r in steps))


def batch_projection(facts: FactSet, batch: int | None, primary: Finding | None,
                     primary_transform: str | None, serving: bool = True) -> BatchWhatIf | None:
    """The projection of `batch` requests per step (`--what-if batch=N`), or by default when the run serves an LLM
    (`serving`, serves_llm), the primary finding's transform is a fixed per-step cost and the batch is small or
    unknown; None otherwise."""
    rows = replay_rows(facts)
    device = (primary.row or {}).get("device_id") if primary is not None else None
    row = _pick(rows, device, "decode") or _pick(rows, device, primary.phase if primary else None)
    # a whole-window row is no step: no per-step projection; nor from a handful of steps
    if (row is None or not row.get("measured_step_ns") or row.get("source") == "window"
            or (row.get("steps") or 0) < MIN_STEPS):
        return None
    current = row.get("batch_median")
    replayed = row.get("batch_factor")
    # the batch the replay (_whatif_steps, facts.whatif_batch) ran: --what-if batch=N sets it, else its default
    replayed_batch = round(replayed * (current or 1)) if replayed else None
    default = (None if not serving or primary_transform not in BATCH_TRANSFORMS
               or (current is not None and current > SMALL_BATCH) else DEFAULT_BATCH)
    requested = batch is not None
    if batch is None:
        if default is None:
            return None
        batch = replayed_batch or default
    projection = _project(row, batch, current, serving, replayed_batch == batch)
    if projection is None or not requested:
        return projection
    # An option the user passes visibly does something (docs/reports.md "One story per report"): the line names
    # the request, and says so when it is the projection the report makes by default.
    asked = f"--what-if batch={batch}" + (", the default projection" if batch == default else "")
    label, _, rest = projection.line.partition(": ")
    return projection.model_copy(update={"line": f"{label} ({asked}): {rest}"})


def _project(row: dict[str, Any], batch: int, current: float | None, serving: bool = True,
             replayed: bool = True) -> BatchWhatIf | None:
    measured = float(row["measured_step_ns"])
    factor = batch / current if current else float(batch)
    if factor <= 1:
        return None
    where = f"{row['phase']} step" if row.get("phase") else "step"
    known = (f"The steps carry their batch (median {current:g} requests)." if current
             else f"The profile does not record the batch size: projected as {batch} × the current batch.")
    fit = (row.get("fit_slope_ns") is not None and (row.get("batch_sizes") or 0) >= 2
           and (row.get("steps") or 0) >= FIT_MIN_STEPS and current)
    method: Literal["model", "fit"]
    if fit and current:  # `fit` holds only with a current batch; said again for the type checker
        slope, intercept = float(row["fit_slope_ns"]), float(row["fit_intercept_ns"])
        now = max(intercept + slope * current, 1.0)
        low = high = max(intercept + slope * batch, 1.0)
        method = "fit"
        assumptions = [known, f"Step time fitted against batch size by least squares over {row['steps']} steps "
                              f"({fmt_step(intercept)} + {fmt_step(slope)} per request, "
                              f"R² {row.get('fit_r2') or 0:.2f}); extrapolated beyond the sizes measured."]
    else:
        if not replayed or row.get("batch_low_step_ns") is None:
            return None  # the replay ran another batch: no projection rather than a wrong one
        now = measured
        kernels = float(row.get("kernel_step_ns") or 0)
        attention = min(float(row.get("attention_step_ns") or 0), kernels)
        other = kernels - attention
        low, high = float(row["batch_low_step_ns"]), float(row["batch_high_step_ns"])
        low, high = min(low, high), max(low, high)
        method = "model"
        assumptions = [
            known,
            "Each step's chain of GPU operations is replayed with the new durations: an operation starts once the "
            "host had issued it (its measured start, when the GPU waited for it) and the one before it ended. Idle "
            "gaps the host's launches left are filled by longer kernels, not added to them; the host's own work is "
            "taken not to grow with the batch.",
            f"Attention kernels ({fmt_step(attention)} per median step, the operation class attention: flash_fwd, "
            f"paged_attention, fmha, BatchDecodeWith... by name) grow with the total KV length, × {factor:g}.",
            f"The other kernels ({fmt_step(other)}, decode GEMMs) stay flat (low) to +{GEMM_GROWTH_HIGH * 100:.0f} % "
            f"per extra current batch (high), until they turn compute-bound; copies stay as measured.",
            "KV-cache capacity may cap the batch; graphs pad it to a captured size.",
        ]
        assumptions += [note for note in [sample_assumption(row)] if note]
        graphs = float(row.get("graph_step_ns") or 0)
        if graphs > 0:
            assumptions.append(f"{fmt_step(graphs)} per step is CUDA-graph replays traced whole (graph trace mode), "
                               f"whose kernels and their attention share are not visible: counted as the other "
                               f"kernels; capture with --cuda-graph-trace=node to split them.")
    gain_low, gain_high = factor * now / high, factor * now / low
    rise_low, rise_high = low / now - 1, high / now - 1
    label = f"batch {batch}" if current else f"batch {batch}× current"
    # A range whose ends print alike is one value (the kernels fill the launch gaps at both ends of the model).
    span = fmt_step(low) if method == "fit" else fmt_range(low, high)
    gains = f"~{fmt_span(gain_low, gain_high, lambda x: f'{x:.1f}×')}"
    rises = fmt_span(rise_low * 100, rise_high * 100, lambda x: f"{x:.0f}") + " %"
    rate, latency = ("tokens/s", "TPOT") if serving else ("work per second", "the step time")
    # below half a per cent both ways the longer kernels fit in the step's idle gaps: nothing to rise
    cost = (f"so {latency} stays as measured" if max(abs(rise_low), abs(rise_high)) < 0.005
            else f"so {latency} rises {rises}")
    line = (f"{label}: {gains} {rate}; {where} {fmt_step(now)} → {span}, {cost}"
            f"{' (least-squares fit)' if method == 'fit' else ''}")
    note = sample_note(row)
    line += f"; {note}" if note else ""
    return BatchWhatIf(batch=batch, current_batch=current, factor=factor, method=method,
                       device_id=row.get("device_id"), phase=row.get("phase"), measured_step_ns=int(now),
                       projected_step_low_ns=int(low), projected_step_high_ns=int(high),
                       throughput_gain_low=gain_low, throughput_gain_high=gain_high, tpot_rise_low=rise_low,
                       tpot_rise_high=rise_high, assumptions=assumptions, line=line)
