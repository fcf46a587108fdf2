"""Facts: documented SQL files over the canonical views, one concept per file.

Header of each file (Perfetto stdlib is the model):

    -- @fact kernel_gaps
    -- @doc One row per (device, stream) ...
    -- @needs _gpu_ops                 the facts this one reads, all and only those (run first; checked on
                                      the parse and bind of its SQL: engine/facts/needs.py)
    -- @requires kernels               canonical views that must hold rows for the fact to mean anything
                                      (`kernels|graph_launches`: at least one of them; `devices.sm_count`:
                                      a column that must hold a value in some row)
    -- @param gap_threshold_ns 10000   numeric parameter, written ${gap_threshold_ns} in the SQL; settable as
                                      `facts.gap_threshold_ns` (--set, diagnose.yaml) within its range:
    -- @param top_apis 3 range 1 inf   declared (LO HI, numbers or inf/-inf), else the unit of its name's suffix
                                      (units.PARAM_RANGES: _ns, _bytes, _count >= 0; _share, _fraction,
                                      _ratio 0-1; _pct 0-100; no suffix: any number)
    -- @per-phase                      computed again over each inference phase (engine/facts/scopes.py), so
                                      the rules on it judge each phase too (bundled facts only)
    -- @whole-capture                  computed over the whole capture, with the facts it needs, before every
                                      other fact is cut to the steady window after the start-up
                                      (engine/facts/window.py; bundled facts only)
    -- @whole-run                      a helper a phase reads from the whole run instead of computing it again
                                      over the phase's rows (engine/facts/scopes.py; bundled facts only)
    -- @report                         its rows appear in every report (JSON `facts`, and the report sections
    -- @report rows=50 per-phase      of reports/templates/sections.yaml): `rows=N` keeps the first N rows,
                                      `per-phase` reports the rows of each phase too (JSON `phase_facts`; the
                                      fact must be `@per-phase`)
    -- @column device_id  CUDA device index.
    -- @check device_id not_null       a test every row must pass (dbt-style column tests, below)

Facts whose name starts with `_` are helpers, not shown in reports: created as views, or as tables
when marked `-- @materialize` because several facts read them.

Column tests, `-- @check COLUMN TEST [ARG ...]`, one per line, on a declared column of a fact that is not
a helper; NULL passes every test but `not_null`:

    not_null                 every row has a value
    non_negative             the value is >= 0
    range LO HI              LO <= value <= HI (both finite numbers)
    unique                   no two rows share a value
    accepted_values V ...    the value is one of the words V ...

The test suite runs them on every fixture scenario, and `diagnose rules check` on a team fact's rows over
an empty export.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from collections.abc import Collection, Iterable
from typing import Any


from ..base.errors import PackError
from ..base.text import did_you_mean
from ..base.units import PARAM_RANGES, column_unit, describe_range, fmt_limit

_HEADER = re.compile(r"^--\s*@([\w-]+)\s*(.*)$")
_PARAM_REF = re.compile(r"\$\{(\w+)\}")


@dataclass
class FactColumn:
    name: str
    doc: str
    line: int = 0  # of its `-- @column` header line in the file


# Column tests: name -> (how many arguments, what they look like). None: any number, at least one.
CHECK_TESTS: dict[str, tuple[int | None, str]] = {
    "not_null": (0, ""),
    "non_negative": (0, ""),
    "range": (2, " LO HI"),
    "unique": (0, ""),
    "accepted_values": (None, " VALUE ..."),
}
_RANGE_SLACK = 1e-9  # a share computed as a sum of doubles may land a rounding error past 1


@dataclass(frozen=True)
class FactCheck:
    """One `-- @check COLUMN TEST [ARG ...]` header line."""

    column: str
    test: str
    args: tuple[str, ...] = ()
    line: int = 0

    def __str__(self) -> str:
        return " ".join((self.test, *self.args))

    def passes(self, value: Any) -> bool:
        """Whether one value passes (`unique` looks at all rows: see check_rows)."""
        if self.test == "not_null":
            return value is not None
        if value is None or self.test == "unique":
            return True
        if self.test == "accepted_values":
            return str(value) in self.args
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.test == "non_negative":
            return value >= 0
        low, high = (float(a) for a in self.args)
        return low - _RANGE_SLACK <= value <= high + _RANGE_SLACK


@dataclass(frozen=True)
class CheckFailure:
    fact: str
    check: FactCheck
    index: int  # 0-based row
    row: dict[str, Any]

    def describe(self, where: str = "") -> str:
        """`fact.column: TEST failed[ on WHERE]: row N {...}`."""
        shown = repr(self.row)
        shown = shown if len(shown) <= 400 else shown[:399] + "…"
        on = f" on {where}" if where else ""
        return f"{self.fact}.{self.check.column}: {self.check} failed{on}: row {self.index} {shown}"


@dataclass
class Fact:
    name: str
    sql: str
    path: str
    doc: str = ""
    needs: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    params: dict[str, float] = field(default_factory=dict)
    param_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)  # (lo, hi) each param may take
    columns: list[FactColumn] = field(default_factory=list)
    checks: list[FactCheck] = field(default_factory=list)
    materialized: bool = False  # helpers are views unless marked @materialize (read several times)
    team: bool = False  # loaded from a team directory: runs sandboxed, after the bundled facts
    per_phase: bool = False  # computed again over each inference phase (engine/facts/scopes.py)
    whole_capture: bool = False  # computed over the whole capture, before the start-up is cut off (window.py)
    whole_run: bool = False  # read from the whole run in every phase, not computed again there (scopes.py)
    reported: bool = False  # its rows are in every report (-- @report)
    report_rows: int | None = None  # the rows a report keeps (-- @report rows=N); None: all of them
    report_per_phase: bool = False  # its per-phase rows are reported too (-- @report per-phase)
    line: int = 1  # of its `-- @fact` header line

    @property
    def is_helper(self) -> bool:
        return self.name.startswith("_")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def summary(self) -> str:
        """The first sentence of the doc (a full stop inside parentheses does not end it)."""
        depth = 0
        for i, ch in enumerate(self.doc):
            depth += (ch in "([") - (ch in ")]")
            if ch == "." and depth <= 0 and self.doc[i + 1:i + 2] in ("", " "):
                return self.doc[:i + 1]
        return self.doc


class FactError(PackError):
    def __init__(self, message: str, fact: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.fact = fact
        self.detail = detail  # DuckDB's whole message when the SQL failed (it may say LINE N: where)


class FactOverflowError(FactError):
    """A bundled fact's arithmetic left its type's range (DuckDB's Out of Range Error): the export holds values
    no capture has, past what the reader refuses (TIME_LIMIT_NS), e.g. a time 50 days out times 10,000 bins."""


def check_rows(fact: Fact, rows: list[dict[str, Any]]) -> list[CheckFailure]:
    """The rows that fail the fact's column tests: the first failing row of each test."""
    failures: list[CheckFailure] = []
    for check in fact.checks:
        seen: set[Any] = set()
        for index, row in enumerate(rows):
            value = row.get(check.column)
            if check.test == "unique" and value is not None:
                key = repr(value)
                ok = key not in seen
                seen.add(key)
            else:
                ok = check.passes(value)
            if not ok:
                failures.append(CheckFailure(fact.name, check, index, row))
                break
    return failures


def _parse_check(value: str, path: str, line: int) -> FactCheck:
    words = value.split()
    if len(words) < 2:
        raise FactError(f"{path}:{line}: write -- @check COLUMN TEST [ARG ...], e.g. -- @check device_id not_null")
    column, test, args = words[0], words[1], tuple(words[2:])
    if test not in CHECK_TESTS:
        known = ", ".join(f"{name}{shape}" for name, (_, shape) in CHECK_TESTS.items())
        raise FactError(f"{path}:{line}: @check {column}: unknown test {test!r}{did_you_mean(test, list(CHECK_TESTS))}"
                        f"; the tests are {known}")
    count, shape = CHECK_TESTS[test]
    if (count is None and not args) or (count is not None and len(args) != count):
        wanted = "no arguments" if count == 0 else f"the arguments{shape}"
        raise FactError(f"{path}:{line}: @check {column} {test} takes {wanted}, e.g. -- @check {column} {test}{shape}")
    if test == "range":
        try:
            low, high = float(args[0]), float(args[1])
        except ValueError:
            low = high = math.nan
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise FactError(f"{path}:{line}: @check {column} range needs two finite numbers LO <= HI, not "
                            f"{' '.join(args)!r}; e.g. -- @check {column} range 0 1")
    return FactCheck(column, test, args, line)


def _parse_report(fact: Fact, value: str, where: str) -> None:
    """`-- @report [rows=N] [per-phase]`."""
    fact.reported = True
    for word in value.split():
        key, _, number = word.partition("=")
        if word == "per-phase":
            fact.report_per_phase = True
        elif key == "rows" and number.isdigit() and int(number) > 0:
            fact.report_rows = int(number)
        else:
            raise FactError(f"{where}: @report takes `rows=N` (a whole number above 0) and `per-phase`, not "
                            f"{word!r}; e.g. -- @report rows=50 per-phase")


def _validate_report(fact: Fact) -> None:
    if fact.reported and fact.is_helper:
        raise FactError(f"{fact.path}: @report on the helper fact {fact.name!r}: helpers are not shown in reports",
                        fact.name)
    if fact.report_per_phase and not fact.per_phase:
        raise FactError(f"{fact.path}: @report per-phase on {fact.name!r}, which is not computed per phase; add "
                        f"-- @per-phase or drop per-phase", fact.name)


def reported_facts(facts: dict[str, Fact]) -> list[Fact]:
    """The bundled facts marked `-- @report`, by name: the order of the report's `facts`."""
    return sorted((f for f in facts.values() if f.reported and not f.team), key=lambda f: f.name)


def _validate_checks(fact: Fact) -> None:
    declared = fact.column_names
    for check in fact.checks:
        if fact.is_helper:
            raise FactError(f"{fact.path}:{check.line}: @check on the helper fact {fact.name!r}: only facts that "
                            f"rules and reports read are checked; put the test on one of those", fact.name)
        if check.column not in declared:
            raise FactError(f"{fact.path}:{check.line}: @check names column {check.column!r}, which no @column of "
                            f"fact {fact.name!r} declares{did_you_mean(check.column, declared)}", fact.name)


def _param_range(name: str, default: float, rest: list[str], where: str) -> tuple[float, float]:
    """The range of `-- @param NAME DEFAULT [range LO HI]`: declared, else that of the unit of the name's suffix;
    a default outside it is an error at `where` (file:line:col)."""
    if rest:
        try:
            if len(rest) != 3 or rest[0] != "range":
                raise ValueError
            lo, hi = float(rest[1]), float(rest[2])
            if lo != lo or hi != hi or lo > hi:
                raise ValueError
        except ValueError:
            raise FactError(f"{where}: @param {name}: after the default, write `range LO HI` (numbers, inf or "
                            f"-inf, LO <= HI), e.g. `-- @param {name} {default:g} range 0 inf`") from None
    else:
        lo, hi = PARAM_RANGES[column_unit(name)] if column_unit(name) in PARAM_RANGES else PARAM_RANGES["number"]
    if not lo <= default <= hi:
        raise FactError(f"{where}: @param {name}: the default {fmt_limit(default)} is outside its range "
                        f"({describe_range(lo, hi)}); change the default or declare `range LO HI`")
    return lo, hi


def fact_param_range(facts: dict[str, Fact], name: str) -> tuple[float, float]:
    """The values `facts.NAME` may take: those every fact declaring the param accepts."""
    ranges = [f.param_ranges[name] for f in facts.values() if name in f.param_ranges]
    return max((r[0] for r in ranges), default=-math.inf), min((r[1] for r in ranges), default=math.inf)


def parse_fact(text: str, path: str) -> Fact:
    name = None
    doc_lines: list[str] = []
    fact = Fact(name="", sql=text, path=path)
    for number, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line.strip())
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if key == "fact":
            name = value
            fact.line = number
        elif key == "doc":
            doc_lines.append(value)
        elif key == "materialize":
            fact.materialized = True
        elif key == "per-phase":
            fact.per_phase = True
        elif key == "whole-capture":
            fact.whole_capture = True
        elif key == "whole-run":
            fact.whole_run = True
        elif key == "report":
            _parse_report(fact, value, f"{path}:{number}:{line.index('@report') + 1}")
        elif key == "needs":
            fact.needs += value.split()
        elif key == "requires":
            fact.requires += value.split()
        elif key == "param":
            pname, _, default = value.partition(" ")
            try:
                given = float(default.split()[0])
            except (ValueError, IndexError):
                raise FactError(f"{path}: @param {pname} needs a numeric default") from None
            if given != given or given in (float("inf"), float("-inf")):  # would render as SQL `nan`/`inf`
                raise FactError(f"{path}: @param {pname} needs a finite numeric default, not "
                                f"{default.split()[0]!r}; write a number such as 10000")
            fact.params[pname] = given
            fact.param_ranges[pname] = _param_range(pname, given, default.split()[1:],
                                                    f"{path}:{number}:{line.index('@param') + 1}")
        elif key == "column":
            cname, _, cdoc = value.partition(" ")
            fact.columns.append(FactColumn(cname, cdoc.strip(), number))
        elif key == "check":
            fact.checks.append(_parse_check(value, path, number))
    if not name:
        raise FactError(f"{path}: missing '-- @fact NAME' header")
    fact.name = name
    fact.doc = " ".join(doc_lines)
    unknown = set(_PARAM_REF.findall(text)) - set(fact.params)
    if unknown:
        raise FactError(f"{path}: ${{{sorted(unknown)[0]}}} is used but not declared with @param")
    _validate_checks(fact)
    _validate_report(fact)
    return fact


def run_order(facts: dict[str, Fact]) -> list[Fact]:
    order: list[Fact] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise FactError(f"facts depend on each other in a cycle: {' -> '.join(chain + (name,))}")
        if name not in facts:
            raise FactError(f"fact {chain[-1]!r} needs unknown fact {name!r}")
        state[name] = 1
        for dep in facts[name].needs:
            visit(dep, chain + (name,))
        state[name] = 2
        order.append(facts[name])

    for name in sorted(facts):
        visit(name, ())
    return order


def with_needs(facts: dict[str, Fact], roots: Iterable[str], skip: Collection[str] = ()) -> set[str]:
    """`roots` and every fact they need, directly or not, leaving out the names in `skip` (and what only they need)
    and names that are no fact (an unknown dependency is run_order's error, raised when the facts run)."""
    found: set[str] = set()
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in found or name in skip or name not in facts:
            continue
        found.add(name)
        pending += facts[name].needs
    return found


def render_sql(fact: Fact, overrides: dict[str, float] | None = None, *, keep_lines: bool = False) -> str:
    """The fact's query with its params filled in. `keep_lines`: the header stays as comments, so line N of
    the query is line N of the file (DuckDB's `LINE N:` in an error then points into the file)."""
    values = dict(fact.params)
    for key, value in (overrides or {}).items():
        if key in values:
            values[key] = float(value)

    def sub(m: re.Match[str]) -> str:
        v = values[m.group(1)]
        return repr(int(v)) if float(v).is_integer() else repr(float(v))

    if keep_lines:
        return _PARAM_REF.sub(sub, fact.sql).rstrip().rstrip(";")
    body = "\n".join(line for line in fact.sql.splitlines() if not _HEADER.match(line.strip()))
    return _PARAM_REF.sub(sub, body).strip().rstrip(";")
