"""Compiling facts over an empty export, as `diagnose rules check` does for a team pack: every query must run over
empty canonical tables within the team limits and return the columns its header documents. The column types it
finds are what the `@needs` check binds each fact against (engine/facts/needs.py).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from typing import Any

import duckdb

from ..base.text import did_you_mean
from ..reading.export import empty_export
from .catalog import Fact, FactError, check_rows, with_needs
from .compute import (TEAM_LIMITS, TeamLimits, _define_metric_names, _define_phases, _in_run_order, _rows,
                      _lock_for_team_facts, _materialize_bounded)
from .materialize import materialize, table_columns


def check_facts(facts: dict[str, Fact], limits: TeamLimits | None = None) -> list[str]:
    """Compile every fact of `facts` (bundled and team) against the canonical schema and return one
    `FILE:LINE:COL: message` per problem: SQL that does not compile (a typo in a column, table or function),
    a declared `-- @column` the query does not return or a returned column no `-- @column` declares, and for
    team facts what the run's sandbox and bounds would refuse (a shorter time limit by default) and the
    `-- @check` tests their rows fail. The facts run in dependency order over an export whose canonical tables
    are empty; facts that need a failed fact are not run."""
    limits = limits or replace(TEAM_LIMITS, seconds=min(TEAM_LIMITS.seconds, 10.0))
    with empty_export() as export:
        _define_phases(export.con, None)
        _define_metric_names(export.con)
        return compile_facts(export.con, _in_run_order(facts), limits)


def fact_column_types(facts: dict[str, Fact], names: Collection[str]) -> dict[str, list[tuple[str, str]]]:
    """(column, DuckDB type) of each column of the facts `names`, compiled with the facts they need over an export
    whose canonical tables are empty, as check_facts() compiles them; a fact that does not compile is left out."""
    with empty_export() as export:
        _define_phases(export.con, None)
        _define_metric_names(export.con)
        return compiled_columns(export.con, facts, names)


def compiled_columns(con: Any, facts: dict[str, Fact], names: Collection[str]) -> dict[str, list[tuple[str, str]]]:
    """Compile the facts `names` with the facts they need on `con`, which holds the (empty) tables they read, and
    return (column, DuckDB type) of each that compiled; one that does not, and those that need it, are left out."""
    compile_facts(con, _in_run_order({n: facts[n] for n in with_needs(facts, names)}))
    out = {}
    for name in names:
        try:
            out[name] = table_columns(con, name)
        except duckdb.Error:
            pass
    return out


def compile_facts(con: Any, ordered: list[Fact], limits: TeamLimits = TEAM_LIMITS) -> list[str]:
    """Create each fact (in dependency order) on `con`, which holds the tables they read, and compare its
    columns with its header: the problems as in check_facts()."""
    errors: list[str] = []
    failed: set[str] = set()
    locked = False
    for fact in ordered:
        if fact.team and not locked:
            _lock_for_team_facts(con, limits)
            locked = True
        if any(dep in failed for dep in fact.needs):
            failed.add(fact.name)
            continue
        try:
            if fact.team:
                _materialize_bounded(con, fact, None, limits, readable={f.name for f in ordered}, keep_lines=True,
                                     check_columns=False)
            else:
                materialize(con, fact, None, keep_lines=True, check_columns=False)
        except FactError as exc:
            errors.append(_compile_error(fact, exc))
            failed.add(fact.name)
            continue
        errors += column_problems(fact, [name for name, _ in table_columns(con, fact.name)])
        if fact.team and not fact.is_helper:
            errors += [f"{fact.path}:{failure.check.line}:1: {failure.describe('an empty export')}"
                       for failure in check_rows(fact, _rows(con, fact)[1])]
    return errors


_SQL_LOCATION = re.compile(r"^LINE (\d+):( ?)(.*)\n(\s*)\^", re.MULTILINE)


def _compile_error(fact: Fact, exc: FactError) -> str:
    """`FILE:LINE:COL: fact 'F' does not compile: ...`, the place taken from DuckDB's `LINE N:` and caret."""
    if exc.detail is None:  # the sandbox, a time or size bound: the message says it all
        return str(exc)
    line, col = fact.line, 1
    location = _SQL_LOCATION.search(exc.detail)
    if location:
        line = int(location[1])
        col = max(1, len(location[4]) - len(f"LINE {location[1]}:{location[2]}") + 1)
    message = " ".join(exc.detail[:location.start() if location else None].split())
    return f"{fact.path}:{line}:{col}: fact {fact.name!r} does not compile: {message}"


def column_problems(fact: Fact, returned: list[str]) -> list[str]:
    """What differs between the `-- @column` lines of `fact` and the columns its query `returned`."""
    declared = fact.column_names
    problems = [f"{fact.path}:{c.line}:1: fact {fact.name!r} declares column {c.name!r}, which its query does "
                f"not return{did_you_mean(c.name, [r for r in returned if r not in declared])}"
                for c in fact.columns if c.name not in returned]
    after = fact.columns[-1].line if fact.columns else fact.line
    problems += [f"{fact.path}:{after}:1: fact {fact.name!r} returns column {name!r}, which no @column declares; "
                 f"add `-- @column {name} DESCRIPTION`" for name in returned if name not in declared]
    if not problems and returned != declared:
        problems.append(f"{fact.path}:{fact.columns[0].line}:1: fact {fact.name!r} declares its columns in "
                        f"another order than its query returns them: {', '.join(returned)}")
    return problems
