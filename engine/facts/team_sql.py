"""The sandbox check of team SQL, on DuckDB's own parse of the query before it runs: one SELECT, reading only the
canonical views, the facts and its own CTEs, with no table function but a few generators and no function that
reads the database's state (docs/team-rules.md, "a fact is a SQL file").
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import duckdb

from ..base.duck import offline_connection, reraise_interrupt, scalar
from ..base.text import did_you_mean
from .catalog import Fact, FactError, render_sql


def _statement_kind(statement: Any) -> str:
    """What a statement is, as its author wrote it: DuckDB files INSTALL and FORCE INSTALL under the statement
    type LOAD (https://duckdb.org/docs/stable/extensions/overview), so those take the words the statement opens
    with."""
    if statement.type == duckdb.StatementType.LOAD:
        words = statement.query.split()
        return " ".join(words[:2] if words[:1] and words[0].upper() == "FORCE" else words[:1]).upper() or "LOAD"
    return statement.type.name


def check_team_sql(fact: Fact) -> None:
    """Team SQL is one SELECT (or WITH ... SELECT): nothing that changes state or reaches outside."""
    try:
        statements = duckdb.extract_statements(render_sql(fact))
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        raise FactError(f"{fact.path}: fact {fact.name!r} is not valid SQL: {str(exc).splitlines()[0]}",
                        fact.name) from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kinds = ", ".join(_statement_kind(st) for st in statements) or "nothing"
        raise FactError(f"{fact.path}: fact {fact.name!r} must be a single SELECT query over the canonical views "
                        f"and facts (found {kinds})", fact.name)


# What team SQL may read (docs/team-rules.md, docs/security.md), checked on the query's syntax tree before it runs:
# tables by their bare names, only the canonical views, the facts, the query's own CTEs and the tables the runner
# defines beside them (configuration, no state: engine/facts/compute.py, opclasses.py); table functions, only
# these; and no function that reads the database's state instead of computing on values (its settings, catalog,
# files, secrets or the environment). The tree is DuckDB's own parse, json_serialize_sql
# (https://duckdb.org/docs/stable/data/json/sql_to_and_from_json), so no spelling of a name escapes it.
TEAM_TABLE_FUNCTIONS = ("range", "generate_series", "unnest")
# Tables the engine fills for the facts to read (engine/facts/compute.py): no fact may take their names.
RUNNER_TABLES = frozenset({"_phase_patterns", "_metric_names", "_op_classes", "_gemm_precisions", "_stacks",
                           "_api_name_patterns"})
# DuckDB's metadata functions (https://duckdb.org/docs/stable/sql/meta/duckdb_table_functions), pragmas, the
# PostgreSQL catalog functions and JSON-serialized SQL that would run another query.
_STATE_FUNCTION_PREFIXES = ("duckdb_", "pragma_", "pg_", "has_", "json_execute")
_STATE_FUNCTIONS = frozenset({
    "current_setting", "getenv", "getvariable", "current_database", "current_catalog", "current_schema",
    "current_schemas", "current_query", "current_user", "current_role", "session_user", "in_search_path",
    "col_description", "obj_description", "shobj_description", "format_pg_type", "map_to_pg_oid",
    "json_serialize_sql", "json_deserialize_sql", "which_secret", "query", "query_table"})
_FUNCTION_SCHEMAS = ("", "main", "pg_catalog")
_NO_LOCATION = 2 ** 63  # json_serialize_sql's query_location of a node that has none (2**64 - 1)


def team_sql_problem(fact: Fact, readable: Collection[str]) -> str | None:
    """Why the team fact `fact` may not run: `FILE:LINE:COL: team fact 'F' was stopped by the sandbox: it reads
    ...`, naming what it reads and what team SQL may read; None when it reads only the canonical views, the facts
    `readable` (names of facts), its own CTEs and the allowed table functions, and calls no function that reads
    the database's state. SQL that does not parse is left to the run, whose error says where."""
    from ..reading.canonical import STORED, VIEWS, by_id_view

    sql = render_sql(fact, keep_lines=True)
    con = offline_connection(threads=1)  # a parse: no table, no extension, nothing of the run's connection
    try:
        tree = json.loads(scalar(con, "SELECT json_serialize_sql(?)", [sql]))
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        tree = {"error": True, "error_type": "internal"}
    finally:
        con.close()
    # the views of kernels and CUDA calls without their names are the same rows, cheaper to scan: any fact may read them
    views = [v for v in VIEWS if not v.startswith("_")] + [by_id_view(v) for v in STORED]
    known = {n.lower() for n in (*views, *readable, *RUNNER_TABLES)}
    if tree.get("error"):
        if tree.get("error_type") == "parser":
            return None
        found: tuple[str, int] | None = ("a query the sandbox cannot check", _NO_LOCATION)
    else:
        found = _team_read(tree.get("statements", []), known, frozenset(), sorted({*views, *readable}))
    if found is None:
        return None
    what, location = found
    line, col = fact.line, 1
    if 0 <= location < _NO_LOCATION:
        before = sql.encode("utf-8")[:location]
        line = before.count(b"\n") + 1
        col = location - (before.rfind(b"\n") + 1) + 1
    return (f"{fact.path}:{line}:{col}: team fact {fact.name!r} was stopped by the sandbox: it reads {what}; team "
            f"SQL may read only the canonical views ({', '.join(views)}) and the facts, by their names, and call no "
            f"table function but {', '.join(TEAM_TABLE_FUNCTIONS)} and no function that reads settings, the "
            f"catalog, files or the environment")


def _team_read(node: Any, known: set[str], ctes: frozenset[str], names: list[str]) -> tuple[str, int] | None:
    """The first thing a node of a json_serialize_sql tree reads that team SQL may not, with its query_location;
    `known`: the lower-cased names it may read besides `ctes`, its CTEs in scope; `names`: for a did-you-mean."""
    if isinstance(node, list):
        return next((found for item in node if (found := _team_read(item, known, ctes, names)) is not None), None)
    if not isinstance(node, dict):
        return None
    where = node.get("query_location", _NO_LOCATION)
    cte_map = node.get("cte_map")
    if isinstance(cte_map, dict):
        ctes = ctes | {str(entry.get("key", "")).lower() for entry in cte_map.get("map", [])}
    kind = node.get("type")
    if kind == "BASE_TABLE":
        schema = ".".join(p for p in (node.get("catalog_name"), node.get("schema_name")) if p)
        name = str(node.get("table_name", ""))
        if schema:
            return f"the table {schema}.{name}, named with a schema", where
        if name.lower() not in known and name.lower() not in ctes:
            return f"{name!r}, which is neither a canonical view nor a fact{did_you_mean(name, names)}", where
    elif kind == "TABLE_FUNCTION":
        function = node.get("function") or {}
        name = str(function.get("function_name", ""))
        if name.lower() not in TEAM_TABLE_FUNCTIONS or function.get("catalog") or \
                function.get("schema") not in _FUNCTION_SCHEMAS:
            return f"the table function {name}()", where
    elif kind == "SHOW_REF":
        return "DESCRIBE, SHOW or SUMMARIZE", where
    elif "function_name" in node:
        name = str(node["function_name"])
        if (name.lower() in _STATE_FUNCTIONS or name.lower().startswith(_STATE_FUNCTION_PREFIXES)
                or node.get("catalog") or node.get("schema", "") not in _FUNCTION_SCHEMAS):
            return f"the function {name}()", where
    return next((found for value in node.values()
                 if isinstance(value, (dict, list)) and (found := _team_read(value, known, ctes, names)) is not None),
                None)
