"""Diagnose a multi-rank run: every rank's export in parallel, then cross-rank facts, rules and a verdict.

    diagnose_run(["rank0.sqlite", "rank1.sqlite"], config) -> RunReport      (or a directory of exports)

Each rank is diagnosed exactly as `diagnose(path, config)` would (its own facts, findings and verdict), on a
thread pool: DuckDB releases the GIL, so the ranks are read side by side. The per-rank numbers then go into
the DuckDB table `ranks` and the cross-rank facts of engine/run_facts (SQL) compare them; the rules with
`scope: run` judge those, and the run's verdict is the strongest cross-rank finding, else the most common
rank verdict.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from . import api
from ..diagnosis.config import Config
from ..base.errors import DiagnoseError
from ..diagnosis.evaluate import evaluate
from ..pack.headlines import Headlines, load_headlines
from ..facts.compute import FactSet
from ..facts.catalog import Fact
from ..model.findings import Finding
from ..model.report import Report
from ..model.settings import ParamOverride
from ..model.verdict import Verdict
from ..reading.messages import CacheWarning, Note
from ..reading.rank_identity import RankInput
from ..reading.ranks import Numbering, resolve_run
from ..diagnosis.ruleset import RuleSet
from ..facts.cross_rank import compute_run_facts, load_run_facts
from ..model.runmodel import RankRow, RunBalance, RunReport, split_balance_row
from ..base.text import shown_path
from ..base.units import fmt_ratio
from ..base.vocabulary import Severity

Progress = Callable[[str], None]


class _Cancelled(Exception):
    """Raised inside a rank's diagnosis (at its next progress step) once the run is being abandoned."""


class RunProgress:
    """Thread-safe progress of several ranks through one callback: 'rank 2: computing kernel_gaps · 1/4 done'.
    Once cancelled, every rank stops at its next step (a fact, a table), so Ctrl-C and a failing rank end the
    run promptly while each rank still closes its database and removes its temporary files."""

    def __init__(self, sink: Progress | None, total: int) -> None:
        self.sink, self.total = sink, total
        self.done = 0
        self.cancelled = threading.Event()
        self._lock = threading.Lock()

    def for_rank(self, rank: int) -> Progress:
        def report(stage: str) -> None:
            if self.cancelled.is_set():
                raise _Cancelled()
            if self.sink:
                with self._lock:
                    # a warning that the cache cannot be used is passed on as it is: the ranks share one cache
                    # directory, and the command line says it once (engine/cli/progress.py); so is a note
                    self.sink(stage if isinstance(stage, (CacheWarning, Note))
                              else f"rank {rank}: {stage} · {self.done}/{self.total} ranks done")
        return report

    def finished(self) -> None:
        with self._lock:
            self.done += 1
            if self.sink:
                self.sink(f"{self.done}/{self.total} ranks done")


def _rank_error(rank: RankInput, exc: DiagnoseError) -> DiagnoseError:
    message = str(exc)
    where = f"rank {rank.rank}" if str(rank.path) in message or rank.path.name in message \
        else f"rank {rank.rank} ({rank.path})"
    try:
        return type(exc)(f"{where}: {message}")
    except TypeError:
        return DiagnoseError(f"{where}: {message}")


def worker_count(ranks: int, workers: int | None = None) -> int:
    """Threads for `ranks` ranks: `workers` when given, else one per CPU; never more than the ranks."""
    return max(1, min(ranks, workers or os.cpu_count() or 1))


def diagnose_ranks(inputs: Sequence[RankInput], config: Config, *, progress: Progress | None = None,
                   cache: bool = True, workers: int | None = None,
                   cache_dir: str | Path | None = None, pack: api.Pack | None = None) -> list[Report]:
    """Each rank's own report (in `inputs` order), diagnosed in parallel. The first failing rank (in rank
    order) raises its error, naming the rank and its file; the other ranks are abandoned. The pack (`pack`, else
    loaded here from `config`) is loaded once for all the ranks, so a broken pack is no rank's error."""
    pack = pack or api.load_pack(config)
    tracker = RunProgress(progress, len(inputs))
    count = worker_count(len(inputs), workers)
    threads = max(1, (os.cpu_count() or 1) // count)  # the ranks side by side share the CPUs and the memory limit

    def one(rank: RankInput) -> Report:
        report = api.diagnose(rank.path, progress=tracker.for_rank(rank.rank), cache=cache,
                              cache_dir=cache_dir, threads=threads, share=count, pack=pack)
        tracker.finished()
        return report

    pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="nsys-diagnose-rank")
    futures: list[Future[Report]] = [pool.submit(one, rank) for rank in inputs]
    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            if any(f.exception() is not None for f in done):
                tracker.cancelled.set()
                break
    except BaseException:  # Ctrl-C: stop every rank at its next step, then let the caller report it
        tracker.cancelled.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True, cancel_futures=True)
    for rank, future in zip(inputs, futures):
        if future.cancelled():
            continue
        exc = future.exception()
        if exc is None or isinstance(exc, _Cancelled):
            continue
        if isinstance(exc, DiagnoseError):
            raise _rank_error(rank, exc) from None
        raise exc
    return [f.result() for f in futures]


def rank_numbers(rank: RankInput, report: Report) -> dict[str, Any]:
    """The row of the `ranks` table for one rank (engine/run_facts RANK_COLUMNS): its busiest GPU's numbers."""
    gpus = [g for g in report.facts.get("gpu_utilization") or [] if (g.get("kernel_count") or 0) > 0]
    main = max(gpus, key=lambda g: (g.get("kernel_time_ns") or 0, -(g.get("device_id") or 0)), default=None)
    device = main.get("device_id") if main else None
    comm = next((c for c in report.facts.get("communication") or [] if c.get("device_id") == device), {})
    names: dict[Any, Any] = {d.get("device_id"): d.get("name") for d in report.profile.devices}
    return {
        "rank": rank.rank, "path": shown_path(rank.path), "file": shown_path(rank.path.name), "pid": comm.get("pid"),
        "device_id": device, "gpu_name": names.get(device), "gpus_used": len(gpus),
        "window_ns": main.get("window_ns") if main else None,
        "utilization": main.get("utilization") if main else None,
        "kernel_time_ns": main.get("kernel_time_ns") if main else None,
        "compute_ns": comm.get("compute_ns"), "comm_ns": comm.get("comm_ns"),
        "exposed_comm_ns": comm.get("exposed_comm_ns"), "comm_kernel_count": comm.get("comm_kernel_count"),
        "step_time_ns": report.throughput.step_time_ns if report.throughput else None,
        "verdict": report.verdict.primary,
    }


def run_facts_of(inputs: Sequence[RankInput], reports: Sequence[Report],
                 facts: dict[str, Fact] | None = None) -> FactSet:
    return compute_run_facts([rank_numbers(i, r) for i, r in zip(inputs, reports)], facts)


def _ranks_text(ranks: Sequence[int], headlines: Headlines) -> str:
    """'rank 2' or 'ranks 0, 1, 3', as headlines.yaml words it (run_rank_one, run_rank_many)."""
    return headlines.say("run_rank_one" if len(ranks) == 1 else "run_rank_many", ranks=", ".join(map(str, ranks)))


def _rank_count(count: int, headlines: Headlines) -> str:
    """'1 rank' or '3 ranks' (run_rank_count_one, run_rank_count_many)."""
    return headlines.say("run_rank_count_one" if count == 1 else "run_rank_count_many", count=f"{count:,}")


def run_verdict(findings: Sequence[Finding], ranks: Sequence[RankRow], balance: RunBalance,
                headlines: Headlines | None = None) -> Verdict:
    """The strongest cross-rank finding (warning or worse); else the most common rank verdict, with the
    cross-rank balance in words. `headlines`: the wording (rules/vocabulary/headlines.yaml, or a team pack's)."""
    said = headlines or load_headlines()
    say = said.say
    strong = [f for f in findings if f.severity.at_least(Severity.WARNING)]
    top = max(strong, key=lambda f: (f.impact or 0.0, f.severity.rank), default=None)
    if top is not None:
        cost = say("run_cost", impact=fmt_ratio(top.impact, 0)) if top.impact is not None else ""
        return Verdict(primary=top.category, rule=top.rule, subject=top.subject, impact=top.impact,
                       headline=say("run_finding", title=top.title, cost=cost, message=top.message))
    if not ranks:
        return Verdict(primary=None, headline=say("run_no_ranks"))
    counts = Counter(r.verdict.primary for r in ranks)
    order = {r.verdict.primary: i for i, r in reversed(list(enumerate(ranks)))}  # first rank with each verdict
    primary = max(counts, key=lambda p: (counts[p], p is not None, -order[p]))
    agreeing = [r for r in ranks if r.verdict.primary == primary]
    first = agreeing[0]
    every = say("run_both_ranks") if len(ranks) == 2 else say("run_all_ranks", count=str(len(ranks)))
    who = every if len(agreeing) == len(ranks) else \
        say("run_some_ranks", count=str(len(agreeing)), total=str(len(ranks)),
            ranks=_ranks_text([r.rank for r in agreeing], said))
    spread = (say("run_spread", imbalance=fmt_ratio(balance.imbalance), ranks=_rank_count(balance.rank_count, said))
              if balance.imbalance is not None and balance.rank_count else say("run_no_kernels"))
    if balance.rank_count and balance.comm_rank_count < balance.rank_count:
        spread += say("run_no_nccl", count=str(balance.rank_count - balance.comm_rank_count))
    rank = {"rank": str(first.rank), "rank_headline": first.verdict.headline}
    headline = say("run_healthy", who=who, spread=spread, **rank) if primary is None else \
        say("run_common", spread=spread, primary=primary, who=who, **rank)
    return Verdict(primary=primary, rule=first.verdict.rule, subject=_ranks_text([r.rank for r in agreeing], said),
                   impact=first.verdict.impact, headline=headline)


def _common_lineage(reports: Sequence[Report]) -> list[str]:
    """The stack lineage every rank shares (ranks of one job run one stack); none when they differ."""
    lineages = {tuple(r.profile.stack.lineage) if r.profile.stack else () for r in reports}
    return list(lineages.pop()) if len(lineages) == 1 else []


def build_run_report(inputs: Sequence[RankInput], numbering: Numbering, reports: Sequence[Report],
                     run_rules: RuleSet, run_fact_defs: dict[str, Fact], source: str, workers: int,
                     overrides: list[ParamOverride], headlines: Headlines | None = None) -> RunReport:
    facts = run_facts_of(inputs, reports, run_fact_defs)
    evaluation = evaluate(run_rules, facts, stack=_common_lineage(reports))
    rows = {row["rank"]: row for row in facts.rows("rank_balance")}
    ranks = []
    for rank, report in zip(inputs, reports):
        per_rank, _ = split_balance_row(rows[rank.rank])
        ranks.append(RankRow(**per_rank, nsys_version=report.profile.nsys_version, verdict=report.verdict,
                             findings=report.findings))
    balance = RunBalance(**split_balance_row(next(iter(rows.values())))[1]) if rows else RunBalance()
    return RunReport(tool_version=api.tool_version(), source=source, rank_numbering=numbering, workers=workers,
                     verdict=run_verdict(evaluation.findings, ranks, balance, headlines), balance=balance, ranks=ranks,
                     findings=evaluation.findings, passed=evaluation.passed, skipped=evaluation.skipped,
                     overrides=overrides)


def diagnose_run(paths: Sequence[str | Path], config: Config | None = None, *, progress: Progress | None = None,
                 cache: bool = True, workers: int | None = None, cache_dir: str | Path | None = None) -> RunReport:
    """Diagnose one multi-rank run given as two or more exports or PyTorch-profiler traces, or as one directory of
    them. `workers`: ranks read at once (default: one per CPU, at most the number of ranks). `progress` also
    receives a `Note` for each trace left out of the run (no GPU activity; engine/reading/ranks.py)."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)  # one directory may come bare
    inputs, numbering = resolve_run(paths, progress)
    source = shown_path(paths[0]) if len(paths) == 1 else ", ".join(shown_path(p) for p in paths)
    return diagnose_inputs(inputs, numbering, source, config, progress=progress, cache=cache, workers=workers,
                           cache_dir=cache_dir)


def diagnose_inputs(inputs: Sequence[RankInput], numbering: Numbering, source: str, config: Config | None = None,
                    *, progress: Progress | None = None, cache: bool = True, workers: int | None = None,
                    cache_dir: str | Path | None = None) -> RunReport:
    """`diagnose_run` on ranks already resolved (and checked to be one run) by `resolve_run`."""
    pack = api.load_pack(config)  # once for every rank and the cross-rank rules
    reports = diagnose_ranks(inputs, pack.config, progress=progress, cache=cache, workers=workers,
                             cache_dir=cache_dir, pack=pack)
    overrides = list(pack.ruleset.overrides + pack.run_ruleset.overrides)
    return build_run_report(inputs, numbering, reports, pack.run_ruleset, load_run_facts(), source,
                            worker_count(len(inputs), workers), overrides, pack.headlines)
