"""Facts: documented SQL files over the canonical views, one concept per file.

Header of each file (Perfetto stdlib is the model):

    -- @fact kernel_gaps
    -- @doc One row per (device, stream) ...
    -- @needs _gpu_ops                 other facts this one reads (run first)
    -- @requires kernels               canonical views that must hold rows for the fact to mean anything
    -- @param gap_threshold_ns 10000   numeric parameter, written ${gap_threshold_ns} in the SQL
    -- @column device_id  CUDA device index.

Facts whose name starts with `_` are helpers, not shown in reports: created as views, or as tables
when marked `-- @materialize` because several facts read them.
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ..duck import is_out_of_memory, reraise_interrupt
from ..reading.cache import out_of_memory_error
from ..errors import DiagnoseError

_HEADER = re.compile(r"^--\s*@(\w+)\s*(.*)$")
_PARAM_REF = re.compile(r"\$\{(\w+)\}")


@dataclass
class FactColumn:
    name: str
    doc: str


@dataclass
class Fact:
    name: str
    sql: str
    path: str
    doc: str = ""
    needs: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    params: dict[str, float] = field(default_factory=dict)
    columns: list[FactColumn] = field(default_factory=list)
    materialized: bool = False  # helpers are views unless marked @materialize (read several times)
    team: bool = False  # loaded from a team directory: runs sandboxed, after the bundled facts

    @property
    def is_helper(self) -> bool:
        return self.name.startswith("_")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


class FactError(DiagnoseError):
    def __init__(self, message: str, fact: str | None = None):
        super().__init__(message)
        self.fact = fact


def parse_fact(text: str, path: str) -> Fact:
    name = None
    doc_lines: list[str] = []
    fact = Fact(name="", sql=text, path=path)
    for line in text.splitlines():
        m = _HEADER.match(line.strip())
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if key == "fact":
            name = value
        elif key == "doc":
            doc_lines.append(value)
        elif key == "materialize":
            fact.materialized = True
        elif key == "needs":
            fact.needs += value.split()
        elif key == "requires":
            fact.requires += value.split()
        elif key == "param":
            pname, _, default = value.partition(" ")
            try:
                number = float(default.split()[0])
            except (ValueError, IndexError):
                raise FactError(f"{path}: @param {pname} needs a numeric default") from None
            if number != number or number in (float("inf"), float("-inf")):  # would render as SQL `nan`/`inf`
                raise FactError(f"{path}: @param {pname} needs a finite numeric default, not "
                                f"{default.split()[0]!r}; write a number such as 10000")
            fact.params[pname] = number
        elif key == "column":
            cname, _, cdoc = value.partition(" ")
            fact.columns.append(FactColumn(cname, cdoc.strip()))
    if not name:
        raise FactError(f"{path}: missing '-- @fact NAME' header")
    fact.name = name
    fact.doc = " ".join(doc_lines)
    unknown = set(_PARAM_REF.findall(text)) - set(fact.params)
    if unknown:
        raise FactError(f"{path}: ${{{sorted(unknown)[0]}}} is used but not declared with @param")
    return fact


def bundled_fact_files() -> list[Path]:
    root = importlib.resources.files(__name__)
    return sorted(Path(str(root)).glob("*.sql"))


def _check_team_sql(fact: Fact) -> None:
    """Team SQL is one SELECT (or WITH ... SELECT): nothing that changes state or reaches outside."""
    try:
        statements = duckdb.extract_statements(render_sql(fact))
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        raise FactError(f"{fact.path}: fact {fact.name!r} is not valid SQL: {str(exc).splitlines()[0]}",
                        fact.name) from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kinds = ", ".join(st.type.name for st in statements) or "nothing"
        raise FactError(f"{fact.path}: fact {fact.name!r} must be a single SELECT query over the canonical views "
                        f"and facts (found {kinds})", fact.name)


def load_facts(extra_dirs: list[Path] | None = None) -> dict[str, Fact]:
    from ..reading.canonical import VIEWS

    facts: dict[str, Fact] = {}
    files = [(p, False) for p in bundled_fact_files()]
    for d in extra_dirs or []:
        files += [(p, True) for p in sorted(Path(d).rglob("*.sql"))]
    for path, team in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise FactError(f"{path}: cannot read fact file ({exc})") from None
        fact = parse_fact(text, str(path))
        fact.team = team
        if fact.name in facts:
            raise FactError(f"{path}: fact {fact.name!r} is already defined in {facts[fact.name].path}", fact.name)
        if fact.name in VIEWS or fact.name.startswith("_phase_patterns"):
            raise FactError(f"{path}: fact name {fact.name!r} is taken by a canonical view", fact.name)
        if team:
            _check_team_sql(fact)
        facts[fact.name] = fact
    for fact in facts.values():
        if not fact.team:
            continue
        for dep in fact.needs:
            if dep not in facts:
                raise FactError(f"{fact.path}: fact {fact.name!r} needs unknown fact {dep!r}", fact.name)
    return facts


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


def render_sql(fact: Fact, overrides: dict[str, float] | None = None) -> str:
    values = dict(fact.params)
    for key, value in (overrides or {}).items():
        if key in values:
            values[key] = float(value)

    def sub(m: re.Match[str]) -> str:
        v = values[m.group(1)]
        return repr(int(v)) if float(v).is_integer() else repr(float(v))

    body = "\n".join(line for line in fact.sql.splitlines() if not _HEADER.match(line.strip()))
    return _PARAM_REF.sub(sub, body).strip().rstrip(";")


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    """(name, DuckDB type) of each column of a table the facts created, in order."""
    return con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? AND "
                       "database_name = current_database() ORDER BY column_index", [table]).fetchall()


def materialize(con: duckdb.DuckDBPyConnection, fact: Fact, overrides: dict[str, float] | None = None) -> None:
    kind = "VIEW" if fact.is_helper and not fact.materialized else "TABLE"
    try:
        con.execute(f'CREATE OR REPLACE {kind} "{fact.name}" AS {render_sql(fact, overrides)}')
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
        raise FactError(f"{fact.path}: fact {fact.name!r} failed: {detail}", fact.name) from None
    if not fact.is_helper:
        actual = [name for name, _ in table_columns(con, fact.name)]
        if actual != fact.column_names:
            raise FactError(f"{fact.path}: documented columns {fact.column_names} differ from the SQL's {actual}",
                            fact.name)
