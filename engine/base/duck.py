"""DuckDB connections that never touch the network.

The SQLite scanner extension comes from the `duckdb-extension-sqlite-scanner` wheel, whose
version must equal duckdb's exactly: a mismatched wheel (pip resolves an unpinned scanner to
1.0.3) fails to load with an obscure error, so we check the pair and say what to install.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import os
from pathlib import Path
from typing import Any

import duckdb

from .errors import SetupError

_SCANNER_DIST = "duckdb-extension-sqlite-scanner"
_SCANNER_PKG = "duckdb_extension_sqlite_scanner"


def scanner_extension_path() -> Path:
    duckdb_version = duckdb.__version__
    try:
        scanner_version = importlib.metadata.version(_SCANNER_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise SetupError(
            f"The DuckDB SQLite extension is not installed; run "
            f"`pip install {_SCANNER_DIST}=={duckdb_version}`."
        ) from None
    if scanner_version != duckdb_version:
        raise SetupError(
            f"{_SCANNER_DIST} {scanner_version} does not match duckdb {duckdb_version}; run "
            f"`pip install {_SCANNER_DIST}=={duckdb_version}`."
        )
    root = importlib.resources.files(_SCANNER_PKG)
    path = Path(str(root)) / "extensions" / f"v{duckdb_version}" / "sqlite_scanner.duckdb_extension"
    if not path.is_file():
        raise SetupError(
            f"The SQLite extension file is missing from {_SCANNER_DIST} ({path}); reinstall it with "
            f"`pip install --force-reinstall {_SCANNER_DIST}=={duckdb_version}`."
        )
    return path


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (taskset, a cpuset, a Slurm allocation), else every CPU."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def offline_connection(database: str = ":memory:", *, threads: int | None = None,
                       _unverified_extensions: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with extension auto-install/auto-load disabled, running `threads` threads (None: one per
    usable CPU; DuckDB's own default counts every CPU of the machine, even those the process may not run on)."""
    config: dict[str, str | bool | int | float | list[str]] = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    if _unverified_extensions:
        config["allow_unsigned_extensions"] = True
    config["threads"] = threads or usable_cpus()
    # DuckDB turns an ASOF join whose left side it *estimates* at 64 rows or fewer into a nested loop over every
    # earlier row of the right side plus an arg_max aggregate: quadratic in the rows it actually meets. Its
    # estimate behind a semi join is often 1, so 8,000 steps against 8,000 launches became 33 M joined rows
    # (0.55 s for a 2 MB export), and a long capture would take hours. The ASOF operator itself is a sort and a
    # merge, cheap at any size, so it is always used (a connect-time setting reaches every cursor).
    config["asof_loop_join_threshold"] = 0
    return duckdb.connect(database, config=config)


def sqlite_reader_connection(*, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An offline connection for the one DuckDB instance that loads the SQLite scanner (load_sqlite_scanner).

    The scanner is a file of the installed `duckdb-extension-sqlite-scanner` wheel, trusted as the package's own
    Python code beside it is: whoever could change it could change that code. DuckDB's signature check of the
    35 MB file would cost about 0.08 s on every run, so this instance skips it. Nothing else is ever loaded
    here (auto-install and auto-load are off), and no SQL but the package's own runs in it: team SQL runs in
    the facts' instance, which loads no extension (engine/reading/cache.py)."""
    return offline_connection(threads=threads, _unverified_extensions=True)


def is_interrupt(exc: BaseException) -> bool:
    """DuckDB turns Ctrl-C during a query into RuntimeError('Query interrupted') (or InterruptException when
    interrupted from another thread); either way the user asked to stop."""
    return isinstance(exc, duckdb.InterruptException) or (
        isinstance(exc, RuntimeError) and "interrupted" in str(exc).lower())


def reraise_interrupt(exc: BaseException) -> None:
    """Call first in every handler of DuckDB errors: an interrupt must stop the run, not be reported as bad input."""
    if is_interrupt(exc):
        raise KeyboardInterrupt from None


def load_sqlite_scanner(con: duckdb.DuckDBPyConnection) -> None:
    path = scanner_extension_path()
    con.execute(f"LOAD '{_sql_string(str(path))}'")


def _sql_string(text: str) -> str:
    return text.replace("'", "''")


def sql_literal(text: str) -> str:
    """Quote a Python string as a SQL string literal."""
    return "'" + _sql_string(text) + "'"


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple | list], columns: str = "") -> None:
    """INSERT `rows` into `table` (its columns, or those named in `columns`, e.g. '("key", "value")') as one
    statement with parameters: executemany() runs and commits one INSERT per row, which into a database file
    writes its log once per row (13 rows of profile_info took 85 ms)."""
    if not rows:
        return
    width = len(rows[0])
    values = ", ".join(["(" + ", ".join("?" * width) + ")"] * len(rows))
    con.execute(f"INSERT INTO {table} {columns} VALUES {values}", [v for row in rows for v in row])


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, (duckdb.OutOfMemoryException, MemoryError)) or "out of memory" in str(exc).lower()


def one_row(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> tuple[Any, ...]:
    """The row of a query that always returns exactly one (an aggregate without GROUP BY)."""
    row = con.execute(sql, params or []).fetchone()
    if row is None:
        raise RuntimeError(f"the query returned no row: {sql}")
    return row


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Any:
    """The single value of a one-row, one-column query (an aggregate without GROUP BY)."""
    return one_row(con, sql, params)[0]
