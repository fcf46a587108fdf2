"""The words every layer shares: finding severities and kinds, and the parts of a GPU's window (kernels, copies
only, idle time by cause). This is the only Python module that spells them; bundled and team categories are data
(rules/vocabulary/categories.yaml, engine/pack/categories.py), and so are the software stacks
(rules/vocabulary/stacks.yaml, engine/pack/stacks.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """How much a finding matters, weakest first. `--fail-on`, `rules.<id>.severity` and the rule files use the
    values."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def at_least(self, other: Severity | str) -> bool:
        return self.rank >= Severity(other).rank

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(s.value for s in cls)

    @classmethod
    def described(cls) -> str:
        """'info, warning or error', for messages."""
        *head, last = cls.names()
        return f"{', '.join(head)} or {last}"


_RANK = {s: i for i, s in enumerate(Severity)}


class Kind(StrEnum):
    """What a finding is: a cause to fix, a symptom whose cause another finding names, or a capture problem that
    limits what the export can show. Verdicts prefer causes, then symptoms; capture problems come first when
    they make the rest meaningless (`blocking: true`)."""

    CAUSE = "cause"
    SYMPTOM = "symptom"
    CAPTURE = "capture"

    @property
    def rank(self) -> int:
        return _KIND_RANK[self]


# Findings are listed causes first, then capture problems, then symptoms (within one severity).
_KIND_RANK = {k: i for i, k in enumerate((Kind.CAUSE, Kind.CAPTURE, Kind.SYMPTOM))}


@dataclass(frozen=True)
class WindowPart:
    """One part of a GPU's window in the time breakdown: kernels running, only copies running, or idle time of one
    cause (the `cause` values of the _idle_gaps fact; docs/measures.md "Where the idle time goes"). `column` is the
    gpu_utilization column that holds its time."""

    key: str
    column: str
    label: str       # table headers and chart legends
    short: str       # terminal, after "idle:" for the idle causes
    idle: bool = True


# In the order of the breakdown: busy parts first, then the idle causes, host-side ones first.
WINDOW_PARTS: tuple[WindowPart, ...] = (
    WindowPart("kernels", "compute_busy_ns", "Kernels running", "kernels", idle=False),
    WindowPart("copies", "copy_only_ns", "Copies only, no kernel", "copies only", idle=False),
    WindowPart("sync", "idle_sync_ns", "Idle: synchronisation", "sync"),
    WindowPart("allocation", "idle_allocation_ns", "Idle: allocation and free calls", "allocation"),
    WindowPart("launch", "idle_launch_ns", "Idle: launch cost", "launch"),
    WindowPart("host", "idle_host_ns", "Idle: host work outside CUDA", "host"),
    WindowPart("gpu-side", "idle_gpu_side_ns", "Idle: GPU-side gaps between queued work", "GPU-side"),
    WindowPart("uvm", "idle_uvm_ns", "Idle: page migration", "page migration"),
    WindowPart("other", "idle_other_ns", "Idle: other (no traced cause)", "other"),
)
IDLE_CAUSES: tuple[WindowPart, ...] = tuple(p for p in WINDOW_PARTS if p.idle)
