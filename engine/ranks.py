"""Which exports make up a multi-rank run, and which rank each one is.

`diagnose A.sqlite B.sqlite ...` (two or more files) or `diagnose DIR` (every *.sqlite and *.nsys-rep directly
in DIR; a .nsys-rep whose .sqlite export lies beside it is skipped, and so are hidden files) diagnoses one
distributed run. Rank numbers come from the file names when one pattern gives every file a distinct number,
tried in this order on the name without its extension:

1. ``rank`` followed by a number (the last one in the name): ``rank0``, ``rank_3``, ``Rank-12``, ``vllm.rank2``;
2. ``r`` followed by a number as its own name part: ``-r2``, ``_r3``, ``.r1`` (``run_r2.sqlite``);
3. a number at the end after ``.``, ``_`` or ``-``: ``profile.3``, ``trace_3``, ``node-3``;

otherwise the ranks are numbered 0, 1, ... in natural file-name order (``x2`` before ``x10``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import InputError
from .source import check_profile_path

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
        if None not in numbers and len(set(numbers)) == len(numbers):
            ranked = sorted(zip(numbers, paths), key=lambda item: item[0])
            return [RankInput(int(n), p) for n, p in ranked], "file names"
    ordered = sorted(paths, key=_natural_key)
    return [RankInput(i, p) for i, p in enumerate(ordered)], "sorted order"


def exports_in(directory: Path) -> list[Path]:
    """The exports directly in `directory` (not its subdirectories); .sqlite wins over a .nsys-rep beside it."""
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise InputError(f"{directory}: cannot list the directory ({exc.strerror or exc}).") from None
    files = [p for p in entries if not p.name.startswith(".") and p.is_file()
             and p.name.lower().endswith(EXPORT_SUFFIXES)]
    sqlite_stems = {_stem(p) for p in files if p.name.lower().endswith(".sqlite")}
    return [p for p in files if p.name.lower().endswith(".sqlite") or _stem(p) not in sqlite_stems]


def resolve_run(arguments: Sequence[str | Path]) -> tuple[list[RankInput], Numbering]:
    """The ranks of a run given as one directory or as two or more export files; one sentence on bad input."""
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
    return number_ranks(paths)
