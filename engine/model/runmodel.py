"""The multi-rank run report: the shared pieces of engine/model (verdict, findings, rule outcomes, settings) plus one
row per rank and the run-wide balance.

Per-rank numbers and the run-wide balance come from the `rank_balance` cross-rank fact
(rules/facts/cross_rank/rank_balance.sql documents every column); each rank also carries its own verdict and
findings from its single-profile diagnosis.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .document import Document, Model, Number
from .findings import Finding, RuleOutcome
from .settings import ParamOverride
from .verdict import Verdict
from ..base.text import distinguishing_parts

RUN_SCHEMA_VERSION = "1.0"


class RankRow(Model):
    """One rank: its row of the `rank_balance` fact, its own verdict and findings."""

    rank: int
    path: str
    file: str
    pid: int | None = None
    device_id: int | None = None
    gpu_name: str | None = None
    gpus_used: int | None = None
    nsys_version: str | None = Field(None, description="nsys version that wrote the rank's export.")
    window_ns: Number | None = None
    utilization: float | None = None
    kernel_time_ns: Number | None = None
    compute_ns: Number | None = None
    comm_ns: Number | None = None
    exposed_comm_ns: Number | None = None
    comm_kernel_count: int | None = None
    comm_fraction: float | None = None
    exposed_comm_fraction: float | None = None
    step_time_ns: Number | None = None
    is_straggler: bool = False
    excess_fraction: float | None = None
    behind_ns: Number | None = None
    wait_fraction: float | None = None
    verdict: Verdict = Field(description="The rank's own verdict, as `diagnose` of its export alone gives it.")
    findings: list[Finding] = Field(description="The rank's own findings.")


class RunBalance(Model):
    """The run-wide columns of the `rank_balance` fact (the same on every row)."""

    rank_count: int = 0
    comm_rank_count: int = 0
    max_compute_ns: Number | None = None
    min_compute_ns: Number | None = None
    median_compute_ns: Number | None = None
    straggler_rank: int | None = None
    fastest_rank: int | None = None
    imbalance: float | None = None
    max_wait_fraction: float | None = None
    others_comm_ns: Number | None = None
    others_behind_ns: Number | None = None


class RunReport(Document):
    """Output of `diagnose RANK0 RANK1 ... --format json` (or `diagnose RUN_DIR`). Per-rank and run-wide numbers
    are the columns of the `rank_balance` fact (rules/facts/cross_rank/rank_balance.sql)."""

    # a constant in Literal[...]: pydantic reads it at run time (the JSON Schema const), mypy wants a literal
    schema_version: Literal[RUN_SCHEMA_VERSION] = RUN_SCHEMA_VERSION  # type: ignore[valid-type]
    kind: Literal["run"] = Field(default="run", description="A multi-rank run (single-profile reports have no `kind`).")
    source: str = Field(description="The directory given, or the export files joined by ', '.")
    rank_numbering: Literal["file names", "sorted order", "distributedInfo"] = Field(
        description="Where the rank numbers come from: patterns in the file names, their natural sort order, or "
                    "the `distributedInfo` the PyTorch profiler records in each rank's trace.")
    workers: int = Field(description="Ranks diagnosed in parallel (threads).")
    verdict: Verdict = Field(description="The run's verdict: a cross-rank finding when one fires, else the most "
                                         "common rank verdict.")
    balance: RunBalance
    ranks: list[RankRow]
    findings: list[Finding] = Field(description="Cross-rank findings (rules with `scope: run`).")
    passed: list[RuleOutcome]
    skipped: list[RuleOutcome]
    overrides: list[ParamOverride]

    def rank_labels(self) -> dict[int, str]:
        """Each rank's file as the tables show it: the part of its name that tells it from the other ranks' files
        (their common prefix and suffix left out), e.g. 'rank0' for 'job42_rank0.nsys-rep.sqlite'."""
        return dict(zip((r.rank for r in self.ranks), distinguishing_parts([r.file for r in self.ranks])))

    def all_findings(self) -> list[tuple[int | None, Finding]]:
        """Cross-rank findings (rank None) and every rank's own, for --fail-on."""
        out: list[tuple[int | None, Finding]] = [(None, f) for f in self.findings]
        out += [(r.rank, f) for r in self.ranks for f in r.findings]
        return out


def rank_row_fields() -> set[str]:
    return set(RankRow.model_fields) - {"verdict", "findings", "nsys_version"}


def split_balance_row(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A `rank_balance` row -> (its per-rank columns, its run-wide columns)."""
    per_rank = {k: v for k, v in row.items() if k in rank_row_fields()}
    run_wide = {k: v for k, v in row.items() if k in RunBalance.model_fields}
    return per_rank, run_wide
