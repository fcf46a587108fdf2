"""The projections of what a fix would buy: a finding's cause removed (WhatIf), a larger batch (BatchWhatIf)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .document import Model
from ..base.units import fmt_range, fmt_span, fmt_step


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
