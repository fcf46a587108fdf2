"""What every table adapter is built from: the export's tables and columns (Source), an adapter (Adapter), and the
SQL fragments the adapters share (codes decoded by CASE, pid/tid out of globalTid, the columns of every GPU activity
table). The adapters themselves are in adapters.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..base.duck import sql_literal

# globalTid / globalPid: tid in bits 0-23, pid in bits 24-47 (nsys-schema.md, "Pitfalls the reader handles")
PID_MASK = 0xFFFFFF


@dataclass(frozen=True)
class Source:
    """The tables of the export and their columns."""

    tables: dict[str, list[str]]

    def has(self, table: str) -> bool:
        return table in self.tables

    def col(self, table: str, column: str, alias: str, default: str | None = None, type_: str = "BIGINT") -> str:
        """`alias."column"` when the table has the column, else `default` (a NULL of `type_` when none)."""
        if column in self.tables.get(table, ()):
            return f'{alias}."{column}"'
        return default if default is not None else f"NULL::{type_}"


@dataclass(frozen=True)
class Adapter:
    """How one raw table (`reads`) fills the canonical `table`. `select` gets the name under which `reads` is to
    be read (the attached table, or a lossy copy of it; see loader.py). `reads` is None when the query reads
    nothing that may need that copy; `announce`: report the table in the progress messages."""

    table: str
    reads: str | None
    select: Callable[[str], str]
    announce: bool = True

    @property
    def name(self) -> str:
        return f"{self.table} from {self.reads or 'the export'}"


def _case(expr: str, mapping: dict[int, str], default: str) -> str:
    whens = " ".join(f"WHEN {k} THEN {sql_literal(v)}" for k, v in mapping.items())
    return f"(CASE {expr} {whens} ELSE {sql_literal(default)} END)"


def _pid(expr: str) -> str:
    return f"CAST(({expr} >> 24) & {PID_MASK} AS BIGINT)"


def _tid(expr: str) -> str:
    return f"CAST({expr} & {PID_MASK} AS BIGINT)"


def _gpu_place(c: Callable[..., str]) -> str:
    """The columns every GPU activity table has, named as canonical._GPU_PLACE."""
    return (f"{c('deviceId')} AS device_id, {c('streamId')} AS stream_id, {_pid(c('globalPid'))} AS pid, "
            f"{c('correlationId')} AS correlation_id")


def _times(alias: str) -> str:
    return f'{alias}.start AS start_ns, {alias}."end" AS end_ns, {alias}."end" - {alias}.start AS dur_ns'


def _columns(source: Source, table: str, alias: str) -> Callable[..., str]:
    return lambda name, default=None, type_="BIGINT": source.col(table, name, alias, default, type_)


def _has_columns(source: Source, table: str, columns: tuple[str, ...]) -> bool:
    """Whether the export has `table` with every one of `columns` (for the optional tables, which are left empty
    rather than refused when they lack a column they cannot do without)."""
    return source.has(table) and all(c in source.tables[table] for c in columns)
