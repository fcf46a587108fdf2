"""Cross-rank facts of a multi-rank run: documented SQL over one row per rank, kept apart from the profile facts.

Each rank is diagnosed on its own first (engine/runs/api.diagnose); engine/runs/multirank.py
then writes the per-rank numbers
into the in-memory DuckDB table `ranks` (columns in RANK_COLUMNS) and runs the *.sql files of this
package over it. They use the header format of every fact (`-- @fact`, `-- @doc`, `-- @column` for every
column, `-- @needs`), so `diagnose rules` and rule files treat them like any other fact; single-profile
runs never load them.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from ..pack.layout import bundled, CROSS_RANK_DIR
from ..base.duck import insert_rows, offline_connection
from .compute import FactResult, FactSet
from .catalog import Fact, FactError, parse_fact, run_order
from .materialize import materialize

# The input table: one row per rank, from that rank's own report. (name, SQL type, description)
RANK_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("rank", "INTEGER", "Rank number (from the file name, else the position in sorted order)."),
    ("path", "VARCHAR", "The rank's export as given."),
    ("file", "VARCHAR", "Its file name."),
    ("pid", "BIGINT", "Process that ran most kernels on the rank's GPU."),
    ("device_id", "INTEGER", "The rank's GPU: the one with the most kernel time in its export."),
    ("gpu_name", "VARCHAR", "Its name as the export records it."),
    ("gpus_used", "INTEGER", "GPUs that ran kernels in the rank's export (usually 1)."),
    ("window_ns", "BIGINT", "The GPU's window: first GPU operation to the end of the last (ns)."),
    ("utilization", "DOUBLE", "Busy share of that window, union of all GPU work (0-1)."),
    ("kernel_time_ns", "BIGINT", "Sum of the GPU's kernel durations (ns)."),
    ("compute_ns", "BIGINT", "Union of its compute (non-communication) kernels (ns)."),
    ("comm_ns", "BIGINT", "Union of its communication (NCCL) kernels (ns)."),
    ("exposed_comm_ns", "BIGINT", "Communication with no compute kernel beside it (ns)."),
    ("comm_kernel_count", "BIGINT", "Communication kernels."),
    ("step_time_ns", "DOUBLE", "Mean NVTX decode step, when the export has decode ranges (ns)."),
    ("verdict", "VARCHAR", "Category of the rank's own verdict, NULL when it found no bottleneck."),
)


def ranks_table_ddl() -> str:
    """CREATE TABLE of the input table `ranks` (RANK_COLUMNS)."""
    return "CREATE TABLE ranks (" + ", ".join(f'"{n}" {t}' for n, t, _ in RANK_COLUMNS) + ")"


def run_fact_files() -> list[Path]:
    return sorted(bundled(CROSS_RANK_DIR).glob("*.sql"))


def load_run_facts() -> dict[str, Fact]:
    """The cross-rank facts by name (read once; every rule file with `scope: run` is checked against them)."""
    return dict(_load_run_facts())


@functools.cache
def _load_run_facts() -> dict[str, Fact]:
    facts: dict[str, Fact] = {}
    for path in run_fact_files():
        fact = parse_fact(path.read_text(encoding="utf-8"), str(path))
        if fact.name in facts:
            raise FactError(f"{path}: fact {fact.name!r} is already defined in {facts[fact.name].path}", fact.name)
        facts[fact.name] = fact
    return facts


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def compute_run_facts(rows: list[dict[str, Any]], facts: dict[str, Fact] | None = None) -> FactSet:
    """Run the cross-rank facts over `rows` (one dict per rank with the RANK_COLUMNS keys)."""
    facts = facts if facts is not None else load_run_facts()
    con = offline_connection(threads=1)  # a handful of rows: threads would only cost start-up time
    try:
        con.execute(ranks_table_ddl())
        insert_rows(con, "ranks", [[row.get(n) for n, _, _ in RANK_COLUMNS] for row in rows])
        out = FactSet()
        for fact in run_order(facts):
            materialize(con, fact)
            if fact.is_helper:
                continue
            cursor = con.execute(f'SELECT * FROM "{fact.name}"')
            columns = [d[0] for d in cursor.description]
            result_rows = [{c: _clean(v) for c, v in zip(columns, row)} for row in cursor.fetchall()]
            out.results[fact.name] = FactResult(fact, columns, result_rows)
        return out
    finally:
        con.close()
