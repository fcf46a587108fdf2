"""Facts computed again over each inference phase, so rules can judge a phase on its own: long compute-bound
prefills no longer hide an eager, launch-bound decode behind a healthy whole-run average.

Every CUDA call made inside a phase range belongs to that phase (_call_phases), and so do the GPU operations it
issued (same process and correlation id) and the idle gap before each of them: each operation owns the gap
before it, so the phases split every device window between them (gpu_utilization). For each phase a DuckDB
schema holds those rows under the canonical names (api_calls, kernels, graph_launches, memcpys, memsets) with
the run's _timeline and _idle_gaps cut to the phase, and the facts marked `-- @per-phase` are computed again
there, with the facts they need. Everything else (names, devices, NVTX, OS calls, the server's idle stretches,
the causes of each gap) is read from the whole run, where it was computed with all the context.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, TypeVar

from ..base.duck import sql_literal
from ..reading.canonical import STORED, by_id_sql, by_id_view, stored_columns, view_sql
from .compact import Compactor
from .catalog import Fact, run_order, with_needs
from .loading import load_facts
from .materialize import materialize
from .parallel import run_facts
from .window import cut_predicate
from ..base.timings import Timings, timed

T = TypeVar("T")

# Canonical views replaced in a phase by the rows that belong to it, and the key that ties a row to its call.
_BY_CALL = ("kernels", "graph_launches", "memcpys", "memsets")
_KEYS = {"api_calls": "p.global_tid = x.global_tid AND p.start_ns = x.start_ns",
         **{view: "p.pid = x.pid AND p.correlation_id = x.correlation_id" for view in _BY_CALL}}
# The name tables the stored views join back (canonical.STORED).
_NAME_TABLES = ("api_names", "kernel_names")
# The phase of work that no phase range claims (as in the `phases` fact).
OTHER = "other"


def phases_to_judge(phase_rows: list[dict[str, Any]]) -> list[str]:
    """The phases worth judging one by one: those with GPU work, when the work splits into at least two of them
    and one is a named phase. A run with no phase ranges, or all of its work in one phase, is judged whole."""
    busy = [r["phase"] for r in phase_rows if (r.get("kernel_count") or 0) > 0]
    return busy if len(busy) >= 2 and any(p != OTHER for p in busy) else []


def from_run(facts: dict[str, Fact]) -> set[str]:
    """The bundled facts every phase reads from the whole run (`-- @whole-run`). _timeline and _idle_gaps are cut to
    the phase, not computed again: an idle gap's cause depends on what the host did before the phase's operation,
    in any phase."""
    return {f.name for f in facts.values() if f.whole_run and not f.team}


@functools.cache
def bundled_from_run() -> frozenset[str]:
    """from_run of the bundled facts: what must have been computed before the phases can be."""
    return frozenset(from_run(load_facts()))


def per_phase_order(facts: dict[str, Fact]) -> list[Fact]:
    """The bundled facts marked per-phase, and the facts they need that are not read from the run, in run order."""
    wanted = with_needs(facts, [f.name for f in facts.values() if f.per_phase and not f.team], skip=from_run(facts))
    return [f for f in run_order(facts) if f.name in wanted]


def phase_scope(run: str, phase: str) -> tuple[str, str, str]:
    """How `phase`'s rows are told from the run's (`run`: the run's schema): (the calls it claims, whether a row is
    the phase's when its call is among them (SEMI JOIN) or when it is not (ANTI JOIN), the filter on a row's phase)."""
    if phase == OTHER:
        return f"{run}._call_phases", "ANTI JOIN", "phase IS NULL"
    return (f"(SELECT * FROM {run}._call_phases WHERE phase = {sql_literal(phase)})", "SEMI JOIN",
            f"phase = {sql_literal(phase)}")


def compute_phase(con: Any, phase: str, schema: str, ordered: list[Fact], params: dict[str, float] | None,
                  collect: Callable[[Any, Fact], T], workers: int = 1, since_ns: int | None = None,
                  timings: Timings | None = None, compact: Compactor | None = None) -> dict[str, T]:
    """Create `schema` holding `phase`'s rows and compute `ordered` in it, `workers` facts at once
    (engine/facts/parallel.py); returns collect(cursor, fact) of each per-phase fact, called while the schema is
    current. `since_ns`: where the steady window begins (engine/facts/window.py), when the run is judged after its
    start-up. `timings`: record each fact's cost there, under the phase's name. `compact`: compresses the phase's
    copies and tables as they grow (engine/facts/compact.py). The schema is dropped afterwards and the search path
    restored."""
    db = con.execute("SELECT current_database()").fetchone()[0]
    run = f'"{db}".main'
    claimed, keep, tagged = phase_scope(run, phase)
    stored = f"{schema}_stored"
    search_path = f"SET search_path = {sql_literal(f'{schema},main')}"
    con.execute(f'CREATE SCHEMA "{schema}"')
    con.execute(f'CREATE SCHEMA "{stored}"')
    try:
        con.execute(search_path)
        with timings.fact(con, phase, "(copy the phase's rows)") if timings else contextlib.nullcontext():
            _copy_rows(con, run, stored, claimed, keep, tagged, since_ns)
            if compact:
                compact(con)

        def compute(cursor: Any, fact: Fact) -> T | None:
            with timed(timings, cursor, phase, fact):
                # The whole run already checked each query's columns, over views of the same columns as these.
                materialize(cursor, fact, params, check_columns=False)
                if compact and workers == 1:
                    compact(cursor)
                return collect(cursor, fact) if fact.per_phase else None

        found = run_facts(con, ordered, compute, workers=workers, setup=[search_path])
        return {name: value for name, value in found.items() if value is not None}
    finally:
        con.execute("RESET search_path")
        con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        con.execute(f'DROP SCHEMA IF EXISTS "{stored}" CASCADE')


def _copy_rows(con: Any, run: str, stored: str, claimed: str, keep: str, tagged: str, since_ns: int | None) -> None:
    """The phase's rows, under the canonical names in the current schema; `claimed` holds the calls of the phase
    and `keep` says whether a row is the phase's when its call is among them (SEMI JOIN) or when it is not."""
    # The phase's rows are copied once into tables (several facts read each), but for a named phase's calls, which
    # _call_phases holds already. Views stored with their names as ids (kernels, API calls) are copied in that
    # form, under the canonical view that joins the names back.
    for names in _NAME_TABLES:
        con.execute(f'CREATE VIEW "{stored}"."{names}" AS SELECT * FROM canon."{names}"')
    for view, key in _KEYS.items():
        if view == "api_calls" and keep == "SEMI JOIN":
            # A named phase's calls are rows of _call_phases, which keeps every stored column of the calls inside
            # phase ranges, cut to the steady window when the run was: a filter, not a copy.
            columns = ", ".join(f'"{c.name}"' for c in stored_columns(view))
            con.execute(f'CREATE VIEW "{stored}"."{view}" AS SELECT {columns} FROM {run}._call_phases '
                        f"WHERE {tagged}")
        elif view in STORED:
            # Read from the stored table, which the steady window does not cut: cut here the same way.
            cut = "" if since_ns is None else f" WHERE {cut_predicate(view, since_ns, 'x')}"
            con.execute(f'CREATE TABLE "{stored}"."{view}" AS SELECT x.* FROM canon."{view}" x {keep} {claimed} '
                        f"p ON {key}{cut}")
        if view in STORED:
            con.execute(f'CREATE VIEW "{view}" AS {view_sql(view, chr(34) + stored + chr(34))}')
            con.execute(f'CREATE VIEW "{by_id_view(view)}" AS {by_id_sql(view, chr(34) + stored + chr(34))}')
        else:
            con.execute(f"CREATE TABLE {view} AS SELECT x.* FROM {run}.{view} x {keep} {claimed} p ON {key}")
    # The run's timeline, gaps and glue runs carry the phase of each operation: a filter picks the phase's. A glue
    # run never spans two phases, and counts its repeats within its phase too (rules/facts/_glue_runs.sql).
    con.execute(f"CREATE VIEW _timeline AS SELECT * FROM {run}._timeline WHERE {tagged}")
    con.execute(f"CREATE VIEW _idle_gaps AS SELECT * FROM {run}._idle_gaps WHERE {tagged}")
    con.execute(f"CREATE VIEW _glue_runs AS SELECT * REPLACE (phase_repeats AS repeats) FROM {run}._glue_runs "
                f"WHERE {tagged} AND phase_repeated")
