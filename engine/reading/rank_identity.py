"""Whether profiles can be the ranks of one run (`check_one_run`): what each export or trace records about the
capture it came from (`RankIdentity`, `read_identity`), compared across the profiles; the criteria are listed in
ranks.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from ..base.errors import InputError
from .inputs import is_report, is_trace, sqlite_uri
from .trace_head import read_trace_head


@dataclass(frozen=True)
class RankInput:
    rank: int
    path: Path


# The ranks of one job are launched together (torchrun, srun, mpirun start every rank's `nsys profile` within
# seconds); five minutes leaves room for a staggered launcher and still tells apart runs of different jobs.
SESSION_START_TOLERANCE_NS = 300 * 10**9
INDEPENDENT = ("these look like independent profiles, not the ranks of one run: diagnose each on its own, or all "
               "of them with `diagnose batch` (one row per profile, no cross-rank comparison)")


@dataclass(frozen=True)
class RankIdentity:
    """What an export or a trace records about the capture it came from (None / empty when it does not say)."""

    nsys_version: str | None = None
    session_start_ns: int | None = None      # TARGET_INFO_SESSION_START_TIME.utcEpochNs (wall clock, UTC); of a
    #                                          trace, the time of its earliest event in its head (TraceHead.start_ns)
    cuda_pids: frozenset[int] = frozenset()  # processes with a CUDA context
    gpu_uuids: frozenset[str] = frozenset()  # the GPUs of the machine (TARGET_INFO_GPU lists idle ones too)
    source_format: Literal["nsys", "kineto"] = "nsys"  # an nsys export, or a PyTorch-profiler (Kineto) trace
    rank: int | None = None                  # a trace's distributedInfo: its rank and the run's world size
    world_size: int | None = None
    gpu_activity: bool | None = None         # False: a trace read whole without any GPU activity
    kineto: bool = True                      # False: JSON with traceEvents that no PyTorch profiler wrote


def _query(con: sqlite3.Connection, sql: str) -> list[tuple]:
    try:
        return con.execute(sql).fetchall()
    except sqlite3.Error:  # a table or column this nsys version does not write
        return []


def read_identity(path: Path, *, whole: bool = False) -> RankIdentity:
    """The identity of one export, read with SQLite from a few small metadata tables; an unconverted report,
    or a file SQLite cannot open here (the diagnosis then says why), records nothing. A trace's comes from its
    head, and with `whole`, when that records no rank, from the whole trace (read_trace_head)."""
    if is_report(path):
        return RankIdentity()
    if is_trace(path):
        head = read_trace_head(path, whole=whole)
        return RankIdentity(session_start_ns=head.start_ns, source_format="kineto", rank=head.rank,
                            world_size=head.world_size, gpu_activity=head.gpu, kineto=head.kineto or not head.events)
    try:
        # immutable: no lock, no -shm or -wal file is created beside a WAL-mode export (these metadata tables are
        # written once by `nsys export`, so a write-ahead log the reading would miss holds none of them).
        con = sqlite3.connect(sqlite_uri(str(path)) + "&immutable=1", uri=True)
    except sqlite3.Error:
        return RankIdentity()
    try:
        version = None
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            rows = _query(con, f"SELECT value FROM {table} WHERE name = 'EXPORT_PRODUCT_VERSION'")
            if rows and rows[0][0]:
                version = str(rows[0][0])
                break
        start = _query(con, "SELECT min(utcEpochNs) FROM TARGET_INFO_SESSION_START_TIME")
        pids = {r[0] for t in ("TARGET_INFO_CUDA_CONTEXT_INFO", "TARGET_INFO_CUDA_NULL_STREAM")
                for r in _query(con, f"SELECT DISTINCT processId FROM {t}") if isinstance(r[0], int)}
        uuids = {str(r[0]) for r in _query(con, "SELECT DISTINCT uuid FROM TARGET_INFO_GPU") if r[0]}
    finally:
        con.close()
    session = start[0][0] if start and isinstance(start[0][0], int) else None
    return RankIdentity(version, session, frozenset(pids), frozenset(uuids))


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(ns: int) -> str:
    seconds = ns / 1e9
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def check_one_run(inputs: Sequence[RankInput], identities: Mapping[Path, RankIdentity] | None = None) -> None:
    """Refuse profiles that cannot be the ranks of one run (see the module docstring), naming two that differ.
    `identities`: those already read (read_identity), by path."""
    known = identities or {}
    ids = [(r.path, known.get(r.path) or read_identity(r.path)) for r in inputs]
    sizes = [(p, i.world_size) for p, i in ids if i.world_size is not None]
    for p, size in sizes[1:]:
        if size != sizes[0][1]:
            raise InputError(f"{sizes[0][0]} records a run of {sizes[0][1]} ranks and {p} one of {size} (the "
                             f"world_size of their distributedInfo); {INDEPENDENT}.")
    ranked = [p for p, i in ids if i.rank is not None and i.world_size is not None and i.world_size > 1]
    unranked = [p for p, i in ids if i.rank is None]
    if ranked and unranked:
        raise InputError(f"{ranked[0]} records its rank of a distributed run (its distributedInfo) and {unranked[0]} "
                         f"records none, so they are not two ranks of one run: a trace of another program, or of a "
                         f"process that is no rank (vLLM's API server); {INDEPENDENT}.")
    by_rank: dict[int, Path] = {}
    for p, i in ids:
        if i.rank is not None and i.rank in by_rank:
            raise InputError(f"{by_rank[i.rank]} and {p} both record rank {i.rank} in their distributedInfo, so "
                             f"they are not two ranks of one run: one rank captured twice (each start of the "
                             f"profiler writes a new trace per worker) or traces of two runs; give one trace per "
                             f"rank, all of one capture.")
        if i.rank is not None:
            by_rank[i.rank] = p
    versions = [(p, i.nsys_version) for p, i in ids if i.nsys_version]
    for p, version in versions[1:]:
        if version != versions[0][1]:
            raise InputError(f"{versions[0][0]} was recorded by nsys {versions[0][1]} and {p} by nsys {version}; "
                             f"{INDEPENDENT}.")
    starts = sorted(((i.session_start_ns, str(p)) for p, i in ids if i.session_start_ns is not None))
    if len(starts) > 1 and starts[-1][0] - starts[0][0] > SESSION_START_TOLERANCE_NS:
        (first, first_path), (last, last_path) = starts[0], starts[-1]
        raise InputError(f"the capture of {first_path} started at {_utc(first)} and that of {last_path} at "
                         f"{_utc(last)}, {_span(last - first)} later (the ranks of one run start within "
                         f"{SESSION_START_TOLERANCE_NS // 60_000_000_000} minutes of each other); {INDEPENDENT}.")
    for n, (a, ia) in enumerate(ids):
        for b, ib in ids[n + 1:]:
            shared = sorted(ia.cuda_pids & ib.cuda_pids)
            if shared and ia.gpu_uuids & ib.gpu_uuids:
                raise InputError(f"{a} and {b} both hold process {shared[0]} on one machine (the same GPUs), so "
                                 f"they are one process profiled twice, not two ranks; {INDEPENDENT}.")
