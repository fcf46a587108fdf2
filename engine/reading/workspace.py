"""The private scratch space of one diagnosis and the DuckDB connections that work in it, within DuckDB's memory
limit (and the address-space limit of the shell); see cache.py for why the canonical tables live in a file.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ..base.duck import offline_connection, reraise_interrupt, sql_literal, sqlite_reader_connection
from ..base.errors import DiagnoseError, SetupError
from ..base.text import is_utf8, shown_path
MEMORY_LIMIT_ENV = "NSYS_DIAGNOSE_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "500MB"
SCRATCH_PREFIX = "nsys-diagnose-"
# Below this address-space limit (ulimit -v) DuckDB cannot even load its SQLite extension: it aborts.
MIN_ADDRESS_SPACE = 1 << 30


def _size_bytes(text: str) -> float | None:
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40, "KIB": 1 << 10, "MIB": 1 << 20,
             "GIB": 1 << 30, "TIB": 1 << 40, "B": 1}
    number = text.upper().rstrip("BITKMG ")
    unit = text.upper()[len(number):].strip() or "B"
    try:
        return float(number) * units[unit]
    except (ValueError, KeyError):
        return None


def address_space_limit() -> int | None:
    """The soft address-space limit of this process (ulimit -v) in bytes, None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def check_address_space() -> None:
    """DuckDB aborts the process (no exception to catch) when it cannot reserve address space, so a limit too
    small to work in is refused up front with one sentence."""
    limit = address_space_limit()
    if limit is not None and limit < MIN_ADDRESS_SPACE:
        raise SetupError(f"the address-space limit of this shell (ulimit -v) is {limit >> 20} MiB, too small for "
                         f"DuckDB to run in; raise it to at least {MIN_ADDRESS_SPACE >> 10} KiB "
                         f"(`ulimit -v {MIN_ADDRESS_SPACE >> 10}` or `ulimit -v unlimited`).")


def memory_limit(share: int = 1) -> str:
    """DuckDB's memory limit for one diagnosis; `share` diagnoses running side by side (the ranks of a run)
    split it. Set NSYS_DIAGNOSE_MEMORY_LIMIT (e.g. 4GB) to give DuckDB more or less. Under an address-space
    limit (ulimit -v) DuckDB gets at most a third of it: the rest is for Python, threads and the libraries."""
    text = (os.environ.get(MEMORY_LIMIT_ENV) or DEFAULT_MEMORY_LIMIT).strip()
    total = _size_bytes(text)
    if total is None:
        return text  # DuckDB will say what is wrong with it
    cap = address_space_limit()
    if share <= 1 and (cap is None or total <= cap / 3):
        return text
    if cap is not None:
        total = min(total, cap / 3)
    return f"{max(int(total / share) >> 20, 256)}MB"


class OutOfMemory(DiagnoseError):
    """DuckDB hit its memory limit (or the machine ran out of memory)."""


def out_of_memory_error(doing: str) -> OutOfMemory:
    limit = (os.environ.get(MEMORY_LIMIT_ENV) or DEFAULT_MEMORY_LIMIT).strip()
    return OutOfMemory(f"ran out of memory while {doing} (DuckDB's memory limit is {limit}); give it more with "
                       f"{MEMORY_LIMIT_ENV}=4GB (or more), close other programs, or diagnose on a machine "
                       f"with more memory.")


@dataclass
class Workspace:
    """A private scratch directory, and the DuckDB connection where facts run once the canonical tables are
    attached (`open_facts`). The connection that reads the SQLite export is a separate DuckDB instance
    (`reader`): the facts' instance never loads the SQLite extension, whose table functions ignore
    DuckDB's external-access switch."""

    root: Path
    threads: int | None = None
    share: int = 1
    _con: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)

    @classmethod
    def create(cls, threads: int | None = None, share: int = 1) -> "Workspace":
        if not is_utf8(tempfile.gettempdir()):
            raise SetupError(f"the temporary directory {shown_path(tempfile.gettempdir())} has a name that is not "
                             f"valid UTF-8, which DuckDB cannot open; point TMPDIR at another directory.")
        return cls(Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")), threads, share)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise RuntimeError("the canonical tables are not attached yet")
        return self._con

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB instance of its own, for reading the export into a canonical database (close it after)."""
        con = sqlite_reader_connection(threads=self.threads)
        try:
            _configure(con, memory_limit(self.share), self.root / "spill")
        except BaseException:
            con.close()
            raise
        return con

    def open_facts(self, canonical: Path) -> duckdb.DuckDBPyConnection:
        """The facts' connection: an in-memory scratch database (spilling into the workspace) with `canonical`
        attached read-only as `canon`, and external access disabled before anything of `canonical` is read."""
        con = offline_connection(threads=self.threads)
        try:
            _configure(con, memory_limit(self.share), self.root / "spill")
            paths = [str(canonical), str(canonical) + ".wal"]
            con.execute(f"SET allowed_paths = [{', '.join(sql_literal(p) for p in paths)}]")
            con.execute("SET enable_external_access = false")
            con.execute(f"ATTACH {sql_literal(str(canonical))} AS canon (READ_ONLY)")
        except BaseException:
            con.close()
            raise
        self._con = con
        return con

    def close_facts(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def close(self) -> None:
        try:
            self.close_facts()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _configure(con: duckdb.DuckDBPyConnection, memory: str, spill: Path) -> None:
    con.execute(f"SET temp_directory = {sql_literal(str(spill))}")
    try:
        con.execute(f"SET memory_limit = {sql_literal(memory)}")
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        raise SetupError(f"{MEMORY_LIMIT_ENV}={os.environ.get(MEMORY_LIMIT_ENV)!r} is not a memory size "
                         f"DuckDB accepts; use a size such as 4GB or 512MB.") from None
    # Row order of the canonical tables carries no meaning (facts order explicitly); letting DuckDB
    # insert in any order halves the time to copy a big table out of SQLite.
    con.execute("SET preserve_insertion_order = false")
