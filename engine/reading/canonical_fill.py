"""Filling a canonical table by name: every adapter query is checked against the table's columns (by name and
type) before its rows go in."""

from __future__ import annotations

import duckdb

from .canonical import stored_columns


class AdapterMismatch(Exception):
    """An adapter's query does not produce the columns of the canonical table it fills: a bug in nsys-diagnose,
    never a problem of the profile."""


_INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
             "UBIGINT", "UHUGEINT"}


def _family(type_: str) -> str:
    t = type_.upper()
    if t in _INTEGERS:
        return "integer"
    if t in ("FLOAT", "DOUBLE") or t.startswith("DECIMAL"):
        return "number"
    return t


def compatible(column_type: str, found_type: str) -> bool:
    """Whether a value of `found_type` belongs in a column of `column_type`: same kind (integer, number, text,
    boolean ...); a narrower or wider integer is fine, and an integer fits a floating-point column. DuckDB types a
    bare NULL as INTEGER, so an adapter writes a NULL for a text column as NULL::VARCHAR."""
    want, got = _family(column_type), _family(found_type)
    return got == want or got == "NULL" or (want == "number" and got == "integer")


def mismatches(table: str, found: list[tuple[str, str]]) -> list[str]:
    """What is wrong with a query whose columns are `found` (name, type) for filling `table`; empty when nothing."""
    expected = {c.name: c for c in stored_columns(table)}
    names = [name for name, _ in found]
    problems = [f"column {name!r} appears {names.count(name)} times" for name in dict.fromkeys(names)
                if names.count(name) > 1]
    problems += [f"column {name!r} is missing" for name in expected if name not in names]
    problems += [f"column {name!r} is not a column of the table" for name in dict.fromkeys(names)
                 if name not in expected]
    problems += [f"column {name!r} is {type_}, which does not fit its {expected[name].type}"
                 for name, type_ in found if name in expected and not compatible(expected[name].type, type_)]
    return problems


def check_columns(table: str, adapter: str, found: list[tuple[str, str]]) -> None:
    problems = mismatches(table, found)
    if problems:
        raise AdapterMismatch(f"adapter {adapter!r} does not match canonical table {table!r}: "
                              f"{'; '.join(problems)}")


def fill(con: duckdb.DuckDBPyConnection, table: str, adapter: str, select: str) -> None:
    """Insert the rows of `select` into the canonical table `table` by column name, once the query's columns
    are checked against the table's (AdapterMismatch names the adapter and the column otherwise)."""
    found = [(str(r[0]), str(r[1])) for r in con.execute(f"DESCRIBE {select}").fetchall()]
    check_columns(table, adapter, found)
    con.execute(f'INSERT INTO "{table}" BY NAME {select}')
