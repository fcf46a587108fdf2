"""What a fact's query reads, from DuckDB's own parse (json_serialize_sql: every table a FROM or JOIN names, the
query's CTEs left out), and its `-- @needs` compared with it both ways. A parse only: cheap enough to run on every
team fact when a pack loads (engine/facts/loading.py); engine/facts/needs.py adds the bind check.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import duckdb

from ..base.duck import offline_connection, reraise_interrupt, scalar
from .catalog import Fact, render_sql

_NO_LOCATION = 2 ** 63  # json_serialize_sql's query_location of a node that has none (2**64 - 1)


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


def declared_problems(fact: Fact, facts: Collection[str]) -> list[str] | None:
    """`FILE:LINE:COL: message` for each fact of `facts` the query reads without declaring it in `-- @needs`, then
    each declared need it never reads; None when DuckDB cannot parse the query (its compile error says why)."""
    reads = fact_reads(fact, facts)
    if reads is None:
        return None
    found = _undeclared(fact, reads)
    found += [f"{fact.path}:{_needs_line(fact)}:1: fact {fact.name!r} declares -- @needs {need} but its query "
              f"never reads {need!r}; drop it from -- @needs" for need in fact.needs
              if need in facts and need not in reads]
    return found


def undeclared_reads(fact: Fact, facts: Collection[str]) -> list[str]:
    """`FILE:LINE:COL: message` for each fact of `facts` the query reads without declaring it in `-- @needs` (none
    when DuckDB cannot parse the query: its compile error says why)."""
    reads = fact_reads(fact, facts)
    return [] if reads is None else _undeclared(fact, reads)


def _undeclared(fact: Fact, reads: dict[str, int]) -> list[str]:
    return [undeclared_read(fact, read, _position(fact, at)) for read, at in sorted(reads.items(), key=lambda
            item: item[1]) if read not in fact.needs and read != fact.name]
