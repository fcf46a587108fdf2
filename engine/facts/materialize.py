"""Materialising one fact: its SQL run as a view or table of the scratch database, a DuckDB error turned into one
sentence naming the fact, and the columns it returned checked against its header.
"""

from __future__ import annotations

import duckdb

from ..base.duck import is_out_of_memory, reraise_interrupt
from ..reading.workspace import out_of_memory_error
from .catalog import Fact, FactError, FactOverflowError, render_sql


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    """(name, DuckDB type) of each column of a table the facts created, in order."""
    # DESCRIBE resolves the name as a query would (the current schema first) and reads one table's catalog entry;
    # duckdb_columns() scans every column of every attached database, ten times slower on each fact.
    return [(row[0], row[1]) for row in con.execute(f'DESCRIBE "{table}"').fetchall()]


def materialize(con: duckdb.DuckDBPyConnection, fact: Fact, overrides: dict[str, float] | None = None, *,
                keep_lines: bool = False, check_columns: bool = True) -> None:
    """Create the fact's view or table. `keep_lines`: see render_sql; `check_columns`: refuse a fact whose
    query returns other columns than its header documents."""
    kind = "VIEW" if fact.is_helper and not fact.materialized else "TABLE"
    try:
        con.execute(f'CREATE OR REPLACE {kind} "{fact.name}" AS {render_sql(fact, overrides, keep_lines=keep_lines)}')
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        if is_out_of_memory(exc):
            raise FactError(str(out_of_memory_error(f"computing the fact {fact.name!r}")), fact.name) from None
        detail = str(exc).splitlines()[0]
        if fact.team and (isinstance(exc, (duckdb.PermissionException, duckdb.InvalidInputException))
                          and ("disabled" in detail or "configuration" in detail)
                          or isinstance(exc, duckdb.CatalogException) and "extension" in detail):
            raise FactError(f"{fact.path}: team fact {fact.name!r} was stopped by the sandbox ({detail}); team SQL "
                            f"may read only the canonical views and facts: no files, ATTACH, extensions, "
                            f"settings or network", fact.name) from None
        if isinstance(exc, duckdb.OutOfRangeException) and not fact.team:
            raise FactOverflowError(f"fact {fact.name!r} overflowed: {detail}", fact.name, str(exc)) from None
        raise FactError(f"{fact.path}: fact {fact.name!r} failed: {detail}", fact.name, str(exc)) from None
    if check_columns and not fact.is_helper:
        check_documented_columns(fact, [name for name, _ in table_columns(con, fact.name)])


def check_documented_columns(fact: Fact, actual: list[str]) -> None:
    """Refuse a fact whose query returns `actual`, other columns than its `-- @column` lines document."""
    if actual != fact.column_names:
        raise FactError(f"{fact.path}: documented columns {fact.column_names} differ from the SQL's {actual}",
                        fact.name)
