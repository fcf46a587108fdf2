"""The profiles of a batch: found from files, directories and glob patterns (find_profiles), and split into
the shards of a CI matrix or Slurm array (Shard)."""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


from ..base.errors import InputError
from ..reading.ranks import directory_entries, exports_among


# ------------------------------------------------------------------------------------------------------------
# Finding the profiles
# ------------------------------------------------------------------------------------------------------------
@dataclass
class Found:
    profiles: list[Path] = field(default_factory=list)
    skipped: int = 0      # entries of a directory (or glob matches) that are not named like an export
    duplicates: int = 0   # the same file reached twice (a directory and a glob, a symbolic link)


def _has_magic(text: str) -> bool:
    return any(c in text for c in "*?[")


def find_profiles(arguments: Iterable[str]) -> Found:
    """The profiles named by files, directories (their exports and PyTorch-profiler traces, not those of
    subdirectories; reading.ranks.exports_among says which entries are) and glob patterns (expanded here, so quoted
    globs work; `**` descends). An explicit file is always a profile, so a file that is not one becomes an error
    row; a glob or directory with nothing in it is an InputError."""
    found = Found()
    seen: set[str] = set()

    def add(path: Path) -> None:
        key = os.path.realpath(path)
        if key in seen:
            found.duplicates += 1
            return
        seen.add(key)
        found.profiles.append(path)

    for argument in arguments:
        if argument == "":
            raise InputError("a profile argument is empty; give export files, directories of them or glob patterns.")
        given = Path(argument)
        if _has_magic(argument) and not os.path.lexists(given):
            matches = [Path(m) for m in sorted(glob.glob(argument, recursive=True))]
            if not matches:
                raise InputError(f"{argument} matches no file; check the pattern (it is expanded by diagnose batch, "
                                 f"relative to the working directory).")
            entries: list[Path] = []
            for match in matches:
                entries.extend(directory_entries(match) if match.is_dir() else [match])
            kept, skipped = exports_among(entries)
        elif given.is_dir():
            kept, skipped = exports_among(directory_entries(given))
            if not kept:
                raise InputError(f"{given} holds no *.sqlite or *.nsys-rep export and no PyTorch-profiler trace "
                                 f"(*.pt.trace.json.gz ...); give the directory of the profiles (subdirectories are "
                                 f"not searched: use a glob such as '{given / '**' / '*.sqlite'}').")
        else:
            kept, skipped = [given], 0
        found.skipped += skipped
        for path in kept:
            add(path)
    return found


# ------------------------------------------------------------------------------------------------------------
# Shards: one part of the profiles for each job of a CI matrix or Slurm array
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (1-based, as `split -n r/I/N` counts)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        index, slash, count = text.strip().partition("/")
        if not (slash and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
            raise InputError(f"--shard {text!r} is not a shard; give I/N, whole numbers with 1 <= I <= N (shard I "
                             f"of N), e.g. --shard 1/4 ... --shard 4/4.")
        return cls(int(index), int(count))

    def holds(self, path: Path) -> bool:
        return shard_of(path, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(path: Path, count: int) -> int:
    """The shard (1 to `count`) of a profile: a SHA-256 of its path as given (POSIX separators), so every job of a
    matrix, on any machine and under any PYTHONHASHSEED, puts a path in the same shard, whatever other files exist.
    Shards are balanced by chance, not exactly."""
    digest = hashlib.sha256(os.fsencode(Path(path).as_posix())).digest()
    return int.from_bytes(digest[:8], "big") % count + 1
