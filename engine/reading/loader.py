"""Fill the canonical tables of the current DuckDB database from an export attached as `src`, running the
adapters (adapters.py) through canonical_fill.fill.

The needed columns of the big tables are copied once into native DuckDB tables, so facts that scan them
several times never go back to SQLite. Text that DuckDB's SQLite scanner rejects (invalid UTF-8, BLOBs in a
text column) is read again through Python's sqlite3 with lossy decoding.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb

from . import adapters as adapt
from .adapter_base import Adapter, Source
from . import string_ids
from .canonical import stored_ddl
from .canonical_fill import fill
from .inputs import sqlite_uri, unreadable
from .metadata import ProfileInfo, read_metadata, read_window_and_graph_mode, write_profile_info
from ..base.duck import one_row, reraise_interrupt, scalar
from ..base.errors import InputError
from ..base.text import shown_path

# Tables whose rows are intervals on the capture timeline; rows with impossible times are dropped from them.
_TIMED_TABLES = ("kernels", "api_calls", "memcpys", "memsets", "syncs", "graph_launches")
_PLACED_TABLES = ("kernels", "memcpys", "memsets", "graph_launches")  # the GPU work every per-GPU number counts
# The time columns of every table on the capture timeline, checked against TIME_LIMIT_NS.
_TIME_COLUMNS = {**{t: ("start_ns", "end_ns") for t in _TIMED_TABLES}, "nvtx_ranges": ("start_ns", "end_ns"),
                 "osrt_calls": ("start_ns", "end_ns"), "gpu_metrics": ("ts_ns",), "cpu_samples": ("ts_ns",)}
# nsys timestamps count nanoseconds from the start of the session (nsys-schema.md, "Timestamps"); every real
# export ends within its ANALYSIS_DETAILS duration, minutes at most. 2**53 ns (104 days) is far past any capture,
# and the last integer a DOUBLE (in which the facts compute shares) holds exactly: a time beyond it, such as one
# near 2**63, is a damaged value, which would otherwise overflow the facts' INT64 arithmetic half-way.
TIME_LIMIT_NS = 2**53


@dataclass
class ViewStatus:
    rows: int
    reason: str | None = None  # why the view is empty, when it is


def _lossy_text(data: bytes) -> str:
    return data.decode("utf-8", "replace").replace("\x00", "")


class Loader:
    # canonical table -> the adapters that fill it, in the order the tables are filled
    adapters: dict[str, Callable[[Source], list[Adapter]]] = adapt.ADAPTERS

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, scan: str, tables: dict[str, list[str]],
                 progress: Callable[[str], None] | None):
        self.con = con
        self.path = path                   # as the user named it, for messages
        self.scan_uri = sqlite_uri(scan)   # what SQLite opens: the profile's descriptor, or its path
        self.source = Source(tables)
        self.progress = progress or (lambda _msg: None)
        self.views: dict[str, ViewStatus] = {}
        self.info = ProfileInfo(path=shown_path(path), source_tables=sorted(tables))
        self.invalid_times: dict[str, int] = {}
        self.placement: dict[str, int] = {}  # profile_info keys of _place_deviceless, e.g. no_device:kernels

    def build(self) -> tuple[ProfileInfo, dict[str, ViewStatus]]:
        read_metadata(self.con, self.source, self.info)
        self._strings()
        for table in self.adapters:
            if table == "devices":  # the GPUs that did work are those of the placed rows
                self._place_deviceless()
            self._fill_table(table)
        read_window_and_graph_mode(self.con, self.source, self.info, self.views["graph_launches"].rows)
        self.views["profile_info"] = ViewStatus(write_profile_info(self.con, self.info, self.invalid_times,
                                                                   self.placement))
        self.con.execute("DROP TABLE _strings")
        return self.info, self.views

    def _strings(self) -> None:
        self.con.execute(string_ids.STRINGS_TABLE)
        if self.source.has("StringIds"):
            self._read("StringIds", lambda t: self.con.execute(string_ids.strings_insert(t)))

    def _fill_table(self, table: str) -> None:
        self.con.execute(stored_ddl(table))
        if table == "kernels":
            self.con.execute(stored_ddl("kernel_names"))
        elif table == "api_calls":
            self.con.execute(stored_ddl("api_names"))
        adapters = self.adapters[table](self.source)
        for adapter in adapters:
            self._run(adapter)
        if adapters and table in _TIME_COLUMNS:  # first: a start near 2**63 is damage, not a reversed interval
            self._refuse_implausible_times(table, adapters)
        if adapters and table in _TIMED_TABLES:
            self._drop_impossible_times(table)
        # Millions of kernels and API calls share a few hundred names: the names are kept once (canonical.STORED).
        if table == "kernels":
            fill(self.con, "kernel_names", "kernel_names from StringIds", string_ids.KERNEL_NAMES)
        elif table == "api_calls" and adapters:
            fill(self.con, "api_names", "api_names from StringIds", string_ids.API_NAMES)
        rows = scalar(self.con, f'SELECT count(*) FROM "{table}"') if adapters else 0
        self.views[table] = ViewStatus(rows, None if rows else self._empty_reason(table, adapters))

    def _empty_reason(self, table: str, adapters: list[Adapter]) -> str:
        return adapt.empty_reason(table, adapters)

    def _run(self, adapter: Adapter) -> None:
        if adapter.announce and adapter.reads is not None:
            self._announce(adapter.reads)

        def insert(src: str) -> None:
            fill(self.con, adapter.table, adapter.name, adapter.select(src))

        if adapter.reads is None:
            insert("")
        else:
            self._read(adapter.reads, insert)

    def _announce(self, table: str) -> None:
        """Progress: which table is being read and how many rows it holds (SQLite's largest rowid, which
        costs one B-tree descent instead of a count)."""
        rows = None
        try:
            lite = sqlite3.connect(self.scan_uri, uri=True)
            try:
                rows = lite.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
            finally:
                lite.close()
        except sqlite3.Error:
            pass
        self.progress(f"reading {table}" + (f" ({rows:,} rows)" if rows else ""))

    def _read(self, source_table: str, run: Callable[[str], object]) -> None:
        """Run `run` on the attached `source_table`; if DuckDB rejects its text (invalid UTF-8 bytes, seen in
        real exports, or BLOBs in a text column), copy the table through Python's sqlite3 with lossy decoding
        and run again on the copy. Which of the two errors the scanner meets first depends on its threads."""
        try:
            run(f'src."{source_table}"')
        except (duckdb.Error, UnicodeDecodeError) as exc:  # the scanner can raise the latter for BLOB text
            reraise_interrupt(exc)
            text = str(exc).lower()
            if not isinstance(exc, UnicodeDecodeError) and not any(
                    word in text for word in ("unicode", "utf", 'of type "blob"')):
                raise unreadable(self.path, exc, source_table) from None
            native = self._copy_lossy(source_table)
            try:
                run(native)
            except duckdb.Error as exc2:
                reraise_interrupt(exc2)
                raise unreadable(self.path, exc2, source_table) from None

    def _copy_lossy(self, table: str) -> str:
        native = f'"_lossy_{table}"'
        columns = self.source.tables[table]
        lite = sqlite3.connect(self.scan_uri, uri=True)
        try:
            lite.text_factory = _lossy_text
            types = dict(self.con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name='src' AND table_name=?",
                [table]).fetchall())
            # A text column may hold BLOBs (invalid UTF-8 written as bytes): read them as text, lossily.
            selected = [f'CAST("{c}" AS TEXT)' if types.get(c, "VARCHAR") == "VARCHAR" else f'"{c}"' for c in columns]
            cursor = lite.execute(f'SELECT {", ".join(selected)} FROM "{table}"')
            self.con.execute(f"CREATE TEMP TABLE {native} ("
                             + ", ".join(f'"{c}" {types.get(c, "VARCHAR")}' for c in columns) + ")")
            placeholders = ", ".join("?" for _ in columns)
            while chunk := cursor.fetchmany(50_000):
                self.con.executemany(f"INSERT INTO {native} VALUES ({placeholders})", chunk)
        finally:
            lite.close()
        return native

    def _refuse_implausible_times(self, table: str, adapters: list[Adapter]) -> None:
        """A time beyond ±TIME_LIMIT_NS is no capture's: one sentence naming the export's table, not an overflow
        inside some fact later."""
        columns = _TIME_COLUMNS[table]
        extreme = ", ".join(f'max(abs("{c}"::HUGEINT))' for c in columns)
        worst = max((v for v in one_row(self.con, f'SELECT {extreme} FROM "{table}"') if v is not None), default=0)
        if worst > TIME_LIMIT_NS:
            raw = " or ".join(sorted({a.reads for a in adapters if a.reads})) or table
            raise InputError(f"the {raw} table of {self.path} holds a timestamp of {worst:,} ns, "
                             f"{worst / 86_400e9:,.0f} days from the session's start, which no capture reaches; the "
                             f"export looks damaged or hand-edited, so export the profile again with "
                             f"`nsys export --type sqlite`.")

    def _place_deviceless(self) -> None:
        """GPU work whose deviceId is NULL (nsys declares the column NOT NULL, so only a post-processed export holds
        such rows) is put on its GPU when the export says which: its context's (a CUDA context belongs to one
        device, engine/reading/nsys-schema.md), else its stream's (a stream belongs to one context), taken from the
        rows of the same process that name a device, when they all name the same one; else the only GPU, when the
        export lists or uses just one. Rows still without a device cannot be put on any GPU's timeline: they are
        left out of every number and counted, with their duration, like the rows of impossible times (profile_info
        `no_device:<view>`, `no_device_ns:<view>`, and `device_recovered:<view>` for those placed here; read by
        the invalid_timestamps fact)."""
        missing = {t: n for t in _PLACED_TABLES
                   if (n := scalar(self.con, f'SELECT count(*) FROM "{t}" WHERE device_id IS NULL'))}
        if not missing:
            return
        placed = " UNION ALL ".join(f'SELECT pid, stream_id, device_id FROM "{t}" WHERE device_id IS NOT NULL'
                                    for t in _PLACED_TABLES)
        self.con.execute(f"""CREATE TEMP TABLE _stream_device AS SELECT pid, stream_id, min(device_id) AS device_id
            FROM ({placed}) WHERE stream_id IS NOT NULL GROUP BY pid, stream_id
            HAVING count(DISTINCT device_id) = 1""")
        self.con.execute("""CREATE TEMP TABLE _context_device AS SELECT pid, context_id, min(device_id) AS device_id
            FROM kernels WHERE device_id IS NOT NULL AND context_id IS NOT NULL GROUP BY pid, context_id
            HAVING count(DISTINCT device_id) = 1""")
        gpus = [f"SELECT device_id FROM ({placed})"]
        if self.source.has("TARGET_INFO_GPU"):
            column = next((c for c in ("id", "deviceId") if c in self.source.tables["TARGET_INFO_GPU"]), None)
            if column:
                gpus.append(f'SELECT "{column}" FROM src."TARGET_INFO_GPU"')
        only = scalar(self.con, f"SELECT CASE WHEN count(DISTINCT device_id) = 1 THEN min(device_id) END "
                                f"FROM ({' UNION ALL '.join(gpus)}) g(device_id) WHERE device_id IS NOT NULL")
        try:
            for table, before in missing.items():
                if table == "kernels":
                    self.con.execute("""UPDATE kernels SET device_id = c.device_id FROM _context_device c
                        WHERE kernels.device_id IS NULL AND kernels.pid = c.pid
                          AND kernels.context_id = c.context_id""")
                self.con.execute(f"""UPDATE "{table}" SET device_id = s.device_id FROM _stream_device s
                    WHERE "{table}".device_id IS NULL AND "{table}".pid = s.pid
                      AND "{table}".stream_id = s.stream_id""")
                if only is not None:
                    self.con.execute(f'UPDATE "{table}" SET device_id = {int(only)} WHERE device_id IS NULL')
                left, left_ns = one_row(self.con, f'SELECT count(*), coalesce(sum(dur_ns), 0) FROM "{table}" '
                                                  f"WHERE device_id IS NULL")
                if before - left:
                    self.placement[f"device_recovered:{table}"] = before - left
                if left:
                    self.con.execute(f'DELETE FROM "{table}" WHERE device_id IS NULL')
                    self.placement[f"no_device:{table}"] = left
                    self.placement[f"no_device_ns:{table}"] = left_ns
                    self.views[table] = ViewStatus(self.views[table].rows - left,
                                                   self.views[table].reason)
        finally:
            self.con.execute("DROP TABLE _stream_device")
            self.con.execute("DROP TABLE _context_device")

    def _drop_impossible_times(self, table: str) -> None:
        """Rows that end before they start, or start before the capture's time origin, cannot be placed on the
        timeline: they are left out of every number, and counted so the report says so (profile_info
        `invalid_times:<view>`, read by the invalid_timestamps fact)."""
        bad = "NOT coalesce(start_ns >= 0 AND end_ns >= start_ns, false)"
        count = scalar(self.con, f'SELECT count(*) FROM "{table}" WHERE {bad}')
        if count:
            self.con.execute(f'DELETE FROM "{table}" WHERE {bad}')
        self.invalid_times[table] = count
