"""Which exports make up a multi-rank run, and which rank each one is.

`diagnose A.sqlite B.sqlite ...` (two or more files) or `diagnose DIR` (every *.sqlite and *.nsys-rep directly
in DIR; a .nsys-rep whose .sqlite export lies beside it is skipped, and so are hidden files) diagnoses one
distributed run. Rank numbers come from the file names when one pattern gives every file a distinct number,
tried in this order on the name without its extension:

1. ``rank`` followed by a number (the last one in the name): ``rank0``, ``rank_3``, ``Rank-12``, ``vllm.rank2``;
2. ``r`` followed by a number as its own name part: ``-r2``, ``_r3``, ``.r1`` (``run_r2.sqlite``);
3. a number at the end after ``.``, ``_`` or ``-``: ``profile.3``, ``trace_3``, ``node-3``;

otherwise the ranks are numbered 0, 1, ... in natural file-name order (``x2`` before ``x10``).

The exports must also look like the ranks of one run (`check_one_run`), else the run is refused in one sentence
that points to `diagnose batch` for independent profiles: one nsys version (EXPORT_PRODUCT_VERSION), capture
sessions that started within SESSION_START_TOLERANCE_NS of each other (TARGET_INFO_SESSION_START_TIME.utcEpochNs,
wall-clock time), and no process that used CUDA in two exports on one machine (the same PID in
TARGET_INFO_CUDA_CONTEXT_INFO / TARGET_INFO_CUDA_NULL_STREAM with GPU UUIDs of TARGET_INFO_GPU in common: one
process, hence one rank, profiled twice). A criterion an export does not record (older nsys, a .nsys-rep not yet
converted) is not judged for that export.
"""

from __future__ import annotations

import os
import re
import sqlite3
from datetime import datetime, timezone
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import InputError
from .inputs import check_profile_path, is_report, sqlite_uri

EXPORT_SUFFIXES = (".sqlite", ".nsys-rep")
RANK_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?i)(?<![a-z])rank[_-]?(\d+)"),
    re.compile(r"(?i)(?:^|[._-])r(\d+)(?=$|[._-])"),
    re.compile(r"(?:^|[._-])(\d+)$"),
)
Numbering = Literal["file names", "sorted order"]


@dataclass(frozen=True)
class RankInput:
    rank: int
    path: Path


def _stem(path: Path) -> str:
    name = path.name
    for suffix in EXPORT_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _natural_key(path: Path) -> list[object]:
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", path.name)]


def rank_from_name(path: Path, pattern: re.Pattern[str]) -> int | None:
    found = pattern.findall(_stem(path))
    return int(found[-1]) if found else None  # the last one: "run1_rank3" is rank 3


def number_ranks(paths: Sequence[Path]) -> tuple[list[RankInput], Numbering]:
    """Ranks from the file names when one pattern gives every file a distinct number; else sorted order."""
    for pattern in RANK_PATTERNS:
        numbers = [rank_from_name(p, pattern) for p in paths]
        found = [n for n in numbers if n is not None]
        if len(found) == len(numbers) and len(set(found)) == len(found):
            ranked = sorted(zip(found, paths), key=lambda item: item[0])
            return [RankInput(n, p) for n, p in ranked], "file names"
    ordered = sorted(paths, key=_natural_key)
    return [RankInput(i, p) for i, p in enumerate(ordered)], "sorted order"


def directory_entries(directory: Path) -> list[Path]:
    """The entries of `directory`, sorted by name; one sentence when it cannot be listed."""
    try:
        return sorted(directory.iterdir())
    except OSError as exc:
        raise InputError(f"{directory}: cannot list the directory ({exc.strerror or exc}).") from None


def exports_among(paths: Sequence[Path]) -> tuple[list[Path], int]:
    """The exports among the entries of a directory or the matches of a glob, and how many other paths there
    were: named *.sqlite or *.nsys-rep, not hidden, and a .nsys-rep whose .sqlite export (a regular file) lies
    beside it left out. Entries named like an export that are not regular files are kept: the caller says what
    they are (a multi-rank run refuses them, a batch gives each an error row)."""
    named = [p for p in paths if not p.name.startswith(".") and p.name.lower().endswith(EXPORT_SUFFIXES)]
    sqlite_stems = {(p.parent, _stem(p)) for p in named if p.name.lower().endswith(".sqlite") and p.is_file()}
    kept = [p for p in named if p.name.lower().endswith(".sqlite") or (p.parent, _stem(p)) not in sqlite_stems]
    return kept, len(paths) - len(kept)


def exports_in(directory: Path) -> list[Path]:
    """The exports directly in `directory` (not its subdirectories); .sqlite wins over a .nsys-rep beside it.

    An entry named like an export that is not a regular file (a directory, a dangling link, a FIFO) is an
    error: skipping it would diagnose the run without that rank and compare the rest as if they were all."""
    exports, _ = exports_among(directory_entries(directory))
    for p in exports:
        if not p.is_file():
            raise InputError(f"{p} is named like a rank export but is {_not_a_file(p)}; remove or rename it, or "
                             f"give the rank exports as files (diagnose RANK0.sqlite RANK1.sqlite ...).")
    return exports


def _not_a_file(path: Path) -> str:
    if path.is_symlink() and not path.exists():
        return f"a symbolic link to a missing file ({os.readlink(path)})"
    if path.is_dir():
        return "a directory"
    if path.is_fifo():
        return "a FIFO (named pipe)"
    if path.is_socket():
        return "a socket"
    if path.is_char_device() or path.is_block_device():
        return "a device"
    return "not a regular file"


def _check_distinct_files(paths: Sequence[Path]) -> None:
    """No export twice: not as two paths of one file (hard links, bind mounts), not as byte-identical copies."""
    stats = {p: p.stat() for p in paths}
    seen: dict[tuple[int, int], Path] = {}
    for p, st in stats.items():
        first = seen.setdefault((st.st_dev, st.st_ino), p)
        if first is not p:
            raise InputError(f"{first} and {p} are the same file (hard links, or two paths to one file); give "
                             f"each rank's export once.")
    by_size: dict[int, list[Path]] = {}
    for p, st in stats.items():
        by_size.setdefault(st.st_size, []).append(p)
    for group in by_size.values():
        same = _identical_pair(group) if len(group) > 1 else None
        if same:
            raise InputError(f"{same[0]} and {same[1]} have identical contents, so they cannot be two ranks of one "
                             f"run; give each rank's own export (one rank's export was probably copied twice).")


def _identical_pair(paths: list[Path], chunk: int = 1 << 20) -> tuple[Path, Path] | None:
    """Two byte-identical files among `paths` (all of one size), if any. The files are read side by side, a chunk
    at a time, and a group splits where contents differ, so different exports usually stop after one chunk."""
    with ExitStack() as stack:
        try:
            handles = {p: stack.enter_context(open(p, "rb")) for p in paths}
        except OSError as exc:
            raise InputError(f"{exc.filename}: cannot be read ({exc.strerror}).") from None
        groups = [paths]
        while groups:
            undecided = []
            for group in groups:
                by_chunk: dict[bytes, list[Path]] = {}
                for p in group:
                    by_chunk.setdefault(handles[p].read(chunk), []).append(p)
                for data, same in by_chunk.items():
                    if len(same) > 1 and not data:  # read to the end together without a difference
                        return same[0], same[1]
                    if len(same) > 1:
                        undecided.append(same)
            groups = undecided
    return None


def resolve_run(arguments: Sequence[str | Path]) -> tuple[list[RankInput], Numbering]:
    """The ranks of a run given as one directory or as two or more export files; one sentence on bad input."""
    if any(os.fspath(a) == "" for a in arguments):  # Path("") would mean the working directory
        raise InputError("a profile path is empty; give the path of an nsys SQLite export, e.g. run.sqlite (or of "
                         "each rank's export, or of one directory of them).")
    args = [Path(a) for a in arguments]
    if len(args) == 1 and args[0].is_dir():
        directory = args[0]
        paths = exports_in(directory)
        if len(paths) < 2:
            found = "no export" if not paths else f"only one export ({paths[0].name})"
            raise InputError(f"{directory} holds {found}; a multi-rank run needs at least two *.sqlite or "
                             f"*.nsys-rep exports in the directory (or give one export file to diagnose it alone).")
    else:
        if len(args) < 2:
            raise InputError("give two or more exports (or a directory of them) to diagnose a multi-rank run.")
        directories = [p for p in args if p.is_dir()]
        if directories:
            raise InputError(f"{directories[0]} is a directory; give either one directory of rank exports or two "
                             f"or more export files, not both.")
        paths = args
    seen: dict[Path, Path] = {}
    for p in paths:
        key = p.resolve()
        if key in seen:
            raise InputError(f"{p} is given twice (as {seen[key]} and {p}); give each rank's export once.")
        seen[key] = p
    for p in paths:
        check_profile_path(p)  # a missing or unreadable file fails now, before any rank is read
    _check_distinct_files(paths)  # after the checks above: only regular files are opened
    ranked, numbering = number_ranks(paths)
    check_one_run(ranked)
    return ranked, numbering


# The ranks of one job are launched together (torchrun, srun, mpirun start every rank's `nsys profile` within
# seconds); five minutes leaves room for a staggered launcher and still tells apart runs of different jobs.
SESSION_START_TOLERANCE_NS = 300 * 10**9
INDEPENDENT = ("these look like independent profiles, not the ranks of one run: diagnose each on its own, or all "
               "of them with `diagnose batch` (one row per profile, no cross-rank comparison)")


@dataclass(frozen=True)
class RankIdentity:
    """What an export records about the capture it came from (None / empty when it does not say)."""

    nsys_version: str | None = None
    session_start_ns: int | None = None      # TARGET_INFO_SESSION_START_TIME.utcEpochNs (wall clock, UTC)
    cuda_pids: frozenset[int] = frozenset()  # processes with a CUDA context
    gpu_uuids: frozenset[str] = frozenset()  # the GPUs of the machine (TARGET_INFO_GPU lists idle ones too)


def _query(con: sqlite3.Connection, sql: str) -> list[tuple]:
    try:
        return con.execute(sql).fetchall()
    except sqlite3.Error:  # a table or column this nsys version does not write
        return []


def read_identity(path: Path) -> RankIdentity:
    """The identity of one export, read with SQLite from a few small metadata tables; an unconverted report,
    or a file SQLite cannot open here (the diagnosis then says why), records nothing."""
    if is_report(path):
        return RankIdentity()
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


def check_one_run(inputs: Sequence[RankInput]) -> None:
    """Refuse exports that cannot be the ranks of one run (see the module docstring), naming two that differ."""
    ids = [(r.path, read_identity(r.path)) for r in inputs]
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
