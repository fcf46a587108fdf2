"""Where the canonical tables live: a compressed DuckDB file, cached beside the profile and reused while the
profile is unchanged, plus a private scratch directory for everything else.

Why files and not DuckDB's memory: an in-memory table of 5 M kernels takes about 1 GB uncompressed, while the
same rows in a database file are compressed (about 80 MB) and can be evicted, so peak memory stays bounded
by the memory limit set here. Facts then run in a scratch database that attaches the canonical file.

Layout of one diagnosis:
    <scratch dir>/scratch.duckdb     facts and helper tables (deleted at close)
    <scratch dir>/spill/             DuckDB's spill files for sorts and joins larger than the memory limit
    <cache file>                     the canonical tables, `<profile>.nsys-diagnose.duckdb` beside the profile
                                     (or in NSYS_DIAGNOSE_CACHE_DIR / the user cache directory when the
                                     profile's directory is not writable); in the scratch dir with no cache.
A cache is first written under a temporary name in its final directory and renamed into place only when
complete, so an interrupted run never leaves a half-written cache behind to be trusted later.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb

from .duck import offline_connection, reraise_interrupt, sql_literal
from .errors import SetupError

CACHE_FORMAT = 4          # bump whenever the canonical tables or their state change shape
CACHE_SUFFIX = ".nsys-diagnose.duckdb"
CACHE_DIR_ENV = "NSYS_DIAGNOSE_CACHE_DIR"
MEMORY_LIMIT_ENV = "NSYS_DIAGNOSE_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "1GB"
_HASHED_BYTES = 1 << 20   # the fingerprint hashes the first and last MiB of the profile


def memory_limit(share: int = 1) -> str:
    """DuckDB's memory limit for one diagnosis; `share` diagnoses running side by side (the ranks of a run)
    split it. Set NSYS_DIAGNOSE_MEMORY_LIMIT (e.g. 4GB) to give DuckDB more or less."""
    text = (os.environ.get(MEMORY_LIMIT_ENV) or DEFAULT_MEMORY_LIMIT).strip()
    if share <= 1:
        return text
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40, "KIB": 1 << 10, "MIB": 1 << 20,
             "GIB": 1 << 30, "TIB": 1 << 40, "B": 1}
    number = text.upper().rstrip("BITKMG ")
    unit = text.upper()[len(number):].strip() or "B"
    try:
        total = float(number) * units[unit]
    except (ValueError, KeyError):
        return text  # DuckDB will say what is wrong with it
    return f"{max(int(total / share) >> 20, 256)}MB"


def fingerprint(profile: Path) -> str:
    """What must be unchanged for a cache to be reused: the profile's size, modification time and the hash
    of its first and last MiB, and the versions of this tool, DuckDB and the cache layout."""
    st = profile.stat()
    digest = hashlib.sha256()
    with open(profile, "rb") as fh:
        digest.update(fh.read(_HASHED_BYTES))
        if st.st_size > _HASHED_BYTES:
            fh.seek(max(st.st_size - _HASHED_BYTES, _HASHED_BYTES))
            digest.update(fh.read(_HASHED_BYTES))
    try:
        tool = importlib.metadata.version("nsys-diagnose")
    except importlib.metadata.PackageNotFoundError:
        tool = "0+unknown"
    return json.dumps({"format": CACHE_FORMAT, "tool": tool, "duckdb": duckdb.__version__, "size": st.st_size,
                       "mtime_ns": st.st_mtime_ns, "sha256": digest.hexdigest()}, sort_keys=True)


def _writable_dir(d: Path) -> bool:
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


def cache_path(profile: Path) -> Path | None:
    """Where the cache of `profile` lives, or None when no directory for it is writable."""
    name = profile.name + CACHE_SUFFIX
    keyed = hashlib.sha1(str(profile.resolve()).encode()).hexdigest()[:16] + "-" + name
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        d = Path(override)
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return d / keyed if _writable_dir(d) else None
    if _writable_dir(profile.parent):
        return profile.parent / name
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nsys-diagnose"
    try:
        user.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return user / keyed if _writable_dir(user) else None


@dataclass
class Workspace:
    """A scratch directory and a DuckDB connection whose main database lives in it."""

    root: Path
    con: duckdb.DuckDBPyConnection

    @classmethod
    def create(cls, threads: int | None = None, share: int = 1) -> "Workspace":
        root = Path(tempfile.mkdtemp(prefix="nsys-diagnose-"))
        try:
            con = offline_connection(str(root / "scratch.duckdb"), threads=threads)
            con.execute(f"SET temp_directory = {sql_literal(str(root / 'spill'))}")
            limit = memory_limit(share)
            try:
                con.execute(f"SET memory_limit = {sql_literal(limit)}")
            except duckdb.Error as exc:
                reraise_interrupt(exc)
                con.close()
                raise SetupError(f"{MEMORY_LIMIT_ENV}={os.environ.get(MEMORY_LIMIT_ENV)!r} is not a memory size "
                                 f"DuckDB accepts; use a size such as 4GB or 512MB.") from None
            # Row order of the canonical tables carries no meaning (facts order explicitly); letting DuckDB
            # insert in any order halves the time to copy a big table out of SQLite.
            con.execute("SET preserve_insertion_order = false")
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cls(root, con)

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def read_state(con: duckdb.DuckDBPyConnection, catalog: str) -> dict[str, str] | None:
    """The key/value state saved with a canonical database, or None when it has none (not one of ours)."""
    try:
        return dict(con.execute(f'SELECT key, value FROM "{catalog}"._state').fetchall())
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        return None


def write_state(con: duckdb.DuckDBPyConnection, catalog: str, state: dict[str, str]) -> None:
    con.execute(f'CREATE OR REPLACE TABLE "{catalog}"._state (key VARCHAR, value VARCHAR)')
    con.executemany(f'INSERT INTO "{catalog}"._state VALUES (?, ?)', list(state.items()))


def partial_path(final: Path) -> Path:
    """A unique temporary name beside `final` (same file system, so the rename is atomic)."""
    fd, name = tempfile.mkstemp(prefix=final.name + ".partial-", dir=final.parent)
    os.close(fd)
    os.unlink(name)  # DuckDB must create the file itself
    return Path(name)


def remove_database_files(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
