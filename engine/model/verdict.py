"""The verdict: the primary bottleneck of the run, and how each inference phase fares."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .document import Model


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
