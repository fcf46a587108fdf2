"""The types of fact columns, and test inputs made to fit them: the rows of a fact test's canonical tables and of a
rule test's `rows:` hold what the real tables would hold, or the test says which value is wrong."""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import Any

from ..base.duck import offline_connection
from .catalog import Fact

_INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT"}
_NUMBER_TYPES = {"FLOAT", "DOUBLE", "REAL", "DECIMAL"}
# YAML 1.1 (PyYAML) reads 4e7 or 1e-3 as text: its floats need a dot and a signed exponent (4.0e+7).
_NUMBER_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")

_CACHE: dict[tuple[Any, ...], dict[str, dict[str, str]]] = {}


def fitted(column_type: str, value: Any) -> tuple[Any, str | None]:
    """(`value` as a column of DuckDB type `column_type` holds it, None), or (`value`, what the column holds, e.g.
    'a whole number') when it cannot hold it. NULL fits every column; a number written as text (4e7, which YAML
    reads as text) fits a number column; a type this does not know (lists, dates) takes any value as it is."""
    if value is None:
        return None, None
    kind = column_type.split("(")[0].strip()
    if kind in _INTEGER_TYPES or kind in _NUMBER_TYPES:
        number = _number(value)
        if kind in _NUMBER_TYPES:
            return (value, "a number") if number is None else (float(number), None)
        if number is None or not float(number).is_integer():
            return value, "a whole number"
        return int(number), None
    if kind == "BOOLEAN":
        return value, None if isinstance(value, bool) else "true or false"
    if kind == "VARCHAR":
        return value, None if isinstance(value, str) else "text (quote it)"
    return value, None


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value.strip()):
        number = float(value)
        return int(number) if number.is_integer() and abs(number) < 2**63 else number
    return None


def column_types(facts: dict[str, Fact], names: Collection[str], *, cross_rank: bool = False
                 ) -> dict[str, dict[str, str]]:
    """Fact name -> column -> DuckDB type of the facts `names`, compiled over empty input tables as `rules check`
    compiles them (`cross_rank`: the facts of rules/facts/cross_rank, over an empty `ranks` table). A fact that
    does not compile is left out: `rules check` reports it."""
    # The types of every fact are found in one compilation and kept: most of its cost is compiling the helpers
    # every fact needs, and `rules check` asks again for each rule-test file.
    key = (cross_rank, tuple(sorted((n, str(f.path), f.sql) for n, f in facts.items())))
    if key not in _CACHE:
        if cross_rank:
            found = _run_fact_types(facts, list(facts))
        else:
            from .compile_check import fact_column_types

            found = fact_column_types(facts, list(facts))
        _CACHE[key] = {n: dict(columns) for n, columns in found.items()}
    return {n: columns for n, columns in _CACHE[key].items() if n in names}


def _run_fact_types(facts: dict[str, Fact], names: Collection[str]) -> dict[str, list[tuple[str, str]]]:
    from .cross_rank import ranks_table_ddl

    from .compile_check import compiled_columns

    con = offline_connection(threads=1)
    try:
        con.execute(ranks_table_ddl())
        return compiled_columns(con, facts, names)
    finally:
        con.close()
