"""Open an Nsight Systems SQLite export read-only and build the canonical views.

Every nsys version difference is absorbed here and nowhere else:
two metadata-table names, legacy TARGET_INFO_GPU columns, columns added over the years, NVTX text
inline or in StringIds, pid/tid packed into globalTid, `_vNNNN` API suffixes, enum tables that
may be absent (codes are hard-coded), GPUs listed that did no work, graph-mode CUDA graphs.

The needed columns of the big tables are copied once into native DuckDB tables, so facts that
scan them several times never go back to SQLite.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import duckdb

from . import cache as store
from .canonical import SIDE_TABLES, VIEWS, database_ddl, stored_ddl, view_sql
from ..duck import is_out_of_memory, load_sqlite_scanner, reraise_interrupt, sql_literal
from ..errors import DiagnoseError, InputError
from .profile_file import SQLITE_MAGIC, ProfileFile
from .cache import Workspace, out_of_memory_error

PID_MASK = 0xFFFFFF

# Tables whose presence marks a file as an nsys export (the empty-capture export has only the first).
_NSYS_MARKERS = (
    "StringIds",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "TARGET_INFO_GPU",
    "TARGET_INFO_SESSION_START_TIME",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
)

COPY_KINDS = {
    0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}
MEM_KINDS = {
    0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device_static",
    6: "managed_static", 7: "unknown",
}
SYNC_TYPES = {0: "unknown", 1: "event_sync", 2: "stream_wait_event", 3: "stream_sync", 4: "context_sync"}
NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 59, 60, 75

# Views whose rows are intervals on the capture timeline; rows with impossible times are dropped from them.
_TIMED_VIEWS = ("kernels", "memcpys", "memsets", "syncs", "graph_launches")

_MISSING_REASON = {
    "kernels": "the export has no CUPTI_ACTIVITY_KIND_KERNEL table: no CUDA kernel was traced "
               "(profile with `nsys profile --trace=cuda`)",
    "api_calls": "the export has no CUPTI_ACTIVITY_KIND_RUNTIME table: CUDA API calls were not traced",
    "memcpys": "the export has no CUPTI_ACTIVITY_KIND_MEMCPY table: the capture has no CUDA memcpy data",
    "memsets": "the export has no CUPTI_ACTIVITY_KIND_MEMSET table: the capture has no CUDA memset data",
    "syncs": "the export has no CUPTI_ACTIVITY_KIND_SYNCHRONIZATION table: no CPU-blocking synchronisation was traced",
    "graph_launches": "the export has no CUPTI_ACTIVITY_KIND_GRAPH_TRACE table: no CUDA graph replay was "
                      "traced in graph mode",
    "nvtx_ranges": "the export has no NVTX_EVENTS table: the application emitted no NVTX ranges or "
                   "NVTX tracing was off (`--trace=nvtx`)",
    "gpu_metrics": "the export has no GPU_METRICS table: capture with `nsys profile --gpu-metrics-devices=all` "
                   "to get DRAM and SM throughput",
    "devices": "the export lists no GPU (no TARGET_INFO_GPU table)",
    "processes": "the export has no PROCESSES table",
}

# Columns read without a fallback: a table that lacks one cannot be used, and the user is told which.
# (Every other column degrades to NULL through _Builder.col.)
_REQUIRED_COLUMNS = {
    "StringIds": ("id", "value"),
    "EXPORT_META_DATA": ("name", "value"),
    "META_DATA_EXPORT": ("name", "value"),
    "META_DATA_CAPTURE": ("name", "value"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid"),
    "CUPTI_ACTIVITY_KIND_DRIVER": ("start", "end", "globalTid"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("start", "end"),
    "NVTX_EVENTS": ("start", "end", "eventType", "globalTid"),
    "TARGET_INFO_GPU_METRICS": ("typeId", "metricId", "metricName"),
    "PROCESSES": ("pid", "name"),
}


@dataclass
class ViewStatus:
    rows: int
    reason: str | None = None  # why the view is empty, when it is


@dataclass
class ProfileInfo:
    path: str
    nsys_version: str | None = None
    schema_version: str | None = None
    export_time_utc: str | None = None
    metadata_table: str | None = None
    command: str | None = None
    graph_trace_setting: str | None = None   # 'graph' or 'node' as recorded in the capture options
    graph_trace_mode: str | None = None      # 'graph' or 'node' when CUDA graphs ran (from the data first)
    start_ns: int | None = None              # span of the traced activity (what is judged)
    end_ns: int | None = None
    session_start_ns: int | None = None      # whole session per ANALYSIS_DETAILS, when recorded
    session_end_ns: int | None = None
    source_tables: list[str] = field(default_factory=list)

    @property
    def duration_ns(self) -> int | None:
        if self.start_ns is None or self.end_ns is None:
            return None
        return self.end_ns - self.start_ns


class Export:
    """An opened export: a DuckDB connection whose views show the canonical tables, plus what we learned.

    The canonical tables live in a compressed DuckDB file attached as `canon` (the cache, or a scratch copy);
    the connection's own database is a private scratch file where facts create their tables."""

    def __init__(self, con: duckdb.DuckDBPyConnection, info: ProfileInfo, views: dict[str, ViewStatus],
                 workspace: Workspace | None = None, cache_file: Path | None = None, cache_hit: bool = False):
        self.con = con
        self.info = info
        self.views = views
        self.workspace = workspace
        self.cache_file = cache_file   # the cache holding the canonical tables, None when not cached
        self.cache_hit = cache_hit     # True when that cache was reused rather than built now

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        return self.con.execute(sql, params or []).fetchall()

    def count(self, view: str) -> int:
        return self.views[view].rows

    @property
    def used_devices(self) -> list[int]:
        return [r[0] for r in self.query("SELECT device_id FROM devices WHERE used ORDER BY device_id")]

    def close(self) -> None:
        if self.workspace is not None:
            self.workspace.close()
        else:
            self.con.close()

    def __enter__(self) -> "Export":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_profile_path(path: str | os.PathLike) -> Path:
    """Fail with one clear sentence unless `path` is a readable SQLite file."""
    if os.fspath(path) == "":  # Path("") would mean the working directory
        raise InputError("the profile path is empty; give the path of an nsys SQLite export, e.g. run.sqlite.")
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file; give the path of an nsys SQLite export "
                         f"(`nsys export --type sqlite report.nsys-rep`).")
    if p.is_dir():
        raise InputError(f"{p} is a directory; give the path of one .sqlite export.")
    if not p.is_file():  # checked before any open: opening a FIFO blocks, reading a device never ends
        kind = ("a FIFO (named pipe)" if p.is_fifo() else "a socket" if p.is_socket()
                else "a character device" if p.is_char_device() else "a block device" if p.is_block_device()
                else "a special file")
        raise InputError(f"{p} is not a regular file but {kind}; give the path of an nsys SQLite export file "
                         f"(`nsys export --type sqlite --output run.sqlite report.nsys-rep`).")
    if p.suffix in (".nsys-rep", ".qdrep") and not shutil.which("nsys"):
        raise InputError(
            f"{p} is an Nsight Systems report, not a SQLite export; convert it first with "
            f"`nsys export --type sqlite --output {p.with_suffix('.sqlite')} {p}`."
        )
    if p.suffix in (".nsys-rep", ".qdrep"):
        return p  # converted by open_export with the nsys on PATH
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except PermissionError:
        raise InputError(f"{p}: permission denied; make the file readable (chmod +r) or run as its owner.") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot be read ({exc.strerror}).") from None
    if head != SQLITE_MAGIC:
        raise InputError(f"{p} is not a SQLite database; export the profile with "
                         f"`nsys export --type sqlite`.")
    return p


def _export_command(report: Path, output: Path) -> list[str]:
    # Absolute paths: a report named "-x.nsys-rep" must never reach nsys as an option.
    return ["nsys", "export", "--type", "sqlite", "--output", str(output.absolute()), "--force-overwrite", "true",
            str(report.absolute())]


def _convert_report(report: Path, output: Path) -> Path:
    """Convert an .nsys-rep with the `nsys` on PATH; one clear sentence (with nsys's own words) on failure."""
    command = _export_command(report, output)
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    except OSError as exc:
        raise InputError(f"{report}: cannot run `nsys` to convert it ({exc.strerror or exc}); convert it yourself "
                         f"with `nsys export --type sqlite --output {report.with_suffix('.sqlite')} {report}`.") from None
    if done.returncode != 0 or not output.is_file():
        said = " ".join((done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").split())
        raise InputError(f"{report}: `nsys export --type sqlite` could not convert it (nsys said: {said[:500]}); "
                         f"check that the report is complete and that this nsys is at least as new as the one "
                         f"that recorded it.")
    return output


Progress = Callable[[str], None]


def open_export(path: str | os.PathLike, *, threads: int | None = None, progress: Progress | None = None,
                cache: bool = False, share: int = 1, cache_dir: str | os.PathLike | None = None) -> Export:
    """Open `path` read-only and expose the canonical views.

    With `cache`, the canonical tables are saved in the cache directory (the user's own, or `cache_dir`; see
    engine/reading/cache.py) and reused on the next run while the profile is unchanged; without it they are built in a
    scratch directory that is removed at close; a cache that does not fit on its disk is given up and the
    export read without one. `share`: diagnoses running side by side, which split the memory limit. An
    .nsys-rep is converted with `nsys export` (when nsys is on PATH) into the scratch directory. Every
    temporary file goes when the export is closed, on failure, on Ctrl-C and on SIGTERM/SIGHUP."""
    p = check_profile_path(path)
    store.check_address_space()
    say = progress or (lambda _stage: None)
    directory = store.cache_dir(cache_dir) if cache else None
    store.sweep_once(directory)
    try:
        return _open(p, threads, say, directory, share)
    except DiskFullError:
        if directory is None:
            raise
        say("no space for the cache; reading the export without one")
        return _open(p, threads, say, None, share)


class DiskFullError(InputError):
    """The cache or the scratch directory ran out of disk space."""


def _open(p: Path, threads: int | None, say: Progress, directory: Path | None, share: int) -> Export:
    workspace = Workspace.create(threads, share)
    build_dir: Path | None = None
    try:
        with ProfileFile.open(p) as profile:
            final = _cache_file(p, profile, directory, say)
            if final is not None and final.exists():
                reused = _reuse(workspace, final, profile)
                if reused is not None:
                    say(f"reusing the canonical tables cached in {final.name}")
                    return _finish(workspace, p, *reused, cache_file=final, cache_hit=True)
            target = workspace.root / "canonical.duckdb"
            if final is not None:
                try:
                    build_dir = store.new_build_dir(final)
                    target = build_dir / "canonical.duckdb"
                except OSError:  # the directory became unwritable: diagnose without a cache
                    final = None
            info, views = _build_canonical(workspace, target, p, profile, say, cached=final is not None)
            if final is not None:
                store.publish(target, final, store.cache_mode(profile.stat.st_mode))
                target = final
            workspace.open_facts(target)
            return _finish(workspace, p, info, views, cache_file=final, cache_hit=False)
    except BaseException:
        workspace.close()
        raise
    finally:
        if build_dir is not None:
            shutil.rmtree(build_dir, ignore_errors=True)


def empty_export() -> Export:
    """An export whose canonical tables are all empty, opened through the same sandbox as a real one: `rules
    check` runs team facts on it to refuse what a run would refuse."""
    workspace = Workspace.create(threads=1)
    try:
        target = workspace.root / "canonical.duckdb"
        con = workspace.reader()
        try:
            con.execute(f"ATTACH {sql_literal(str(target))} AS canon")
            con.execute("USE canon")
            for ddl in database_ddl().values():
                con.execute(ddl)
            con.execute("USE memory")
            con.execute("DETACH canon")
        finally:
            con.close()
        workspace.open_facts(target)
        reason = "the export is empty"
        return _finish(workspace, Path("empty.sqlite"), ProfileInfo(path="empty.sqlite"),
                       {name: ViewStatus(0, reason) for name in VIEWS}, cache_file=None, cache_hit=False)
    except BaseException:
        workspace.close()
        raise


def _cache_file(p: Path, profile: ProfileFile, directory: Path | None, say: Progress) -> Path | None:
    """The cache to reuse or write for `p`, or None to read the export without one."""
    if directory is None:
        return None
    if profile.live:
        say(f"{p.name} has {profile.live}: reading it afresh, without a cache")
        return None
    if store.cache_secret() is None:
        say(f"no private key for caches in {store.user_cache_dir()}; reading the export without a cache")
        return None
    final = store.cache_path(p, directory)
    if final is not None and os.path.lexists(final) and not store.trusted_cache_file(final):
        say(f"{final} was not written by this user; reading the export without a cache")
        return None
    return final


def _cache_key(profile: ProfileFile) -> str:
    from ..version import tool_version

    return json.dumps({"format": store.CACHE_FORMAT, "schema": store.schema_digest(), "tool": tool_version(),
                       "duckdb": duckdb.__version__, **profile.fingerprint()}, sort_keys=True)


def _reuse(workspace: Workspace, cache_file: Path,
           profile: ProfileFile) -> tuple[ProfileInfo, dict[str, ViewStatus]] | None:
    """Attach a cache when it is one of ours built from this very content; None (detached) otherwise."""
    try:
        con = workspace.open_facts(cache_file)
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        workspace.close_facts()
        return None  # damaged, foreign or locked by a writer: build afresh
    try:
        if store.foreign_objects(con, "canon") is not None:
            raise ValueError("foreign")
        state = store.read_state(con, "canon")
        key = _cache_key(profile)
        if state is None or state.get("fingerprint") != key or not store.sealed(key, state.get("seal")):
            raise ValueError("stale, or not written by this user")
        info = ProfileInfo(**json.loads(state["info"]))
        views = {k: ViewStatus(**v) for k, v in json.loads(state["views"]).items()}
        if set(views) != set(VIEWS):
            raise ValueError("incomplete")
    except (ValueError, KeyError, TypeError, duckdb.Error) as exc:
        reraise_interrupt(exc)
        workspace.close_facts()
        return None
    return info, views


def _build_canonical(workspace: Workspace, target: Path, p: Path, profile: ProfileFile, say: Progress, *,
                     cached: bool) -> tuple[ProfileInfo, dict[str, ViewStatus]]:
    """Read the export into a new canonical database at `target`, in a DuckDB instance of its own (the only one
    that ever loads the SQLite extension), closed before the facts run."""
    if cached:
        profile.start_hashing()  # in the background, while the tables are read
    con = workspace.reader()
    converted: Path | None = None
    try:
        con.execute(f"ATTACH {sql_literal(str(target))} AS canon")
        con.execute("USE canon")
        scan = profile.scan_path
        if p.suffix in (".nsys-rep", ".qdrep"):
            say("converting with nsys export")
            converted = _convert_report(p, workspace.root / "converted.sqlite")
            profile.check_unchanged()  # nsys read the report through its path
            scan = str(converted)
        try:
            info, views = _build(con, p, say, scan, profile.live)
        except DiagnoseError:
            profile.check_unchanged()  # an export replaced mid-read explains a failure better than its symptom
            raise
        profile.check_unchanged()
        info.path = str(p)
        key = _cache_key(profile) if cached else ""
        store.write_state(con, "canon", {"fingerprint": key, "seal": store.seal(key) or "",
                                         "info": json.dumps(asdict(info)),
                                         "views": json.dumps({k: asdict(v) for k, v in views.items()})})
        con.execute("USE memory")
        con.execute("DETACH canon")  # checkpoints: the file is complete before it is published
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        raise _unreadable(p, exc) from None
    finally:
        con.close()
        if converted is not None:
            converted.unlink(missing_ok=True)
    return info, views


def _finish(workspace: Workspace, p: Path, info: ProfileInfo, views: dict[str, ViewStatus], *,
            cache_file: Path | None, cache_hit: bool) -> Export:
    """Views in the scratch database over the canonical tables; the profile path is today's, not the cached."""
    con = workspace.con
    info.path = str(p)
    for name in VIEWS:
        if name == "profile_info":
            con.execute(f"CREATE OR REPLACE VIEW profile_info AS SELECT key, CASE WHEN key = 'path' THEN "
                        f"{sql_literal(str(p))} ELSE value END AS value FROM canon.profile_info")
        else:
            con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {view_sql(name, "canon")}')
    return Export(con, info, views, workspace, cache_file, cache_hit)


def _build(con: duckdb.DuckDBPyConnection, p: Path, progress: Progress | None, scan: str,
           live: str | None) -> tuple[ProfileInfo, dict[str, ViewStatus]]:
    """Read the SQLite export `p` (through the path `scan`) into the canonical tables of the current database.
    `live`: why the export may still be written by SQLite, for the error messages."""
    load_sqlite_scanner(con)
    try:
        tables = _source_columns(scan)
        con.execute(f"ATTACH {sql_literal(scan)} AS src (TYPE sqlite, READ_ONLY)")
    except (duckdb.Error, sqlite3.Error) as exc:
        reraise_interrupt(exc)
        raise InputError(_describe_sqlite_failure(p, exc, live)) from None
    if not any(t in tables for t in _NSYS_MARKERS):
        raise InputError(
            f"{p} is a SQLite database but not an Nsight Systems export (it has none of the tables "
            f"nsys writes, such as StringIds or CUPTI_ACTIVITY_KIND_KERNEL); export the profile with "
            f"`nsys export --type sqlite`."
        )
    _check_required_columns(p, tables)
    builder = _Builder(con, p, scan, tables, progress)
    try:
        info, views = builder.build()
    except duckdb.Error as exc:  # a value no nsys export holds (e.g. an id beyond its column type)
        reraise_interrupt(exc)
        raise _unreadable(p, exc) from None
    con.execute("DETACH src")
    return info, views


def _check_required_columns(p: Path, tables: dict[str, list[str]]) -> None:
    for table, needed in _REQUIRED_COLUMNS.items():
        missing = [c for c in needed if table in tables and c not in tables[table]]
        if missing:
            names = ", ".join(f"`{c}`" for c in missing)
            raise InputError(
                f"{p}: the {table} table has no {names} column{'s' if len(missing) > 1 else ''}, which the "
                f"diagnosis needs; the file was not written by `nsys export` or was altered, so export the "
                f"profile again with `nsys export --type sqlite`.")


def _unreadable(p: Path, exc: Exception, table: str | None = None) -> DiagnoseError:
    text = str(exc).lower()
    if "no space left" in text or "could not write" in text or "disk full" in text:
        return DiskFullError(f"{p}: the disk ran out of space while its tables were being written (the cache "
                             f"directory, or the temporary directory {tempfile.gettempdir()}); free some space, or "
                             f"point TMPDIR or {store.CACHE_DIR_ENV} at a larger disk.")
    if is_out_of_memory(exc):
        return out_of_memory_error(f"reading {p}")
    if any(word in text for word in ("locked", "busy", "permission", "unable to open")):
        return InputError(_describe_sqlite_failure(p, exc))
    detail = " ".join(str(exc).split("\n")[0].split())
    where = f"the {table} table of {p}" if table else str(p)
    return InputError(f"{where} holds values no nsys export has ({detail}); the file was altered or damaged, so "
                      f"export the profile again with `nsys export --type sqlite`.")


def _describe_sqlite_failure(p: Path, exc: Exception, live: str | None = None) -> str:
    msg = str(exc).lower()
    if "locked" in msg or "busy" in msg:
        return f"{p} is locked by another program; wait for it to finish (or copy the file) and try again."
    if live and "journal" in live:
        return (f"{p} has {live} left by a program that stopped while writing it, and SQLite must roll it back "
                f"before the export can be read ({str(exc).splitlines()[0]}); open it once with "
                f"`sqlite3 {p} 'PRAGMA quick_check'` (which rolls the journal back), or export the profile again.")
    if live:
        return (f"{p} has {live} that SQLite cannot read without writing beside the export "
                f"({str(exc).splitlines()[0]}); wait until the program writing it has finished, or fold the log "
                f"into the file and leave WAL mode with "
                f"`sqlite3 {p} 'PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE'`.")
    if "permission" in msg or "readonly" in msg or "unable to open" in msg:
        return f"{p} cannot be opened for reading; check its permissions."
    return (f"{p} is damaged or truncated ({str(exc).splitlines()[0]}); export the profile again with "
            f"`nsys export --type sqlite`.")


def _sqlite_uri(scan: str) -> str:
    return Path(scan).as_uri() + "?mode=ro"


def _lossy_text(data: bytes) -> str:
    return data.decode("utf-8", "replace").replace("\x00", "")


def _source_columns(scan: str) -> dict[str, list[str]]:
    """Table -> columns, read with SQLite itself (DuckDB's catalog of an attached file is much slower). A table
    whose name is not valid UTF-8 is no table nsys writes, and is left out."""
    lite = sqlite3.connect(_sqlite_uri(scan), uri=True)
    try:
        lite.text_factory = bytes
        rows = lite.execute("SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p "
                            "WHERE m.type = 'table' ORDER BY m.name, p.cid").fetchall()
    finally:
        lite.close()
    tables: dict[str, list[str]] = {}
    for table, column in rows:
        try:
            tables.setdefault(table.decode("utf-8"), []).append(column.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    return tables


def _case(expr: str, mapping: dict[int, str], default: str) -> str:
    whens = " ".join(f"WHEN {k} THEN {sql_literal(v)}" for k, v in mapping.items())
    return f"(CASE {expr} {whens} ELSE {sql_literal(default)} END)"


def _pid(expr: str) -> str:
    return f"CAST(({expr} >> 24) & {PID_MASK} AS BIGINT)"


def _tid(expr: str) -> str:
    return f"CAST({expr} & {PID_MASK} AS BIGINT)"


class _Builder:
    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, scan: str, tables: dict[str, list[str]],
                 progress: Callable[[str], None] | None):
        self.con = con
        self.path = path          # as the user named it, for messages
        self.scan_uri = _sqlite_uri(scan)  # what SQLite opens: the profile's descriptor, or its path
        self.tables = tables
        self.progress = progress or (lambda _msg: None)
        self.views: dict[str, ViewStatus] = {}
        self.info = ProfileInfo(path=str(path), source_tables=sorted(tables))
        self.invalid_times: dict[str, int] = {}

    # -- helpers -------------------------------------------------------------------------------
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

    def has(self, table: str) -> bool:
        return table in self.tables

    def col(self, table: str, column: str, alias: str, default: str = "NULL") -> str:
        return f'{alias}."{column}"' if column in self.tables.get(table, ()) else default

    def _run_with_fallback(self, source_table: str, make_sql: Callable[[str], str]) -> None:
        """Run SQL that reads `source_table`; if DuckDB rejects its text (invalid UTF-8 bytes, seen in
        real exports, or BLOBs in a text column), copy the table through Python's sqlite3 with lossy decoding
        and retry. Which of the two errors the scanner meets first depends on its threads."""
        try:
            self.con.execute(make_sql(f'src."{source_table}"'))
        except (duckdb.Error, UnicodeDecodeError) as exc:  # the scanner can raise the latter for BLOB text
            reraise_interrupt(exc)
            text = str(exc).lower()
            if not isinstance(exc, UnicodeDecodeError) and not any(
                    word in text for word in ("unicode", "utf", 'of type "blob"')):
                raise _unreadable(self.path, exc, source_table) from None
            native = self._copy_lossy(source_table)
            try:
                self.con.execute(make_sql(native))
            except duckdb.Error as exc2:
                reraise_interrupt(exc2)
                raise _unreadable(self.path, exc2, source_table) from None

    def _copy_lossy(self, table: str) -> str:
        native = f'"_lossy_{table}"'
        columns = self.tables[table]
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

    def _create_view(self, view: str, source_table: str | None, make_select: Callable[[str], str] | None) -> None:
        self.con.execute(stored_ddl(view))
        if source_table is None or not self.has(source_table) or make_select is None:
            self.views[view] = ViewStatus(0, _MISSING_REASON.get(view, f"the export has no data for {view}"))
            return
        self._announce(source_table)
        self._run_with_fallback(source_table, lambda t: f'INSERT INTO "{view}" {make_select(t)}')
        if view in _TIMED_VIEWS:
            self._drop_impossible_times(view)
        rows = self.con.execute(f'SELECT count(*) FROM "{view}"').fetchone()[0]
        reason = None if rows else f"the {source_table} table of the export is empty"
        self.views[view] = ViewStatus(rows, reason)

    def _drop_impossible_times(self, view: str) -> None:
        """Rows that end before they start, or start before the capture's time origin, cannot be placed on the
        timeline: they are left out of every number, and counted so the report says so (profile_info
        `invalid_times:<view>`, read by the invalid_timestamps fact)."""
        bad = "NOT coalesce(start_ns >= 0 AND end_ns >= start_ns, false)"
        count = self.con.execute(f'SELECT count(*) FROM "{view}" WHERE {bad}').fetchone()[0]
        if count:
            self.con.execute(f'DELETE FROM "{view}" WHERE {bad}')
        self.invalid_times[view] = count

    # -- build ---------------------------------------------------------------------------------
    def build(self) -> Export:
        self._metadata()
        self._strings()
        self._kernels()
        self._api_calls()
        self._memcpys()
        self._memsets()
        self._syncs()
        self._graph_launches()
        self._nvtx()
        self._gpu_metrics()
        self._devices()
        self._processes()
        self._window_and_graph_mode()
        self._profile_info()
        self.con.execute("DROP TABLE _strings")
        return self.info, self.views

    def _metadata(self) -> None:
        meta: dict[str, str] = {}
        for table in ("EXPORT_META_DATA", "META_DATA_EXPORT"):  # renamed in 2023.3
            if self.has(table):
                self.info.metadata_table = table
                for name, value in self.con.execute(f'SELECT name, value FROM src."{table}"').fetchall():
                    meta.setdefault(str(name), "" if value is None else str(value))
        self.info.nsys_version = meta.get("EXPORT_PRODUCT_VERSION") or None
        self.info.schema_version = meta.get("EXPORT_SCHEMA_VERSION") or None
        self.info.export_time_utc = meta.get("EXPORT_TIME_UTC") or None
        if self.has("META_DATA_CAPTURE"):
            capture = self.con.execute('SELECT name, value FROM src."META_DATA_CAPTURE"').fetchall()
            for name, value in capture:
                name = str(name)
                if name.endswith("CUDA_GRAPH_TRACE_OPTIONS:MODE") and value:
                    self.info.graph_trace_setting = str(value).strip().lower()
                elif name == "PROCESS_0:COMMAND" and value and not self.info.command:
                    self.info.command = str(value)

    def _strings(self) -> None:
        # api_name: the string without an API version suffix, computed once per string rather than once per call.
        self.con.execute("CREATE TABLE _strings (id BIGINT, value VARCHAR, api_name VARCHAR)")
        if self.has("StringIds"):
            self._run_with_fallback("StringIds", lambda t: f"INSERT INTO _strings SELECT id, value, "
                                                           f"regexp_replace(value, '_v[0-9]+$', '') FROM {t}")

    def _kernels(self) -> None:
        T = "CUPTI_ACTIVITY_KIND_KERNEL"

        def select(src: str) -> str:
            c = lambda name, default="NULL": self.col(T, name, "k", default)  # noqa: E731
            return f"""
            SELECT k.start, k."end", k."end" - k.start,
                   {c('deviceId')}, {c('streamId')}, {_pid(c('globalPid'))}, {c('correlationId')},
                   {c('contextId')},
                   COALESCE({c('demangledName')}, {c('shortName')}),
                   NULLIF({c('graphNodeId')}, 0), NULLIF({c('graphId')}, 0),
                   {c('gridX', '1')} * {c('gridY', '1')} * {c('gridZ', '1')},
                   {c('blockX', '1')} * {c('blockY', '1')} * {c('blockZ', '1')},
                   {c('registersPerThread')}, {c('shortName')}
            FROM {src} k"""

        # Millions of kernels share a few hundred names: the rows keep the string ids and the names are kept
        # once in kernel_names (the `kernels` view joins them back, see canonical.STORED).
        self._create_view("kernels", T, select)
        self.con.execute(SIDE_TABLES["kernel_names"])
        self.con.execute("""INSERT INTO kernel_names SELECT id, any_value(value) FROM _strings
                            WHERE id IN (SELECT name_id FROM kernels UNION SELECT short_name_id FROM kernels)
                            GROUP BY id""")

    def _api_calls(self) -> None:
        sources = [t for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER") if self.has(t)]
        # As for kernels: the rows keep the name's string id, the names live once in api_names.
        self.con.execute(stored_ddl("api_calls"))
        self.con.execute(SIDE_TABLES["api_names"])
        if not sources:
            self.views["api_calls"] = ViewStatus(0, _MISSING_REASON["api_calls"])
            return
        for T in sources:
            def select(src: str, T: str = T) -> str:
                c = lambda name, default="NULL": self.col(T, name, "r", default)  # noqa: E731
                event_class = c("eventClass")
                return f"""
                SELECT r.start, r."end", r."end" - r.start,
                       {_pid('r.globalTid')}, {_tid('r.globalTid')}, r.globalTid, {c('correlationId')},
                       {c('nameId')}, {c('returnValue')}, CAST({event_class} AS TINYINT)
                FROM {src} r"""

            self._announce(T)
            self._run_with_fallback(T, lambda t, select=select: f"INSERT INTO api_calls {select(t)}")
        self._drop_impossible_times("api_calls")
        self.con.execute("""INSERT INTO api_names SELECT id, any_value(api_name), any_value(value) FROM _strings
                            WHERE id IN (SELECT DISTINCT name_id FROM api_calls) GROUP BY id""")
        rows = self.con.execute("SELECT count(*) FROM api_calls").fetchone()[0]
        self.views["api_calls"] = ViewStatus(rows, None if rows else "the CUDA API tables of the export are empty")

    def _memcpys(self) -> None:
        T = "CUPTI_ACTIVITY_KIND_MEMCPY"

        def select(src: str) -> str:
            c = lambda name, default="NULL": self.col(T, name, "m", default)  # noqa: E731
            kind = c("copyKind", "0")
            return f"""
            SELECT m.start, m."end", m."end" - m.start,
                   {c('deviceId')}, {c('streamId')}, {_pid(c('globalPid'))}, {c('correlationId')},
                   {c('bytes')}, {_case(kind, COPY_KINDS, 'unknown')},
                   {_case(c('srcKind', '7'), MEM_KINDS, 'unknown')}, {_case(c('dstKind', '7'), MEM_KINDS, 'unknown')},
                   {kind} IN (11, 12, 13),
                   CASE WHEN {kind} IN (11, 12, 13) THEN {c('migrationCause')} END,
                   NULLIF({c('graphNodeId')}, 0)
            FROM {src} m"""

        self._create_view("memcpys", T, select)

    def _memsets(self) -> None:
        T = "CUPTI_ACTIVITY_KIND_MEMSET"

        def select(src: str) -> str:
            c = lambda name, default="NULL": self.col(T, name, "m", default)  # noqa: E731
            return f"""
            SELECT m.start, m."end", m."end" - m.start,
                   {c('deviceId')}, {c('streamId')}, {_pid(c('globalPid'))}, {c('correlationId')},
                   {c('bytes')}, {_case(c('memKind', '7'), MEM_KINDS, 'unknown')}, NULLIF({c('graphNodeId')}, 0)
            FROM {src} m"""

        self._create_view("memsets", T, select)

    def _syncs(self) -> None:
        T = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"

        def select(src: str) -> str:
            c = lambda name, default="NULL": self.col(T, name, "s", default)  # noqa: E731
            return f"""
            SELECT s.start, s."end", s."end" - s.start,
                   {c('deviceId')}, {c('streamId')}, {_pid(c('globalPid'))}, {c('correlationId')},
                   {_case(c('syncType', '0'), SYNC_TYPES, 'unknown')}, a.name
            FROM {src} s
            LEFT JOIN (SELECT a.pid, a.correlation_id, any_value(n.name) AS name
                       FROM api_calls a LEFT JOIN api_names n ON n.id = a.name_id
                       WHERE a.correlation_id IN (SELECT correlationId FROM {src}) GROUP BY ALL) a
              ON a.correlation_id = {c('correlationId')} AND a.pid = {_pid(c('globalPid'))}"""

        self._create_view("syncs", T, select)

    def _graph_launches(self) -> None:
        T = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"

        def select(src: str) -> str:
            c = lambda name, default="NULL": self.col(T, name, "g", default)  # noqa: E731
            return f"""
            SELECT g.start, g."end", g."end" - g.start,
                   {c('deviceId')}, {c('streamId')}, {_pid(c('globalPid'))}, {c('correlationId')},
                   {c('graphId')}, {c('graphExecId')}
            FROM {src} g"""

        self._create_view("graph_launches", T, select)

    def _nvtx(self) -> None:
        T = "NVTX_EVENTS"

        def select(src: str) -> str:
            c = lambda name, default="NULL": self.col(T, name, "e", default)  # noqa: E731
            d = lambda name, default="NULL": self.col(T, name, "d", default)  # noqa: E731
            text_e = f"COALESCE({c('text')}, st.value)"
            return f"""
            WITH domains AS (
                SELECT {d('domainId')} AS domain_id, {_pid('d.globalTid')} AS pid,
                       any_value(COALESCE({d('text')}, ds.value)) AS name
                FROM {src} d LEFT JOIN _strings ds ON ds.id = {d('textId')}
                WHERE d.eventType = {NVTX_DOMAIN_CREATE}
                GROUP BY ALL)
            SELECT e.start, e."end", e."end" - e.start,
                   {_pid('e.globalTid')}, {_tid('e.globalTid')}, e.globalTid,
                   {text_e}, dom.name,
                   CASE e.eventType WHEN {NVTX_PUSH_POP} THEN 'push_pop' ELSE 'start_end' END
            FROM {src} e
            LEFT JOIN _strings st ON st.id = {c('textId')}
            LEFT JOIN domains dom ON dom.domain_id = {c('domainId')} AND dom.pid = {_pid('e.globalTid')}
                                 AND {c('domainId', '0')} <> 0
            WHERE e.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END})
              AND e."end" IS NOT NULL AND e."end" >= e.start"""

        self._create_view("nvtx_ranges", T, select)

    def _gpu_metrics(self) -> None:
        T = "GPU_METRICS"
        info = "TARGET_INFO_GPU_METRICS"

        def select(src: str) -> str:
            c = lambda name, default="NULL": self.col(T, name, "g", default)  # noqa: E731
            ts = c("timestamp", c("rawTimestamp"))
            # The GPU is the low byte of typeId (as nsys2prv decodes it); names come from the info table.
            device = f"CAST({c('typeId', '0')} & 255 AS INTEGER)"
            if self.has(info):
                return f"""
                SELECT {ts}, {device}, COALESCE(t.metric_name, 'metric ' || {c('metricId')}),
                       CAST({c('value')} AS DOUBLE)
                FROM {src} g
                LEFT JOIN (SELECT typeId AS type_id, metricId AS metric_id, any_value(metricName) AS metric_name
                           FROM src."{info}" GROUP BY ALL) t
                  ON t.type_id = {c('typeId')} AND t.metric_id = {c('metricId')}"""
            return f"""SELECT {ts}, {device}, 'metric ' || {c('metricId')}, CAST({c('value')} AS DOUBLE)
                       FROM {src} g"""

        self._create_view("gpu_metrics", T, select)

    def _devices(self) -> None:
        self.con.execute(VIEWS["devices"].ddl())
        listed = "SELECT NULL::INTEGER AS device_id, NULL::VARCHAR AS name, NULL::INTEGER AS sm, NULL::BIGINT AS bw, " \
                 "NULL::BIGINT AS mem, NULL::BIGINT AS clk, NULL::VARCHAR AS cc WHERE false"
        T = "TARGET_INFO_GPU"
        if self.has(T):
            g = lambda name, default="NULL": self.col(T, name, "g", default)  # noqa: E731
            device_id = g("id", g("deviceId"))
            if "smCount" in self.tables[T]:
                listed = f"""SELECT {device_id}, {g("name")}, {g('smCount')}, {g('memoryBandwidth')}, {g('totalMemory')},
                                    {g('clockRate')}, {g('computeMajor')} || '.' || {g('computeMinor')}
                             FROM src."{T}" g"""
            elif self.has("TARGET_INFO_CUDA_GPU"):  # legacy: details live in a second table, in kB/s and kHz
                listed = f"""SELECT {device_id}, {g("name")}, c.numMultiprocessors, c.globalMemoryBandwidth * 1000,
                                    c.globalMemorySize, c.coreClockRate * 1000,
                                    c.computeCapabilityMajor || '.' || c.computeCapabilityMinor
                             FROM src."{T}" g LEFT JOIN src."TARGET_INFO_CUDA_GPU" c ON c.deviceId = {device_id}"""
            else:
                listed = f"""SELECT {device_id}, {g("name")}, NULL, NULL, NULL, NULL, NULL FROM src."{T}" g"""
        self.con.execute(f"""
            INSERT INTO devices
            WITH listed AS (
                SELECT device_id, any_value(name) AS name, any_value(sm) AS sm, any_value(bw) AS bw,
                       any_value(mem) AS mem, any_value(clk) AS clk, any_value(cc) AS cc
                FROM ({listed}) l(device_id, name, sm, bw, mem, clk, cc)
                WHERE device_id IS NOT NULL GROUP BY device_id),
            used AS (
                SELECT DISTINCT device_id FROM kernels UNION SELECT DISTINCT device_id FROM memcpys
                UNION SELECT DISTINCT device_id FROM memsets UNION SELECT DISTINCT device_id FROM graph_launches)
            SELECT COALESCE(l.device_id, u.device_id), l.name, u.device_id IS NOT NULL,
                   l.sm, l.bw, l.mem, l.clk, l.cc
            FROM listed l FULL OUTER JOIN (SELECT device_id FROM used WHERE device_id IS NOT NULL) u
              ON u.device_id = l.device_id
            ORDER BY 1""")
        rows = self.con.execute("SELECT count(*) FROM devices").fetchone()[0]
        self.views["devices"] = ViewStatus(rows, None if rows else _MISSING_REASON["devices"])

    def _processes(self) -> None:
        self.con.execute(VIEWS["processes"].ddl())
        listed = "SELECT NULL::BIGINT AS pid, NULL::VARCHAR AS name WHERE false"
        if self.has("PROCESSES"):
            listed = 'SELECT pid, name FROM src."PROCESSES"'

        def insert(src: str) -> str:
            return f"""
            INSERT INTO processes
            WITH listed AS (SELECT pid, any_value(name) AS name FROM ({listed.replace('src."PROCESSES"', src)})
                            WHERE pid IS NOT NULL GROUP BY pid),
                 seen AS (SELECT pid FROM kernels UNION SELECT pid FROM api_calls UNION SELECT pid FROM memcpys
                          UNION SELECT pid FROM nvtx_ranges)
            SELECT COALESCE(l.pid, s.pid), l.name
            FROM listed l FULL OUTER JOIN (SELECT pid FROM seen WHERE pid IS NOT NULL) s ON s.pid = l.pid
            ORDER BY 1"""

        if self.has("PROCESSES"):
            self._run_with_fallback("PROCESSES", insert)
        else:
            self.con.execute(insert(""))
        rows = self.con.execute("SELECT count(*) FROM processes").fetchone()[0]
        self.views["processes"] = ViewStatus(rows, None if rows else _MISSING_REASON["processes"])

    def _window_and_graph_mode(self) -> None:
        span = self.con.execute("""
            SELECT min(s), max(e) FROM (
                SELECT min(start_ns) s, max(end_ns) e FROM kernels
                UNION ALL SELECT min(start_ns), max(end_ns) FROM api_calls
                UNION ALL SELECT min(start_ns), max(end_ns) FROM memcpys
                UNION ALL SELECT min(start_ns), max(end_ns) FROM memsets
                UNION ALL SELECT min(start_ns), max(end_ns) FROM graph_launches
                UNION ALL SELECT min(start_ns), max(end_ns) FROM nvtx_ranges WHERE start_ns >= 0)""").fetchone()
        # The judged window is the span of the traced activity: ANALYSIS_DETAILS spans the whole
        # session (idle start-up included) and, in derived time-slices, the original capture.
        self.info.start_ns, self.info.end_ns = span
        if self.has("ANALYSIS_DETAILS"):
            cols = self.tables["ANALYSIS_DETAILS"]
            if "startTime" in cols and "stopTime" in cols:
                row = self.con.execute('SELECT min(startTime), max(stopTime) FROM src."ANALYSIS_DETAILS"').fetchone()
                if row and row[0] is not None and row[1] is not None and row[1] > row[0]:
                    self.info.session_start_ns, self.info.session_end_ns = row
        node_kernels = self.con.execute("SELECT count(*) FROM kernels WHERE graph_node_id IS NOT NULL").fetchone()[0]
        if self.views["graph_launches"].rows:
            self.info.graph_trace_mode = "graph"
        elif node_kernels:
            self.info.graph_trace_mode = "node"
        else:
            # No graph work visible: the setting only matters if graphs were launched at all.
            launches = self.con.execute("SELECT count(*) FROM api_calls WHERE name_id IN (SELECT id FROM api_names "
                                        "WHERE name LIKE 'cudaGraphLaunch%' OR name LIKE 'cuGraphLaunch%')"
                                        ).fetchone()[0]
            self.info.graph_trace_mode = self.info.graph_trace_setting if launches else None

    def _profile_info(self) -> None:
        info = self.info
        pairs = {
            "path": info.path,
            "nsys_version": info.nsys_version,
            "schema_version": info.schema_version,
            "export_time_utc": info.export_time_utc,
            "metadata_table": info.metadata_table,
            "command": info.command,
            "graph_trace_setting": info.graph_trace_setting,
            "graph_trace_mode": info.graph_trace_mode,
            "start_ns": info.start_ns,
            "end_ns": info.end_ns,
            "duration_ns": info.duration_ns,
            "session_start_ns": info.session_start_ns,
            "session_end_ns": info.session_end_ns,
            **{f"invalid_times:{view}": count for view, count in sorted(self.invalid_times.items())},
        }
        self.con.execute(VIEWS["profile_info"].ddl())
        self.con.executemany("INSERT INTO profile_info VALUES (?, ?)",
                             [(k, None if v is None else str(v)) for k, v in pairs.items()])
        self.views["profile_info"] = ViewStatus(len(pairs))
