"""Which profiles make up a multi-rank run, and which rank each one is.

`diagnose A B ...` (two or more files) or `diagnose DIR` diagnoses one distributed run. A run is made of nsys
exports or of PyTorch-profiler (Kineto) traces, not both. In DIR that means every *.sqlite and *.nsys-rep directly
in it (a .nsys-rep whose .sqlite export lies beside it is skipped), every trace named as the profilers name them
(*.pt.trace.json and *.trace.json, gzipped or not), and every other *.json / *.json.gz whose first bytes are a
Chrome trace in object form with something only Kineto writes (judged from its head, the file is never read
whole); hidden files are skipped.

A trace without any GPU activity among several that have some (vLLM writes one per worker and, beside them, one of
its API-server process, which runs no CUDA work) is no rank: it is left out with a note (`Note`); to know, a trace
whose head records no rank is read through once, in bounded memory (read_trace_head). The rank numbers
of traces come from their `distributedInfo` (`rank`, recorded by the PyTorch profiler in a distributed run) when
every trace has a distinct one. Otherwise, and for exports, they come from the file names when one pattern gives
every file a distinct number, tried in this order on the name without its extension:

1. ``rank`` followed by a number (the last one in the name): ``rank0``, ``rank_3``, ``Rank-12``, ``vllm.rank2``;
2. ``r`` followed by a number as its own name part: ``-r2``, ``_r3``, ``.r1`` (``run_r2.sqlite``);
3. a number at the end after ``.``, ``_`` or ``-``: ``profile.3``, ``trace_3``, ``node-3``, ``1712-TP-3``;

a number of MAX_RANK or more is no rank (a time stamp or a process id, as in vLLM's
``<host>_<pid>.<ns>.pt.trace.json.gz``); otherwise the ranks are numbered 0, 1, ... in natural file-name order
(``x2`` before ``x10``).

The profiles must also look like the ranks of one run (`check_one_run`), else the run is refused in one sentence
that points to `diagnose batch` for independent profiles: one nsys version (EXPORT_PRODUCT_VERSION), capture
sessions that started within SESSION_START_TOLERANCE_NS of each other (TARGET_INFO_SESSION_START_TIME.utcEpochNs,
wall-clock time), and no process that used CUDA in two exports on one machine (the same PID in
TARGET_INFO_CUDA_CONTEXT_INFO / TARGET_INFO_CUDA_NULL_STREAM with GPU UUIDs of TARGET_INFO_GPU in common: one
process, hence one rank, profiled twice); traces, captures that started within that tolerance (TraceHead.start_ns)
and, in their distributedInfo, one `world_size` and no rank twice.
A criterion a profile does not record (older nsys, a .nsys-rep not yet converted, a trace of a PyTorch without
distributedInfo) is not judged for that profile.

The head of a trace is read by trace_head.py; what each profile records about its capture, and the check
that the profiles are one run, are in rank_identity.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

from ..base.errors import InputError
from .messages import Note
from .inputs import check_profile_path, is_trace
from .rank_identity import RankIdentity, RankInput, check_one_run, read_identity
from .trace_head import holds_trace

EXPORT_SUFFIXES = (".sqlite", ".nsys-rep")
# The names the profilers give their traces: torch.profiler's tensorboard_trace_handler and vLLM
# `<worker>.<time>.pt.trace.json[.gz]`, SGLang `<time>-TP-<rank>.trace.json.gz`. Any other .json / .json.gz is a
# trace when its content says so (holds_trace).
TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".trace.json.gz", ".trace.json")
JSON_SUFFIXES = (".json.gz", ".json")
RANK_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?i)(?<![a-z])rank[_-]?(\d+)"),
    re.compile(r"(?i)(?:^|[._-])r(\d+)(?=$|[._-])"),
    re.compile(r"(?:^|[._-])(\d+)$"),
)
MAX_RANK = 1 << 20  # no job has this many ranks: a larger number in a file name is a time stamp or a process id
Numbering = Literal["file names", "sorted order", "distributedInfo"]
Say = Callable[[str], None]


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (*EXPORT_SUFFIXES, *TRACE_SUFFIXES, *JSON_SUFFIXES):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _natural_key(path: Path) -> list[object]:
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", path.name)]


def rank_from_name(path: Path, pattern: re.Pattern[str]) -> int | None:
    found = pattern.findall(_stem(path))
    rank = int(found[-1]) if found else None  # the last one: "run1_rank3" is rank 3
    return rank if rank is not None and rank < MAX_RANK else None


def number_ranks(paths: Sequence[Path],
                 identities: Mapping[Path, "RankIdentity"] | None = None) -> tuple[list[RankInput], Numbering]:
    """Ranks from the traces' distributedInfo when every profile is a trace with a distinct rank there (as
    `identities` read them); else from the file names when one pattern gives every file a distinct number; else
    sorted order."""
    recorded = [identities[p].rank if identities and p in identities else None for p in paths]
    traced = [r for r in recorded if r is not None]
    if len(traced) == len(paths) and len(set(traced)) == len(traced):
        return [RankInput(n, p) for n, p in sorted(zip(traced, paths), key=lambda item: item[0])], "distributedInfo"
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


def named_like_trace(path: Path) -> bool:
    return path.name.lower().endswith(TRACE_SUFFIXES)


def _profile_entry(path: Path) -> bool:
    """Whether a directory entry is a profile: named like an export or a trace, or a .json / .json.gz whose
    content is a PyTorch-profiler trace (only a regular file is opened to tell)."""
    name = path.name.lower()
    if name.startswith("."):
        return False
    if name.endswith(EXPORT_SUFFIXES) or named_like_trace(path):
        return True
    return name.endswith(JSON_SUFFIXES) and path.is_file() and holds_trace(path)


def exports_among(paths: Sequence[Path]) -> tuple[list[Path], int]:
    """The profiles among the entries of a directory or the matches of a glob, and how many other paths there
    were: named *.sqlite, *.nsys-rep, *.pt.trace.json(.gz) or *.trace.json(.gz), or another *.json(.gz) whose head
    is a PyTorch-profiler trace; not hidden, and a .nsys-rep whose .sqlite export (a regular file) lies beside it
    left out. Entries named like an export or a trace that are not regular files are kept: the caller says what
    they are (a multi-rank run refuses them, a batch gives each an error row)."""
    named = [p for p in paths if _profile_entry(p)]
    sqlite_stems = {(p.parent, _stem(p)) for p in named if p.name.lower().endswith(".sqlite") and p.is_file()}
    kept = [p for p in named if not p.name.lower().endswith(".nsys-rep") or (p.parent, _stem(p)) not in sqlite_stems]
    return kept, len(paths) - len(kept)


def exports_in(directory: Path) -> list[Path]:
    """The exports and traces directly in `directory` (not its subdirectories); .sqlite wins over a .nsys-rep
    beside it.

    An entry named like an export or a trace that is not a regular file (a directory, a dangling link, a FIFO) is
    an error: skipping it would diagnose the run without that rank and compare the rest as if they were all."""
    exports, _ = exports_among(directory_entries(directory))
    for p in exports:
        if not p.is_file():
            what, files = (("a rank trace", "RANK0.pt.trace.json.gz RANK1.pt.trace.json.gz") if named_like_trace(p)
                           else ("a rank export", "RANK0.sqlite RANK1.sqlite"))
            raise InputError(f"{p} is named like {what} but is {_not_a_file(p)}; remove or rename it, or give the "
                             f"rank {what.split()[-1]}s as files (diagnose {files} ...).")
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


def resolve_run(arguments: Sequence[str | Path], say: Say | None = None) -> tuple[list[RankInput], Numbering]:
    """The ranks of a run given as one directory or as two or more export or trace files; one sentence on bad
    input. `say` is called with a `Note` for what the user should know about the run as given: a trace left out
    (no GPU activity), ranks the traces record that were not given."""
    if any(os.fspath(a) == "" for a in arguments):  # Path("") would mean the working directory
        raise InputError("a profile path is empty; give the path of an nsys SQLite export, e.g. run.sqlite (or of "
                         "each rank's export or trace, or of one directory of them).")
    args = [Path(a) for a in arguments]
    directory: Path | None = None
    if len(args) == 1 and args[0].is_dir():
        directory = args[0]
        paths = exports_in(directory)
        if len(paths) < 2:
            found = ("no export" if not paths else
                     f"only one {'trace' if is_trace(paths[0]) else 'export'} ({paths[0].name})")
            raise InputError(f"{directory} holds {found}; a multi-rank run needs at least two *.sqlite or "
                             f"*.nsys-rep exports, or two PyTorch-profiler traces (*.pt.trace.json.gz ...), in the "
                             f"directory (or give one file to diagnose it alone).")
    else:
        if len(args) < 2:
            raise InputError("give two or more exports or traces (or a directory of them) to diagnose a multi-rank "
                             "run.")
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
    _check_one_kind(paths, directory)
    identities = {p: read_identity(p, whole=True) for p in paths}
    paths = _with_gpu_activity(paths, identities, say or (lambda _note: None))
    ranked, numbering = number_ranks(paths, identities)
    check_one_run(ranked, identities)
    size = max((s for r in ranked if (s := identities[r.path].world_size) is not None), default=0)
    if say is not None and size > len(ranked):
        say(Note(f"the traces record a run of {size} ranks (the world_size of their distributedInfo) and "
                 f"{len(ranked)} of them are given: the balance across ranks covers those {len(ranked)} only; give "
                 f"every rank's trace to compare them all"))
    return ranked, numbering


def _check_one_kind(paths: Sequence[Path], directory: Path | None) -> None:
    """A run is read from nsys exports or from PyTorch-profiler traces, not both: the same rank captured both ways
    would count twice, and the two profilers' windows and CUDA-call records differ, so a rank's numbers from one
    would be compared with another rank's from the other."""
    traces = [p for p in paths if is_trace(p)]
    exports = [p for p in paths if p not in traces]
    if not traces or not exports:
        return
    why = ("the ranks of one run are read from one kind of profile (one rank captured both ways would count twice, "
           "and the two profilers' numbers are not compared rank against rank)")
    if directory is None:
        raise InputError(f"{exports[0]} is an nsys export and {traces[0]} a PyTorch-profiler trace; {why}: give "
                         f"every rank's export, or every rank's trace.")
    kinds = [next((s for s in (*EXPORT_SUFFIXES, *TRACE_SUFFIXES, *JSON_SUFFIXES) if p.name.lower().endswith(s)), "")
             for p in (exports[0], traces[0])]
    raise InputError(f"{directory} holds both nsys exports ({exports[0].name} ...) and PyTorch-profiler traces "
                     f"({traces[0].name} ...); {why}: give one kind, e.g. `diagnose {directory / ('*' + kinds[0])}` "
                     f"or `diagnose {directory / ('*' + kinds[1])}`.")


def _with_gpu_activity(paths: list[Path], identities: Mapping[Path, "RankIdentity"], say: Say) -> list[Path]:
    """The profiles without the traces that hold no GPU activity at all (read whole, not one kernel, copy or CUDA
    call): such a trace is no rank of the run (vLLM writes one for its API-server process beside the workers'),
    and is left out with a note, as long as two ranks remain; otherwise one sentence says what to do."""
    idle = [p for p in paths if identities[p].gpu_activity is False]
    if not idle:
        return paths
    kept = [p for p in paths if p not in idle]
    names = ", ".join(str(p) for p in idle)
    if not kept:
        raise InputError(f"none of the traces holds GPU activity ({names}): the profiler ran without CUDA "
                         f"activities; profile with torch.profiler.profile(activities=[ProfilerActivity.CPU, "
                         f"ProfilerActivity.CUDA]) (vLLM's and SGLang's profilers record both) and diagnose the new "
                         f"traces.")
    if len(kept) == 1:
        raise InputError(f"only {kept[0]} holds GPU activity ({names} {'holds' if len(idle) == 1 else 'hold'} only "
                         f"CPU events, like the trace vLLM writes for its API-server process), so there is no second "
                         f"rank to compare it with; diagnose {kept[0]} alone.")
    for p in idle:
        why = ("it is a Chrome trace, but none the PyTorch profiler wrote (no Kineto category or key)"
               if not identities[p].kineto else
               "it holds no GPU activity (CPU events only, or none), like the trace vLLM writes for its API-server "
               "process beside its workers' traces")
        say(Note(f"{p} is left out of the run: {why}"))
    return kept
