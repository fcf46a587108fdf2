"""Keep the facts' tables compressed, so that millions of rows of _timeline, _idle_gaps and the phase copies fit
in DuckDB's memory limit instead of spilling.

The facts live in an in-memory DuckDB database. DuckDB keeps a table it has just written there uncompressed (a
BIGINT column of 2 M rows holds 16 MB) and compresses it only when the database is checkpointed: bit-packing,
run-length, dictionary and constant encodings (https://duckdb.org/docs/stable/internals/storage). On the 2 M-kernel
benchmark export the facts' tables shrink from 495 MB to 76 MB, and scans of them get faster, not slower.
A CHECKPOINT of the in-memory database compresses what was written since the previous one, so it runs once more
than COMPACT_AFTER_ROWS rows were written since then: after each fact of millions of rows, and seldom otherwise.
"""

from __future__ import annotations

import time
from typing import Any

import duckdb

# Rows written since the last checkpoint worth one (a checkpoint costs about 0.1 s per million rows of a
# timeline-wide table). Rows, not bytes: a table larger than the memory limit goes to DuckDB's temporary files as it
# is written, where memory accounting no longer sees it.
COMPACT_AFTER_ROWS = 250_000
# A checkpoint waits for no other query: while one runs (the --timings spill sampler reads DuckDB's temporary
# files now and then, for a few milliseconds) it is tried again this many times, then left for the next fact.
_TRIES = 5
_RETRY_S = 0.01


def table_rows(con: Any) -> int:
    """Rows of every table of the current database."""
    row = con.execute("SELECT coalesce(sum(estimated_size), 0) FROM duckdb_tables() "
                      "WHERE database_name = current_database()").fetchone()
    return int(row[0]) if row else 0


def table_bytes(con: Any) -> int:
    """Bytes DuckDB holds in memory for tables, compressed or not."""
    row = con.execute("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                      "WHERE tag = 'IN_MEMORY_TABLE'").fetchone()
    return int(row[0]) if row else 0


class Compactor:
    """Checkpoints the in-memory database of the connections it is called with once more than `after_rows` rows
    were written to its tables since its last checkpoint (or since it was made). Call it only on a connection no
    other fact is writing on: a checkpoint needs every other write transaction finished."""

    def __init__(self, con: Any, after_rows: int | None = None) -> None:
        self.after_rows = COMPACT_AFTER_ROWS if after_rows is None else after_rows
        self.compacted = table_rows(con)  # rows right after the last checkpoint

    def __call__(self, con: Any) -> bool:
        """Checkpoint when due; True when it did."""
        rows = table_rows(con)
        self.compacted = min(self.compacted, rows)  # tables dropped since (a phase's copies)
        if rows - self.compacted <= self.after_rows:
            return False
        for attempt in range(_TRIES):
            try:
                con.execute("CHECKPOINT")
            except duckdb.TransactionException:
                if attempt + 1 < _TRIES:
                    time.sleep(_RETRY_S)
                continue
            self.compacted = rows
            return True
        return False
