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

import json
from collections.abc import Collection
from typing import Any

import duckdb

from ..base.duck import offline_connection, reraise_interrupt, scalar
from .catalog import Fact, render_sql, with_needs
from .compute import _define_metric_names, _define_phases
from .compile_check import fact_column_types
from ..reading.export import empty_export

_NO_LOCATION = 2 ** 63  # json_serialize_sql's query_location of a node that has none (2**64 - 1)
_SCHEMA = "needs_check"  # where the needed facts of the fact being bound are created, emptied for each fact


def fact_reads(fact: Fact, names: Collection[str]) -> dict[str, int] | None:
    """The facts among `names` that the query of `fact` reads, each with the byte offset of its first read in
    the file (or _NO_LOCATION); None when DuckDB cannot parse the query (its compile error says why)."""
    con = offline_connection(threads=1)  # a parse only: nothing of a run's connection
    try:
        tree = json.loads(scalar(con, "SELECT json_serialize_sql(?)", [render_sql(fact, keep_lines=True)]))
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        return None
    finally:
        con.close()
    if tree.get("error"):
        return None
    found: dict[str, int] = {}
    _collect_reads(tree.get("statements", []), {n.lower(): n for n in names}, frozenset(), found)
    return found


def _collect_reads(node: Any, names: dict[str, str], ctes: frozenset[str], found: dict[str, int]) -> None:
    if isinstance(node, list):
        for item in node:
            _collect_reads(item, names, ctes, found)
        return
    if not isinstance(node, dict):
        return
    cte_map = node.get("cte_map")
    if isinstance(cte_map, dict):
        ctes = ctes | {str(entry.get("key", "")).lower() for entry in cte_map.get("map", [])}
    if node.get("type") == "BASE_TABLE" and not node.get("schema_name") and not node.get("catalog_name"):
        table = str(node.get("table_name", "")).lower()
        if table in names and table not in ctes:
            found.setdefault(names[table], int(node.get("query_location", _NO_LOCATION)))
    for value in node.values():
        if isinstance(value, (dict, list)):
            _collect_reads(value, names, ctes, found)


def _position(fact: Fact, location: int) -> str:
    """`FILE:LINE:COL` of a byte offset into the file's query (render_sql keep_lines keeps the file's lines)."""
    if not 0 <= location < _NO_LOCATION:
        return f"{fact.path}:{fact.line}:1"
    before = render_sql(fact, keep_lines=True).encode("utf-8")[:location]
    line, start = before.count(b"\n") + 1, before.rfind(b"\n") + 1
    return f"{fact.path}:{line}:{location - start + 1}"


def _needs_line(fact: Fact) -> int:
    lines = fact.sql.splitlines()
    return next((i for i, line in enumerate(lines, 1) if line.lstrip().startswith("-- @needs")), fact.line)


def undeclared_read(fact: Fact, read: str, where: str) -> str:
    return f"{where}: fact {fact.name!r} reads {read!r} but does not declare -- @needs {read}"


def needs_problems(facts: dict[str, Fact], names: Collection[str] | None = None) -> list[str]:
    """One `FILE:LINE:COL: message` per fact of `names` (default: all of `facts`) that reads a fact its
    `-- @needs` does not name, or names a fact it never reads; then, for the facts whose reads the parse found
    declared, each query bound with only its needed facts present (bind_problems)."""
    problems: list[str] = []
    clean: list[str] = []
    for name in sorted(names if names is not None else facts):
        fact = facts[name]
        reads = fact_reads(fact, facts.keys())
        if reads is None:
            continue  # does not parse: the compile check (check_facts) says where
        found = [undeclared_read(fact, read, _position(fact, at)) for read, at in sorted(reads.items(), key=lambda
                 item: item[1]) if read not in fact.needs and read != fact.name]
        found += [f"{fact.path}:{_needs_line(fact)}:1: fact {fact.name!r} declares -- @needs {need} but its query "
                  f"never reads {need!r}; drop it from -- @needs" for need in fact.needs
                  if need in facts and need not in reads]
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
