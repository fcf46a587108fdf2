"""Checking that DuckDB compiles the regular expressions of a pack (RE2 syntax), cheaply: every start of the
program loads the bundled stacks and operation classes, dozens of patterns.

Starting a DuckDB database costs several milliseconds and one query per pattern a third of one each, so the loaders
share one in-memory database per process and compile all of a file's patterns in one query first.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection

import duckdb

_lock = threading.Lock()
_scratch: tuple[int, duckdb.DuckDBPyConnection] | None = None


def _close_before_fork() -> None:
    """Close the shared database before the process forks: a child forked while DuckDB's threads hold their locks
    can hang in its own first DuckDB call (a process pool's workers did)."""
    global _scratch
    with _lock:
        if _scratch is not None:
            _scratch[1].close()
            _scratch = None


os.register_at_fork(before=_close_before_fork)


def scratch_cursor() -> duckdb.DuckDBPyConnection:
    """A new connection (close it after use) to this process's in-memory database for statements that only compile
    something. A forked child starts its own: a DuckDB instance does not survive a fork."""
    global _scratch
    with _lock:
        if _scratch is None or _scratch[0] != os.getpid():
            _scratch = (os.getpid(), duckdb.connect())
        return _scratch[1].cursor()


def regex_problem(con: duckdb.DuckDBPyConnection, pattern: str) -> str | None:
    """Why DuckDB does not compile `pattern`, in its words; None when it does."""
    try:
        con.execute("SELECT regexp_matches('', ?)", [pattern])
    except duckdb.Error as exc:
        return str(exc).splitlines()[0].removeprefix("Invalid Input Error: ")
    return None


def compiled_together(con: duckdb.DuckDBPyConnection, patterns: Collection[str]) -> frozenset[str]:
    """All of `patterns` when DuckDB compiles every one of them (one query), else none: the caller then checks
    each pattern on its own, to name the first one that does not compile."""
    texts = sorted({p for p in patterns if isinstance(p, str) and p})
    if not texts:
        return frozenset()
    try:
        # count(m), not count(*): the matches must be computed for a bad pattern to raise.
        con.execute("SELECT count(m) FROM (SELECT regexp_matches('', p) AS m FROM unnest(?::VARCHAR[]) t(p))",
                    [texts]).fetchall()
    except duckdb.Error:
        return frozenset()
    return frozenset(texts)
