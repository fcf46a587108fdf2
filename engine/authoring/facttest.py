"""Fact tests beside the facts (`NAME.test.yaml` next to `NAME.sql`): canonical rows in, the fact's rows out, in
the spirit of Perfetto's diff tests and dbt's unit tests.

    fact: kernel_gaps
    cases:
      - name: two kernels 4 µs apart on one stream
        params: {gap_threshold_ns: 5000}   # the fact params of this case (default: each @param's default)
        tables:                            # canonical view -> its rows; every view not named is empty
          kernels:
            - {start_ns: 0, end_ns: 1000, device_id: 0, stream_id: 7, name: gemm}
            - {start_ns: 5000, end_ns: 6000, device_id: 0, stream_id: 7, name: gemm}
        expect:                            # every row of the fact; a row names only the columns it checks
          - {device_id: 0, stream_id: 7, gap_count: 1, median_gap_us: 4.0}
        ordered: false                     # true: the rows in this order (default: any order)
        tolerance: 0.001                   # numbers within this relative difference (default 1e-9)
        phase: decode                      # a per-phase fact's rows over one phase (engine/facts/scopes.py)

The runner builds a canonical database holding just those rows (engine/reading/export.py rows_export) and
computes the fact with the facts it needs and the start-up facts that set the window every fact covers, as
`diagnose facts show` does. A row's `dur_ns` left out is end_ns - start_ns; names of kernels and API calls get
their ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from ..base.duck import reraise_interrupt
from ..base.errors import DiagnoseError
from ..facts.catalog import Fact, with_needs
from ..facts.loading import bundled_fact_files
from ..base.text import did_you_mean
from ..pack.apinames import ApiNames
from ..pack.stacks import Stacks
from ..facts.compute import compute_facts
from ..pack.opclasses import OperationClasses
from ..facts.scopes import from_run
from ..facts.types import fitted
from ..reading.canonical import VIEWS
from ..reading.export import rows_export
from .testfiles import REL_TOLERANCE, check_file_keys, find_tests_of_kind, read_test_yaml, same_value

_CASE_KEYS = {"name", "params", "tables", "expect", "ordered", "tolerance", "phase"}
_SHOWN_ROWS = 20  # of a failing case's rows, in its report


class FactTestError(DiagnoseError):
    pass


@dataclass
class FactCaseResult:
    file: str
    fact: str
    name: str
    passed: bool
    problem: str = ""  # what differs, in a sentence
    expected: list[dict[str, Any]] = field(default_factory=list)
    got: list[dict[str, Any]] = field(default_factory=list)  # the fact's rows, cut to the columns `expected` names


def fact_test_file(fact: Fact) -> Path:
    """Where a fact's tests are: NAME.test.yaml beside its SQL file."""
    path = Path(fact.path)
    return path.with_name(path.stem + ".test.yaml")


def bundled_fact_tests() -> list[Path]:
    return [p for p in (f.with_name(f.stem + ".test.yaml") for f in bundled_fact_files()) if p.is_file()]


def find_fact_tests(paths: list[Path]) -> list[Path]:
    """The fact test files of `paths`: directories are searched for NAME.test.yaml files beside a NAME.sql."""
    return find_tests_of_kind(paths, fact_tests=True, error=FactTestError, wrong_kind=lambda p: (
        f"{p}: not a fact test: a fact test sits beside its fact's SQL ({p.name.removesuffix('.test.yaml')}.sql); "
        f"a rule test runs with `diagnose rules test`"))


def load_fact_test(path: Path, facts: dict[str, Fact]) -> tuple[str, list[dict[str, Any]]]:
    """The fact a test file tests and its cases, checked: every problem is one `FILE:LINE:COL:` sentence."""
    data, at = read_test_yaml(path, FactTestError)
    check_file_keys(path, data, at, ("fact", "cases"), FactTestError)
    name = data["fact"]
    if name not in facts:
        raise FactTestError(f"{path}:{at.of('fact')}: no fact {name!r}"
                            f"{did_you_mean(str(name), list(facts)) or '; `diagnose facts list` shows them all'}")
    cases = data["cases"]
    if not isinstance(cases, list) or not cases:
        raise FactTestError(f"{path}:{at.of('cases')}: fact {name!r} has no test cases")
    fact = facts[name]
    params = {p: facts[n].param_ranges[p] for n in with_needs(facts, [name]) for p in facts[n].params}
    for i, case in enumerate(cases):
        def where(*keys: object, i: int = i) -> str:
            return f"{path}:{at.of('cases', i, *keys)}: case {i + 1}"

        if not isinstance(case, dict):
            raise FactTestError(f"{where()}: a case is a mapping with the keys {', '.join(sorted(_CASE_KEYS))}")
        for key in case:
            if key not in _CASE_KEYS:
                keys = "; a case has the keys " + ", ".join(sorted(_CASE_KEYS))
                raise FactTestError(f"{where(key)}: unknown key {key!r}"
                                    f"{did_you_mean(str(key), sorted(_CASE_KEYS)) or keys}")
        if "tables" not in case or "expect" not in case:
            raise FactTestError(f"{where()}: a case gives 'tables' (the canonical rows in) and 'expect' (the "
                                f"fact's rows out; [] = no rows)")
        _check_tables(case["tables"], where)
        _check_params(case.get("params"), name, params, where)
        _check_expect(case["expect"], fact, where)
        if not isinstance(case.get("ordered", False), bool):
            raise FactTestError(f"{where('ordered')}: 'ordered' is true or false")
        tolerance = case.get("tolerance", REL_TOLERANCE)
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
            raise FactTestError(f"{where('tolerance')}: 'tolerance' is the relative difference numbers may have, "
                                f"a number from 0 up to 1 (e.g. 0.001), not {tolerance!r}")
        if "phase" in case and not (isinstance(case["phase"], str) and fact.per_phase):
            raise FactTestError(f"{where('phase')}: 'phase' names an inference phase (prefill, decode ...) of a "
                                f"fact computed per phase; {name!r} is "
                                f"{'one' if fact.per_phase else 'not (no -- @per-phase)'}")
    return name, cases


def _check_tables(tables: Any, where: Any) -> None:
    if not isinstance(tables, dict):
        raise FactTestError(f"{where('tables')}: 'tables' maps canonical views to their rows, e.g. "
                            f"{{kernels: [{{start_ns: 0, end_ns: 1000, device_id: 0, stream_id: 7}}]}}")
    for view, rows in tables.items():
        if view not in VIEWS:
            raise FactTestError(f"{where('tables', view)}: no canonical table {view!r}"
                                f"{did_you_mean(str(view), list(VIEWS)) or '; the tables are ' + ', '.join(VIEWS)}")
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise FactTestError(f"{where('tables', view)}: tables.{view} is a list of rows, each a mapping of "
                                f"its columns to values")
        types = {c.name: c.type for c in VIEWS[view].columns}
        for j, row in enumerate(rows):
            for column, value in row.items():
                if column not in types:
                    raise FactTestError(f"{where('tables', view, j, column)}: canonical table {view!r} has no "
                                        f"column {column!r}{did_you_mean(str(column), list(types))}")
                row[column], wanted = fitted(types[column], value)
                if wanted:
                    raise FactTestError(f"{where('tables', view, j, column)}: {view}.{column} is {wanted}, not "
                                        f"{value!r}")


def _check_params(values: Any, name: str, params: dict[str, tuple[float, float]], where: Any) -> None:
    if values is None:
        return
    if not isinstance(values, dict):
        raise FactTestError(f"{where('params')}: 'params' maps fact params to numbers, e.g. {{gap_threshold_ns: 5000}}")
    for param, value in values.items():
        if param not in params:
            known = f"; its params are {', '.join(sorted(params))}" if params else "; it has none"
            raise FactTestError(f"{where('params', param)}: fact {name!r} and the facts it needs have no param "
                                f"{param!r}{did_you_mean(str(param), list(params)) or known}")
        lo, hi = params[param]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not lo <= value <= hi:
            raise FactTestError(f"{where('params', param)}: params.{param} must be a number from {lo:g} to {hi:g}, "
                                f"not {value!r}")


def _check_expect(expect: Any, fact: Fact, where: Any) -> None:
    columns = fact.column_names
    if not isinstance(expect, list) or not all(isinstance(r, dict) for r in expect):
        raise FactTestError(f"{where('expect')}: 'expect' is the list of the fact's rows, each a mapping of the "
                            f"columns it checks ([] = the fact has no rows)")
    for j, row in enumerate(expect):
        for column, value in row.items():
            if column not in columns:
                listed = "; its columns are " + ", ".join(columns)
                raise FactTestError(f"{where('expect', j, column)}: fact {fact.name!r} has no column {column!r}"
                                    f"{did_you_mean(str(column), columns) or listed}")
            if isinstance(value, dict):
                raise FactTestError(f"{where('expect', j, column)}: expect.{column} is a value, not a mapping")


def run_fact_tests(files: list[Path], facts: dict[str, Fact],
                   op_classes: OperationClasses | None = None, stacks: Stacks | None = None,
                   api_names: ApiNames | None = None) -> list[FactCaseResult]:
    """Run the cases of `files` against `facts` (bundled and team facts); `op_classes`, `stacks`, `api_names`: the
    vocabulary of the loaded team packs (None: the bundled one)."""
    results: list[FactCaseResult] = []
    for path in files:
        name, cases = load_fact_test(path, facts)
        for i, case in enumerate(cases):
            rows = _computed_rows(path, i, case, name, facts, op_classes, stacks, api_names)
            results.append(_compare(str(path), name, case.get("name", f"case {i + 1}"), case, rows))
    return results


def _computed_rows(path: Path, index: int, case: dict[str, Any], name: str, facts: dict[str, Fact],
                   op_classes: OperationClasses | None, stacks: Stacks | None = None,
                   api_names: ApiNames | None = None) -> list[dict[str, Any]]:
    phase = case.get("phase")
    roots = [name, *(f.name for f in facts.values() if f.whole_capture and not f.team)]
    if phase is not None:  # the phases fact and what each phase is cut from (engine/facts/scopes.py)
        roots += ["phases", *sorted(from_run(facts)), *(f.name for f in facts.values() if f.per_phase and not f.team)]
    wanted = with_needs(facts, roots)
    params = {k: float(v) for k, v in (case.get("params") or {}).items()}
    try:
        with rows_export(case["tables"], name=f"{path.name}#{index + 1}") as export:
            fact_set = compute_facts(export, params=params, facts={n: f for n, f in facts.items() if n in wanted},
                                     helpers={name}, op_classes=op_classes, stacks=stacks,
                                     api_names=api_names)
    except duckdb.Error as exc:  # values the types accept but the tables refuse (an integer out of range)
        reraise_interrupt(exc)
        raise FactTestError(f"{path}: case {index + 1}: the tables could not be built: "
                            f"{str(exc).splitlines()[0]}") from None
    if phase is None:
        return fact_set[name].rows
    if phase not in fact_set.phases:
        judged = ", ".join(fact_set.phases) or "none: the rows do not split into two phases with GPU work"
        raise FactTestError(f"{path}: case {index + 1}: no phase {phase!r} is judged on these rows (phases judged: "
                            f"{judged})")
    return fact_set.phases[phase][name].rows


def _compare(file: str, fact: str, case_name: str, case: dict[str, Any], rows: list[dict[str, Any]]
             ) -> FactCaseResult:
    expected: list[dict[str, Any]] = case["expect"]
    columns = list(dict.fromkeys(c for row in expected for c in row))
    shown = [{c: row.get(c) for c in columns} if columns else row for row in rows][:_SHOWN_ROWS]
    tolerance = float(case.get("tolerance", REL_TOLERANCE))

    def fits(want: dict[str, Any], got: dict[str, Any]) -> bool:
        return all(same_value(v, got.get(c), tolerance) for c, v in want.items())

    problem = ""
    if len(rows) != len(expected):
        problem = f"{len(rows)} row{'s' if len(rows) != 1 else ''}, expected {len(expected)}"
    elif case.get("ordered"):
        bad = next((j for j, (w, g) in enumerate(zip(expected, rows)) if not fits(w, g)), None)
        if bad is not None:
            problem = f"row {bad + 1} differs"
    else:
        unmatched = _unmatched(expected, rows, fits)
        if unmatched is not None:
            problem = f"no row matches expected row {unmatched + 1}"
    return FactCaseResult(file, fact, case_name, not problem, problem, expected, shown)


def _unmatched(expected: list[dict[str, Any]], rows: list[dict[str, Any]], fits: Any) -> int | None:
    """The first expected row that cannot be given a row of its own (bipartite matching, as each expected row may
    name only some columns and so fit several rows); None when every expected row gets one."""
    owner: dict[int, int] = {}  # row -> expected row

    def assign(j: int, seen: set[int]) -> bool:
        for r, row in enumerate(rows):
            if r in seen or not fits(expected[j], row):
                continue
            seen.add(r)
            if r not in owner or assign(owner[r], seen):
                owner[r] = j
                return True
        return False

    for j in range(len(expected)):
        if not assign(j, set()):
            return j
    return None
