"""The per-phase step statistics as every format shows them (fact `steps`, docs/measures.md "Steps and phases"):
one row per phase, with whether the phase was inferred from the steps' shape and the evidence for it (fact
`phases`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..diagnosis.whatif import INFERENCE_PHASES
from ..base.units import fmt_duration, fmt_number, fmt_ratio
from ..model.report import Report, StackInfo
from ..pack.stacks import bundled_stacks

# The reported facts the step tables of every format read. A fact not named here is not computed for
# that format (engine/runs/selection.py; tests/test_fact_selection.py proves the list complete).
FACTS_READ = ("steps", "phases")

# How the steps were found, for people (fact _step_ranges, column source).
_FOUND_BY = {"nvtx": "NVTX step ranges", "sync": "synchronisations of the launching thread",
             "graph-launch": "CUDA-graph launches of the launching thread"}
# In a PyTorch-profiler trace the step ranges are record_function ranges (ProfilerStep#N, vLLM's execute_...).
_FOUND_BY_TRACE = {**_FOUND_BY, "nvtx": "record_function step ranges"}
ALL = "all"  # the row of every step (fact `steps`)
_DECODE, _PREFILL = "decode", "prefill"
# Said when no loop was found: neither NVTX steps nor calls that repeat over most of the GPU work.
NO_STEPS = ("No repeating loop (no NVTX steps; no syncs or graph launches repeating over most of the GPU work): "
            "the what-ifs replay each GPU's whole window.")
STEP_TIME = "A step's time is its period, from its start to the next step's."
TOKEN_GOALS = (" The median decode step bounds the time per output token (TPOT) from below, and prefill steps are "
               "part of the time to first token (TTFT).")


@dataclass(frozen=True)
class StepRow:
    """One phase's steps, as the reports show them."""

    phase: str
    inferred: bool
    evidence: str | None
    steps: int
    median_ns: float | None
    p90_ns: float | None
    busy_share: float | None
    kernels: float | None
    tpot_ns: float | None
    prefill_ns: float | None
    mean_batch: float | None
    found_by: str

    @property
    def label(self) -> str:
        """'decode', 'decode (inferred)', or 'all steps' for every step of a run without phases."""
        name = "all steps" if self.phase == ALL else self.phase
        return f"{name} (inferred)" if self.inferred else name

    @property
    def line(self) -> str:
        """'decode: 40 steps · median 2.4 ms (p90 2.6 ms) · GPU busy 38 % · TPOT ≥ 2.4 ms'."""
        return self.stats if self.phase == ALL else f"{self.label}: {self.stats}"

    @property
    def stats(self) -> str:
        """The line without the phase: '40 steps · median 2.4 ms (p90 2.6 ms) · GPU busy 38 % · TPOT ≥ 2.4 ms'."""
        parts = [f"{self.steps:,} step{'' if self.steps == 1 else 's'}",
                 f"median {fmt_duration(self.median_ns)} (p90 {fmt_duration(self.p90_ns)})",
                 f"GPU busy {fmt_ratio(self.busy_share, 0)}"]
        if self.mean_batch is not None:
            parts.append(f"batch {fmt_number(self.mean_batch)}")
        if self.tpot_ns is not None:
            parts.append(f"TPOT ≥ {fmt_duration(self.tpot_ns)}")
        if self.phase == _PREFILL and self.prefill_ns is not None and self.tpot_ns is None:
            parts.append("part of TTFT")
        return " · ".join(parts)


def _serving_stack(stack: StackInfo | None) -> bool:
    """The profile's stack serves tokens (`serving` in stacks.yaml, a team's stacks included)."""
    if stack is None:
        return False
    if stack.serving is not None:
        return stack.serving
    # A report read back from its JSON, which does not carry the flag: the bundled stacks say.
    return stack.name in bundled_stacks().serving_keys()


def serves_tokens(report: Report) -> bool:
    """The run serves or generates tokens: a serving stack, steps in prefill or decode, or --tokens given. Only
    then do the reports speak of tokens (TPOT, TTFT, tokens/s)."""
    return (_serving_stack(report.profile.stack) or bool(report.throughput and report.throughput.tokens)
            or any(r.get("phase") in INFERENCE_PHASES and (r.get("step_count") or 0) > 0
                   for r in report.facts.get("steps") or []))


def step_rows(report: Report) -> list[StepRow]:
    """The rows to show: one per phase, or the single row of every step when no step has a phase."""
    rows = report.facts.get("steps") or []
    evidence = {p.get("phase"): p.get("inference_evidence") for p in report.facts.get("phases") or []
                if p.get("inferred")}
    phased = [r for r in rows if r.get("phase") != ALL]
    serving = serves_tokens(report)
    found_words = _FOUND_BY_TRACE if report.profile.source_format == "kineto" else _FOUND_BY
    out = []
    # The steps that generated the tokens, as the throughput counts them (a run without phases whose --tokens make
    # its alike steps decode steps: diagnosis/throughput.py decode_row), so the STEPS block and the key metrics
    # give one TPOT.
    rates = report.throughput
    decode_all = not phased and rates is not None and rates.decode_steps is not None and rates.step_time_ns
    for r in phased or rows:
        phase = str(r.get("phase"))
        # A run without phases: the median step bounds the time per token only if its steps are decode steps.
        tpot = (r.get("tpot_proxy_ns") if phase == _DECODE and serving
                else rates.step_time_ns if decode_all and rates is not None and phase == ALL else None)
        out.append(StepRow(phase=phase, inferred=r.get("phase_source") == "inferred", evidence=evidence.get(phase),
                           steps=int(r.get("step_count") or 0), median_ns=r.get("median_step_ns"),
                           p90_ns=r.get("p90_step_ns"),
                           busy_share=r.get("busy_share", r.get("median_busy_share")),
                           kernels=r.get("median_kernels"), tpot_ns=tpot, prefill_ns=r.get("prefill_step_ns"),
                           mean_batch=r.get("mean_batch"),
                           found_by=found_words.get(str(r.get("source")), str(r.get("source")))))
    return out


def found_by(rows: list[StepRow]) -> str:
    """How the steps were found: 'NVTX step ranges' (the first row's; one run's steps share one source)."""
    return rows[0].found_by if rows else ""


def as_context(report: Report) -> dict[str, Any]:
    """The template values: `step_rows`, `steps_found_by`, `steps_intro` (how to read them; token goals only for a
    run that serves tokens), `serving` and `no_steps` (the sentence shown when a run with GPU work has no loop)."""
    rows = step_rows(report)
    serving = serves_tokens(report)
    intro = f"Found from {found_by(rows)}. {STEP_TIME}{TOKEN_GOALS if serving else ''}" if rows else ""
    return {"step_rows": rows, "steps_found_by": found_by(rows), "steps_intro": intro, "serving": serving,
            "no_steps": NO_STEPS if not rows and report.window else ""}
