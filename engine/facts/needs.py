"""Each fact's `-- @needs` against the facts its SQL reads: a fact that reads another without declaring it works
only while the run order happens to compute the other first, and a declared need it never reads makes the run
compute a fact for nothing.

Two checks, one message each (`FILE:LINE:COL: fact 'x' reads 'y' but does not declare -- @needs y`):
- what the query reads, from DuckDB's own parse (json_serialize_sql: every table a FROM or JOIN names, the
  query's CTEs left out), compared with the declared needs both ways;
- the query bound over empty canonical tables beside which only the facts it needs, directly or not, exist
  (each as an empty table of its compiled columns), so a read the parse could not see fails as in a run whose
  order left the fact out.
"""

from __future__ import annotations

from collections.abc import Collection

import duckdb

from .catalog import Fact, render_sql, with_needs
from .reads import declared_problems, undeclared_read
from .compute import _define_metric_names, _define_phases
from .compile_check import fact_column_types
from ..reading.export import empty_export

_SCHEMA = "needs_check"  # where the needed facts of the fact being bound are created, emptied for each fact


def needs_problems(facts: dict[str, Fact], names: Collection[str] | None = None) -> list[str]:
    """One `FILE:LINE:COL: message` per fact of `names` (default: all of `facts`) that reads a fact its
    `-- @needs` does not name, or names a fact it never reads; then, for the facts whose reads the parse found
    declared, each query bound with only its needed facts present (bind_problems)."""
    problems: list[str] = []
    clean: list[str] = []
    for name in sorted(names if names is not None else facts):
        found = declared_problems(facts[name], facts)
        if found is None:
            continue  # does not parse: the compile check (check_facts) says where
        problems += found
        if not found:
            clean.append(name)
    return problems + bind_problems(facts, clean)


def bind_problems(facts: dict[str, Fact], names: Collection[str]) -> list[str]:
    """Bind the query of each fact of `names` over empty canonical tables beside which only the facts it needs
    (directly or not) exist: a fact that reads any other fails as `fact 'x' reads 'y' but does not declare`.
    Facts that do not compile over the empty export at all are left to check_facts()."""
    if not names:
        return []
    columns = fact_column_types(facts, facts.keys())
    problems: list[str] = []
    with empty_export() as export:
        con = export.con
        _define_phases(con, None)
        _define_metric_names(con)
        for name in sorted(names):
            fact = facts[name]
            needed = with_needs(facts, fact.needs)
            if not needed <= columns.keys():
                continue
            con.execute(f"CREATE SCHEMA {_SCHEMA}")
            try:
                for need in sorted(needed):
                    defined = ", ".join(f'"{column}" {kind}' for column, kind in columns[need])
                    con.execute(f'CREATE TABLE {_SCHEMA}."{need}" ({defined})')
                con.execute(f"SET search_path = '{_SCHEMA},main'")
                con.execute(f"PREPARE {_SCHEMA} AS {render_sql(fact)}")  # binds the query, runs nothing
                con.execute(f"DEALLOCATE {_SCHEMA}")
            except duckdb.Error as exc:  # other errors (a misspelt column ...) are check_facts()'s to report
                missing = next((other for other in facts if f'name {other} does not exist' in str(exc)), None)
                if isinstance(exc, duckdb.CatalogException) and missing is not None:
                    problems.append(undeclared_read(fact, missing, f"{fact.path}:{fact.line}:1"))
            finally:
                con.execute("RESET search_path")
                con.execute(f"DROP SCHEMA {_SCHEMA} CASCADE")
    return problems
