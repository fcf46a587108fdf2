"""Open an Nsight Systems export read-only and expose the canonical views: check the input (inputs.py), reuse its
cache or read it into a new canonical database (loader.py, cache.py), and open the facts' connection over it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import duckdb

from . import cache as store
from . import cache_format, leftovers
from .messages import CacheWarning
from .workspace import Workspace, check_address_space
from .canonical import STORED, VIEWS, by_id_sql, by_id_view, database_ddl, stored_rows, view_sql
from .inputs import (DiskFullError, check_nsys_export, check_profile_path, convert_report, describe_sqlite_failure,
                     is_report, is_trace, source_columns, unreadable)
from .kineto import CutInsideEvents, KinetoLoader
from . import kineto_file
from .kineto_file import split_trace
from .loader import Loader, ViewStatus
from .metadata import ProfileInfo
from .profile_file import ProfileFile
from ..base.duck import insert_rows, load_sqlite_scanner, reraise_interrupt, sql_literal
from ..base.errors import DiagnoseError, InputError
from ..base.text import is_utf8, shown_path

Progress = Callable[[str], None]


class Export:
    """An opened export: a DuckDB connection whose views show the canonical tables, plus what we learned.

    The canonical tables live in a compressed DuckDB file attached as `canon` (the cache, or a scratch copy);
    the connection's own database is a private scratch file where facts create their tables."""

    def __init__(self, con: duckdb.DuckDBPyConnection, info: ProfileInfo, views: dict[str, ViewStatus],
                 workspace: Workspace | None = None, cache_file: Path | None = None, cache_hit: bool = False,
                 cache_key: str = ""):
        self.con = con
        self.info = info
        self.views = views
        self.workspace = workspace
        self.cache_file = cache_file   # the cache holding the canonical tables, None when not cached
        self.cache_hit = cache_hit     # True when that cache was reused rather than built now
        self.cache_key = cache_key     # what that cache is sealed for (the profile's content, tool, format)

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


def open_export(path: str | os.PathLike, *, threads: int | None = None, progress: Progress | None = None,
                cache: bool = False, share: int = 1, cache_dir: str | os.PathLike | None = None,
                opened: ProfileFile | None = None) -> Export:
    """Open `path` read-only and expose the canonical views.

    With `cache`, the canonical tables are saved in the cache directory (the user's own, or `cache_dir`; see
    engine/reading/cache.py) and reused on the next run while the profile is unchanged; without it they are built in a
    scratch directory that is removed at close; a cache that does not fit on its disk is given up and the
    export read without one. `share`: diagnoses running side by side, which split the memory limit. `opened`:
    the profile already opened by prefetch_profile() for this `path` (the caller closes it). An
    .nsys-rep is converted with `nsys export` (when nsys is on PATH) into the scratch directory. Every
    temporary file goes when the export is closed, on failure, on Ctrl-C and on SIGTERM/SIGHUP."""
    p = check_profile_path(path)
    check_address_space()
    say = progress or (lambda _stage: None)
    directory, why_not = store.usable_cache_dir(cache_dir) if cache else (None, None)
    if why_not:
        say(CacheWarning(f"reading the export without a cache: {why_not}"))
    leftovers.sweep_once(directory)
    try:
        return _open(p, threads, say, directory, share, opened)
    except DiskFullError:
        if directory is None:
            raise
        say(CacheWarning(f"reading the export without a cache: there is no space left for it in {directory}; "
                               f"free some, or choose another directory with --cache-dir or {store.CACHE_DIR_ENV}"))
        return _open(p, threads, say, None, share, opened)


def prefetch_profile(path: str | os.PathLike) -> ProfileFile | None:
    """Open the profile and start hashing its content (the cache key) on another core, so that the hash is ready
    by the time the rules are loaded and the cache is looked up (not for an export SQLite may still be writing,
    which is never cached); None when it is not a regular file that can be opened: open_export then says what is
    wrong, in its order. Give the result to open_export(opened=...) and close it afterwards."""
    try:
        if not Path(path).is_file():
            return None  # a FIFO or device is never opened early
        profile = ProfileFile.open(Path(path))
    except (InputError, OSError):
        return None
    if not profile.live:
        profile.start_hashing()
    return profile


def empty_export() -> Export:
    """An export whose canonical tables are all empty, opened through the same sandbox as a real one: `rules
    check` runs team facts on it to refuse what a run would refuse."""
    return rows_export({})


def rows_export(tables: dict[str, list[dict[str, Any]]], name: str = "empty.sqlite") -> Export:
    """An export whose canonical views hold exactly `tables` (view name -> rows as mappings of its columns; a
    column a row leaves out is NULL) and nothing else, opened through the same sandbox as a real one: fact tests
    (engine/authoring/facttest.py) compute facts on it. Names of kernels and API calls are stored as ids, the way the
    reader stores them (canonical.STORED). A value the column's type cannot hold raises duckdb.Error."""
    workspace = Workspace.create(threads=1)
    try:
        target = workspace.root / "canonical.duckdb"
        con = workspace.reader()
        try:
            con.execute(f"ATTACH {sql_literal(str(target))} AS canon")
            con.execute("USE canon")
            for ddl in database_ddl().values():
                con.execute(ddl)
            for table, rows in stored_rows(tables).items():
                if rows:
                    columns = list(rows[0])
                    insert_rows(con, f'"{table}"', [[row[c] for c in columns] for row in rows],
                                "(" + ", ".join(f'"{c}"' for c in columns) + ")")
            con.execute("USE memory")
            con.execute("DETACH canon")
        finally:
            con.close()
        workspace.open_facts(target)
        views = {view: ViewStatus(len(tables.get(view, [])), None if tables.get(view) else f"the export has no {view}")
                 for view in VIEWS}
        return _finish(workspace, Path(name), ProfileInfo(path=name), views, cache_file=None, cache_hit=False)
    except BaseException:
        workspace.close()
        raise


def _open(p: Path, threads: int | None, say: Progress, directory: Path | None, share: int,
          opened: ProfileFile | None = None) -> Export:
    workspace = Workspace.create(threads, share)
    build_dir: Path | None = None
    try:
        with contextlib.nullcontext(opened) if opened is not None else ProfileFile.open(p) as profile:
            final = _cache_file(p, profile, directory, say)
            if final is not None:
                # The cache key needs the content's hash: it runs on another core while the cache is attached
                # (a cache hit) or the export is read (a miss).
                profile.start_hashing()
            else:
                profile.stop_hashing()  # begun by prefetch_profile, but no cache will be keyed on it
            if final is not None and store.trusted_cache_file(final):
                reused = _reuse(workspace, final, profile)
                if reused is not None:
                    say(f"reusing the canonical tables cached in {final.name}")
                    return _finish(workspace, p, *reused, cache_file=final, cache_hit=True,
                                   cache_key=_cache_key(profile))
            target = workspace.root / "canonical.duckdb"
            if final is not None:
                try:
                    build_dir = store.new_build_dir(final)
                    target = build_dir / "canonical.duckdb"
                except OSError:  # the directory became unwritable: diagnose without a cache
                    final = None
            info, views = _build_canonical(workspace, target, p, profile, say,
                                           cache_dir=final.parent if final is not None else None)
            if final is not None:
                store.publish(target, final, store.cache_mode(profile.stat.st_mode))
                target = final
            workspace.open_facts(target)
            return _finish(workspace, p, info, views, cache_file=final, cache_hit=False,
                           cache_key=_cache_key(profile) if final is not None else "")
    except BaseException:
        workspace.close()
        raise
    finally:
        if build_dir is not None:
            shutil.rmtree(build_dir, ignore_errors=True)


def _cache_file(p: Path, profile: ProfileFile, directory: Path | None, say: Progress) -> Path | None:
    """The cache to reuse or write for `p`, or None to read the export without one."""
    if directory is None:
        return None
    if profile.live:
        say(f"{p.name} has {profile.live}: reading it afresh, without a cache")
        return None
    if store.cache_secret(directory) is None:
        say(CacheWarning(f"reading the export without a cache: {store.key_problem(directory)}"))
        return None
    final = store.cache_path(p, directory)
    if final is not None and os.path.lexists(final) and not store.trusted_cache_file(final):
        if not store.own_unsafe_file(final):
            say(CacheWarning(f"reading the export without a cache: {store.cache_file_problem(final)}"))
            return None
        # This user's, but others may write it: never read (_open reuses only a trusted file), and replaced
        # atomically by the cache built now (store.publish), so caching is not lost for good.
        say(f"rebuilding {final.name}, which others may write")
    return final


def _cache_key(profile: ProfileFile) -> str:
    from ..base.version import tool_version

    return json.dumps({"format": cache_format.format_version(), "tool": tool_version(), "duckdb": duckdb.__version__,
                       **profile.fingerprint()}, sort_keys=True)


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
        if cache_format.foreign_objects(con, "canon") is not None:
            raise ValueError("foreign")
        state = cache_format.read_state(con, "canon")
        key = _cache_key(profile)
        if state is None or state.get("fingerprint") != key or \
                not store.sealed(key, state.get("seal"), cache_file.parent):
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
                     cache_dir: Path | None) -> tuple[ProfileInfo, dict[str, ViewStatus]]:
    """Read the export into a new canonical database at `target`, in a DuckDB instance of its own (the only one
    that ever loads the SQLite extension), closed before the facts run. `cache_dir`: where it will be cached (its
    seal is made with the key kept there), None when it will not be."""
    cached = cache_dir is not None
    if cached:
        profile.start_hashing()  # in the background, while the tables are read
    con = workspace.reader()
    converted: Path | None = None
    try:
        con.execute(f"ATTACH {sql_literal(str(target))} AS canon")
        con.execute("USE canon")
        scan = profile.scan_path
        if is_trace(p):
            try:
                info, views = _build_kineto(con, p, say, profile, workspace.root)
            except DiagnoseError:
                profile.check_unchanged()
                raise
            scan = ""
        elif is_report(p):
            say("converting with nsys export")
            converted = convert_report(p, workspace.root / "converted.sqlite")
            profile.check_unchanged()  # nsys read the report through its path
            scan = str(converted)
        elif profile.wal:
            # SQLite would create -shm and -wal files beside a WAL-mode export, even read-only (profile_file.py).
            say(f"copying {p.name} (write-ahead-log mode) into a private directory, so that nothing is written "
                f"beside it")
            converted = profile.private_copy(workspace.root)
            profile.check_unchanged()
            scan = str(converted)
        elif not is_utf8(scan):
            scan = profile.link_into(workspace.root)  # a name DuckDB cannot take (ProfileFile.link_into)
        if scan:
            try:
                info, views = _build(con, p, say, scan, profile.live)
            except DiagnoseError:
                profile.check_unchanged()  # an export replaced mid-read explains a failure better than its symptom
                raise
        profile.check_unchanged()
        info.path = shown_path(p)
        key = _cache_key(profile) if cached else ""
        cache_format.write_state(con, "canon", {"fingerprint": key,
                                         "seal": (store.seal(key, cache_dir) if cache_dir is not None else None) or "",
                                         "info": json.dumps(asdict(info)),
                                         "views": json.dumps({k: asdict(v) for k, v in views.items()})})
        con.execute("USE memory")
        con.execute("DETACH canon")  # checkpoints: the file is complete before it is published
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        raise unreadable(p, exc) from None
    finally:
        con.close()
        if converted is not None:
            for suffix in ("", "-wal", "-shm", "-journal"):  # with the side files SQLite made beside the copy
                Path(str(converted) + suffix).unlink(missing_ok=True)
    return info, views


def _build_kineto(con: duckdb.DuckDBPyConnection, p: Path, say: Progress, profile: ProfileFile,
                  scratch: Path) -> tuple[ProfileInfo, dict[str, ViewStatus]]:
    """Read the PyTorch-profiler trace `p` (from the descriptor `profile` holds) into the canonical tables of the
    current database: its events are split into a private file of `scratch` first (kineto_file.split_trace)."""
    say(f"reading {p.name} as a PyTorch-profiler trace")
    split = split_trace(p, scratch, fd=profile.fd, part_bytes=kineto_file.PART_BYTES)
    try:
        try:
            return KinetoLoader(con, p, split, say).build()
        except CutInsideEvents:
            split.remove()  # the parts were not cut between events after all: read the trace again, whole
            split = split_trace(p, scratch, fd=profile.fd, part_bytes=None)
            return KinetoLoader(con, p, split, say).build()
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        raise unreadable(p, exc, trace=True) from None
    finally:
        split.remove()


def _build(con: duckdb.DuckDBPyConnection, p: Path, progress: Progress | None, scan: str,
           live: str | None) -> tuple[ProfileInfo, dict[str, ViewStatus]]:
    """Read the SQLite export `p` (through the path `scan`) into the canonical tables of the current database.
    `live`: why the export may still be written by SQLite, for the error messages."""
    load_sqlite_scanner(con)
    try:
        tables = source_columns(scan)
        con.execute(f"ATTACH {sql_literal(scan)} AS src (TYPE sqlite, READ_ONLY)")
    except (duckdb.Error, sqlite3.Error) as exc:
        reraise_interrupt(exc)
        raise InputError(describe_sqlite_failure(p, exc, live)) from None
    check_nsys_export(p, tables)
    try:
        info, views = Loader(con, p, scan, tables, progress).build()
    except duckdb.Error as exc:  # a value no nsys export holds (e.g. an id beyond its column type)
        reraise_interrupt(exc)
        raise unreadable(p, exc) from None
    con.execute("DETACH src")
    return info, views


def _finish(workspace: Workspace, p: Path, info: ProfileInfo, views: dict[str, ViewStatus], *,
            cache_file: Path | None, cache_hit: bool, cache_key: str = "") -> Export:
    """Views in the scratch database over the canonical tables; the profile path is today's, not the cached."""
    con = workspace.con
    info.path = shown_path(p)
    for name in VIEWS:
        if name == "profile_info":
            con.execute(f"CREATE OR REPLACE VIEW profile_info AS SELECT key, CASE WHEN key = 'path' THEN "
                        f"{sql_literal(info.path)} ELSE value END AS value FROM canon.profile_info")
        else:
            con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {view_sql(name, "canon")}')
    for name in STORED:
        con.execute(f'CREATE OR REPLACE VIEW "{by_id_view(name)}" AS {by_id_sql(name, "canon")}')
    return Export(con, info, views, workspace, cache_file, cache_hit, cache_key)
