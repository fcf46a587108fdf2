"""Diagnose a fleet of independent profiles in parallel and write one row per profile to a table file.

    rows = diagnose_batch(find_profiles(["nightly/", "runs/**/*.sqlite"]).profiles, config, jobs=4)
    write_table(rows, Path("results.parquet"), mode=0o644)     # or .csv, .jsonl

Each profile is diagnosed exactly as `diagnose(path, config)` would, in a process of its own pool: DuckDB is not
fork-safe once used, so the workers are spawned, and each gets an equal share of the CPUs and of DuckDB's memory
limit. A profile that cannot be diagnosed is a row with the one-sentence error `diagnose` would print, never the
end of the batch; a bug (an unexpected exception, or a worker process that died) is a row whose error starts with
"internal error:". The table's columns are the same for every row (nulls where absent), so the files of several
shards can be concatenated.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pickle
import shutil
import signal
import stat
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.queues import SimpleQueue
from pathlib import Path
from typing import Any

import duckdb

from .api import Pack, diagnose, load_pack
from ..diagnosis.config import Config
from ..base.duck import offline_connection, reraise_interrupt, sql_literal, usable_cpus
from ..base.errors import INTERNAL, InputError, OutputError, error_sentence
from ..reading.cache import cache_secret, usable_cache_dir
from ..reading.inputs import SQLITE_MAGIC, is_report, is_trace
from ..reading.ranks import directory_entries, exports_among
from ..reports.metrics import METRICS, Metric
from ..base.text import is_utf8, printable, shown_path
from ..model.report import Report
from ..base.vocabulary import Severity

TABLE_FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}
STATUS_OK, STATUS_ERROR = "ok", "error"  # the status column: diagnosed, or an error row


# ------------------------------------------------------------------------------------------------------------
# The table: one row per profile, the same columns for every row
# ------------------------------------------------------------------------------------------------------------
def _metric_type(metric: Metric) -> str:
    return "BIGINT" if metric.unit in ("count", "bytes") else "DOUBLE"


# The key metrics of the single-profile report (engine/reports/metrics.py), one column each, named by their key.
METRIC_COLUMNS: tuple[Metric, ...] = tuple(m for m in METRICS if m.report)
FINDING_FIELDS = {"rule": "VARCHAR", "category": "VARCHAR", "severity": "VARCHAR", "subject": "VARCHAR",
                  "phase": "VARCHAR", "impact": "DOUBLE", "title": "VARCHAR"}
COLUMNS: dict[str, Any] = {
    "path": "VARCHAR",
    "status": "VARCHAR",          # ok | error
    "error": "VARCHAR",           # one sentence; null when ok
    "verdict": "VARCHAR",         # category of the primary bottleneck, 'none' when nothing is wrong
    "verdict_rule": "VARCHAR",
    "headline": "VARCHAR",
    "primary_cost": "DOUBLE",     # the verdict's impact: share of the GPU time the primary finding costs (0-1)
    "phase": "VARCHAR",
    "stack": "VARCHAR",
    "source_format": "VARCHAR",   # nsys (an export) or kineto (a PyTorch-profiler trace); null when neither
    "nsys_version": "VARCHAR",
    "duration_ns": "BIGINT",
    **{m.key: _metric_type(m) for m in METRIC_COLUMNS},
    **{f"findings_{s}": "BIGINT" for s in Severity.names()},
    "findings": [FINDING_FIELDS],
    "seconds": "DOUBLE",          # wall time of this profile's diagnosis in its worker
}


def _finite(value: Any, kind: str) -> int | float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if number != number or number in (float("inf"), float("-inf")):
        return None
    return round(number) if kind == "BIGINT" else number


def report_row(path: str, report: Report, seconds: float) -> dict[str, Any]:
    verdict, profile = report.verdict, report.profile
    metrics = {row.key: row.value for row in report.key_metrics}
    findings = [{"rule": f.rule, "category": f.category, "severity": f.severity.value, "subject": f.subject,
                 "phase": f.phase, "impact": f.impact, "title": f.title} for f in report.findings]
    return {
        "path": shown_path(path), "status": STATUS_OK, "error": None,
        "verdict": verdict.primary or "none", "verdict_rule": verdict.rule, "headline": verdict.headline,
        "primary_cost": verdict.impact, "phase": verdict.phase,
        "stack": profile.stack.name if profile.stack else None, "source_format": profile.source_format,
        "nsys_version": profile.nsys_version,
        "duration_ns": profile.duration_ns,
        **{m.key: _finite(metrics.get(m.key), _metric_type(m)) for m in METRIC_COLUMNS},
        **{f"findings_{s}": sum(1 for f in findings if f["severity"] == s) for s in Severity.names()},
        "findings": findings, "seconds": seconds,
    }


def error_row(path: str, message: str, seconds: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {name: None for name in COLUMNS}
    row.update(path=shown_path(path), status=STATUS_ERROR, error=printable(message), seconds=seconds,
               source_format=source_format_of(Path(path)))
    return row


def source_format_of(path: Path) -> str | None:
    """What a profile that could not be diagnosed is, from its first bytes: 'nsys' (a SQLite database or an
    .nsys-rep report), 'kineto' (JSON in object form, plain or gzipped: a trace, or meant to be one), else None."""
    try:
        if not path.is_file():
            return None
        if is_report(path):
            return "nsys"
        with open(path, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                return "nsys"
        return "kineto" if is_trace(path) else None
    except OSError:
        return None


def is_internal(row: dict[str, Any]) -> bool:
    return row["status"] == STATUS_ERROR and str(row["error"]).startswith(INTERNAL)


# ------------------------------------------------------------------------------------------------------------
# Finding the profiles
# ------------------------------------------------------------------------------------------------------------
@dataclass
class Found:
    profiles: list[Path] = field(default_factory=list)
    skipped: int = 0      # entries of a directory (or glob matches) that are not named like an export
    duplicates: int = 0   # the same file reached twice (a directory and a glob, a symbolic link)


def _has_magic(text: str) -> bool:
    return any(c in text for c in "*?[")


def find_profiles(arguments: Iterable[str]) -> Found:
    """The profiles named by files, directories (their exports and PyTorch-profiler traces, not those of
    subdirectories; reading.ranks.exports_among says which entries are) and glob patterns (expanded here, so quoted
    globs work; `**` descends). An explicit file is always a profile, so a file that is not one becomes an error
    row; a glob or directory with nothing in it is an InputError."""
    found = Found()
    seen: set[str] = set()

    def add(path: Path) -> None:
        key = os.path.realpath(path)
        if key in seen:
            found.duplicates += 1
            return
        seen.add(key)
        found.profiles.append(path)

    for argument in arguments:
        if argument == "":
            raise InputError("a profile argument is empty; give export files, directories of them or glob patterns.")
        given = Path(argument)
        if _has_magic(argument) and not os.path.lexists(given):
            matches = [Path(m) for m in sorted(glob.glob(argument, recursive=True))]
            if not matches:
                raise InputError(f"{argument} matches no file; check the pattern (it is expanded by diagnose batch, "
                                 f"relative to the working directory).")
            entries: list[Path] = []
            for match in matches:
                entries.extend(directory_entries(match) if match.is_dir() else [match])
            kept, skipped = exports_among(entries)
        elif given.is_dir():
            kept, skipped = exports_among(directory_entries(given))
            if not kept:
                raise InputError(f"{given} holds no *.sqlite or *.nsys-rep export and no PyTorch-profiler trace "
                                 f"(*.pt.trace.json.gz ...); give the directory of the profiles (subdirectories are "
                                 f"not searched: use a glob such as '{given / '**' / '*.sqlite'}').")
        else:
            kept, skipped = [given], 0
        found.skipped += skipped
        for path in kept:
            add(path)
    return found


# ------------------------------------------------------------------------------------------------------------
# Shards: one part of the profiles for each job of a CI matrix or Slurm array
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (1-based, as `split -n r/I/N` counts)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        index, slash, count = text.strip().partition("/")
        if not (slash and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
            raise InputError(f"--shard {text!r} is not a shard; give I/N, whole numbers with 1 <= I <= N (shard I "
                             f"of N), e.g. --shard 1/4 ... --shard 4/4.")
        return cls(int(index), int(count))

    def holds(self, path: Path) -> bool:
        return shard_of(path, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(path: Path, count: int) -> int:
    """The shard (1 to `count`) of a profile: a SHA-256 of its path as given (POSIX separators), so every job of a
    matrix, on any machine and under any PYTHONHASHSEED, puts a path in the same shard, whatever other files exist.
    Shards are balanced by chance, not exactly."""
    digest = hashlib.sha256(os.fsencode(Path(path).as_posix())).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


# ------------------------------------------------------------------------------------------------------------
# The workers
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerSettings:
    config: Config
    cache: bool = True
    cache_dir: str | None = None
    threads: int = 1      # DuckDB threads of each worker
    share: int = 1        # workers side by side, splitting DuckDB's memory limit


Work = Callable[[str, WorkerSettings], "dict[str, Any] | None"]


class _WorkerStop:
    """A stop signal (Ctrl-C reaches the whole process group; the parent forwards SIGTERM) interrupts the
    diagnosis in progress, which then removes its temporary files; between diagnoses it is only recorded, so an
    idle worker never dies with a traceback and leaves when the pool shuts down."""

    requested = False
    busy = False
    stopping: Any = None  # the pool's multiprocessing Event: set when the batch stops (seen by late workers too)

    @classmethod
    def handler(cls, signum: int, frame: object) -> None:
        first = not cls.requested
        cls.requested = True
        if first and cls.busy:
            raise KeyboardInterrupt

    @classmethod
    def check(cls, stage: str = "") -> None:
        if cls.requested or (cls.stopping is not None and cls.stopping.is_set()):
            # Recorded as a request: the parent sets the Event and then signals, and that signal must not raise a
            # second KeyboardInterrupt inside the clean-up this one starts (half a scratch directory left behind).
            cls.requested = True
            raise KeyboardInterrupt


_STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """Block the stop signals while worker processes are started: the blocked mask is inherited through fork and
    exec, so Ctrl-C on the terminal (which reaches the whole process group) waits in a starting worker until its
    handler is in place, instead of ending its interpreter start-up with a traceback. Here, they are delivered
    when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _start_worker(pids: SimpleQueue, stopping: Any) -> None:
    _WorkerStop.stopping = stopping
    # The first call of tempfile.gettempdir() probes the directory with a file of a random name that it then removes;
    # made here, while the stop signals are still blocked, so a stop cannot interrupt the probe and leave the file.
    tempfile.gettempdir()
    for sig in _STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _WorkerStop.handler)
    pids.put(os.getpid())
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


_PACK: list[tuple[bytes, Pack]] = []  # this worker process's pack, loaded at its first profile


def _pack_of(config: Config) -> Pack:
    """The pack of `config`, loaded once per worker process rather than once per profile (the parent has already
    refused a broken one: check_config)."""
    key = pickle.dumps(config)
    if not _PACK or _PACK[0][0] != key:
        _PACK[:] = [(key, load_pack(config))]
    return _PACK[0][1]


def diagnose_row(path: str, settings: WorkerSettings,
                 check: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """One profile's row (None when the batch is being stopped). Runs in a worker process. `check(stage)`, called
    at every stage of the diagnosis, raises KeyboardInterrupt to stop it (default: the stop signals and Event of
    the local pool)."""
    check = check or _WorkerStop.check
    start = time.monotonic()
    _WorkerStop.busy = True
    try:
        check("starting")
        report = diagnose(path, progress=check, cache=settings.cache, cache_dir=settings.cache_dir,
                          threads=settings.threads, share=settings.share, pack=_pack_of(settings.config))
        return report_row(path, report, time.monotonic() - start)
    except KeyboardInterrupt:
        return None
    except Exception as exc:  # noqa: BLE001 - every failure of one profile is its row, never the batch's end
        return error_row(path, error_sentence(exc), time.monotonic() - start)
    finally:
        _WorkerStop.busy = False


# ------------------------------------------------------------------------------------------------------------
# The pool
# ------------------------------------------------------------------------------------------------------------
def worker_count(profiles: int, jobs: int | None = None) -> int:
    """Worker processes for `profiles` profiles: `jobs` when given, else one per usable CPU; never more than the
    profiles."""
    return max(1, min(profiles, jobs or usable_cpus()))


def check_config(config: Config) -> None:
    """Refuse a bad --set, diagnose.yaml or team pack (rules, facts, operation classes, headlines) once, before any
    profile is read and before any worker starts, instead of as the same error on every row."""
    load_pack(config)


Done = Callable[[dict[str, Any], int, int], None]


def diagnose_batch(profiles: Sequence[Path], config: Config, *, jobs: int | None = None, cache: bool = True,
                   cache_dir: str | os.PathLike[str] | None = None, on_done: Done | None = None,
                   check_stop: Callable[[], None] | None = None, work: Work = diagnose_row) -> list[dict[str, Any]]:
    """One row per profile, in the order given. `jobs`: worker processes (default: one per usable CPU, never more
    than the profiles). `on_done(row, finished, total)` is called in this process as each profile finishes.
    `check_stop` raises KeyboardInterrupt when the caller wants to stop (a signal DuckDB swallowed); on any
    interruption the workers are stopped, their temporary files removed, and the exception propagates."""
    total = len(profiles)
    if total == 0:
        return []
    workers = worker_count(total, jobs)
    settings = WorkerSettings(config, cache, os.fspath(cache_dir) if cache_dir is not None else None,
                              threads=max(1, usable_cpus() // workers), share=workers)
    directory = usable_cache_dir(cache_dir)[0] if cache else None
    if directory is not None:
        cache_secret(directory)  # create this user's cache key once, before workers race to create it
    rows: dict[int, dict[str, Any]] = {}
    queue = deque(range(total))
    alone: deque[int] = deque()  # in flight when a worker process died: each is tried again in a pool of its own

    def finished(index: int, row: dict[str, Any]) -> None:
        rows[index] = row
        if on_done is not None:
            on_done(row, len(rows), total)

    while queue or alone:
        solo = bool(alone)
        source, size = (alone, 1) if solo else (queue, workers)
        pool = _WorkerPool(size)
        running: dict[Future, int] = {}
        broken = False
        try:
            pool.start()
            while (source and not broken) or running:
                while source and not broken and len(running) < size:
                    try:
                        running[pool.submit(work, str(profiles[source[0]]), settings)] = source[0]
                    except BrokenProcessPool:
                        broken = True
                        break
                    source.popleft()
                done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                if check_stop is not None:
                    check_stop()
                for future in done:
                    index = running.pop(future)
                    try:
                        row = future.result()
                    except BrokenProcessPool:  # a worker died: every profile in flight fails with it
                        broken = True
                        if solo:
                            finished(index, error_row(str(profiles[index]), _WORKER_DIED))
                        else:
                            alone.append(index)
                        continue
                    except Exception as exc:  # noqa: BLE001 - e.g. a row that could not be sent back
                        row = error_row(str(profiles[index]), error_sentence(exc, bug=True))
                    if row is None:  # the worker was asked to stop, though this process was not
                        raise KeyboardInterrupt
                    finished(index, row)
            pool.close()
        except BaseException:
            pool.stop(running)
            raise
    return [rows[i] for i in range(total)]


_WORKER_DIED = (f"{INTERNAL}the worker process diagnosing this profile stopped unexpectedly (killed, out of memory "
                f"or a crash in a library); diagnose the profile alone to see what happens.")


class _WorkerPool:
    """A pool of spawned worker processes that can be stopped promptly: each worker registers its pid, and an
    Event tells a worker that is still starting not to begin a profile."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.executor: ProcessPoolExecutor | None = None

    def start(self) -> None:
        context = get_context("spawn")
        # The resource tracker that multiprocessing starts with the first semaphore, like the workers, starts with
        # the stop signals held: a SIGHUP of the whole process group must not kill it in the middle of the batch.
        with stop_signals_held():
            self.pids: SimpleQueue = context.SimpleQueue()
            self.stopping = context.Event()
            self.executor = ProcessPoolExecutor(max_workers=self.size, mp_context=context,
                                                initializer=_start_worker, initargs=(self.pids, self.stopping))

    def submit(self, work: Work, path: str, settings: WorkerSettings) -> Future:
        assert self.executor is not None
        with stop_signals_held():  # submit starts the worker processes
            return self.executor.submit(work, path, settings)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True)

    def stop(self, running: Iterable[Future]) -> None:
        """Cancel what has not started and ask every worker to stop the diagnosis it is running (each removes its
        own temporary files), then wait for them."""
        if self.executor is None:
            return
        self.stopping.set()
        for future in running:
            future.cancel()
        while not self.pids.empty():
            try:
                os.kill(self.pids.get(), signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        self.executor.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------------------------------------------------
# Writing the table
# ------------------------------------------------------------------------------------------------------------
def table_format(path: Path) -> str | None:
    """parquet, csv or jsonl from the file name; None for any other name."""
    return TABLE_FORMATS.get(path.suffix.lower())


def write_table(rows: Sequence[dict[str, Any]], output: Path, *, mode: int) -> None:
    """Write `rows` to `output` (the format from its extension) atomically: DuckDB writes the file in a private
    temporary directory beside the target (0700: nobody else can read it while it is written), and it is renamed
    onto the target when complete; nothing is left behind. `mode`: the permissions of the finished file."""
    fmt = table_format(output)
    if fmt is None:
        raise InputError(f"{output}: the results file must end in {', '.join(TABLE_FORMATS)}.")
    target = Path(os.path.realpath(output))
    workdir = Path(tempfile.mkdtemp(prefix=f".{shown_path(target.name)[:200]}.", suffix=".tmp", dir=target.parent))
    through: Path | None = None
    try:
        written = workdir / f"results.{fmt}"
        if is_utf8(str(workdir)):
            _copy_rows(rows, written, fmt, output)
        else:  # DuckDB takes file names as UTF-8 text only: it writes through a link to the directory
            through = Path(tempfile.mkdtemp(prefix="nsys-diagnose-results-"))
            (through / "out").symlink_to(workdir, target_is_directory=True)
            _copy_rows(rows, through / "out" / written.name, fmt, output)
        fd = os.open(written, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(written, target)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(output)) from None  # name the results file, not the temporary
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if through is not None:
            shutil.rmtree(through, ignore_errors=True)  # the link only, never what it leads to


_COPY = {
    "parquet": ("SELECT * FROM results", "FORMAT parquet"),
    "csv": ("SELECT * REPLACE (to_json(findings)::VARCHAR AS findings) FROM results", "FORMAT csv, HEADER"),
    "jsonl": ("SELECT * FROM results", "FORMAT json"),  # newline-delimited: one object per line
}


def _copy_rows(rows: Sequence[dict[str, Any]], path: Path, fmt: str, output: Path) -> None:
    """The rows, typed by COLUMNS (from_json reads them with exactly that structure), copied to `path` by DuckDB."""
    query, options = _COPY[fmt]
    con = offline_connection(threads=1)
    try:
        con.execute(f"CREATE TABLE batch AS SELECT unnest(from_json(?::JSON, {sql_literal(json.dumps([COLUMNS]))}), "
                    f"recursive := false) AS r", [json.dumps(_printable(list(rows)), default=str)])
        con.execute("CREATE VIEW results AS SELECT r.* FROM batch")
        con.execute(f"COPY ({query}) TO {sql_literal(str(path))} ({options})")
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        raise OutputError(f"{output}: the results could not be written "
                          f"({' '.join(str(exc).split())[:300]}).") from None
    finally:
        con.close()


def _printable(value: Any) -> Any:
    """`value` with every string valid UTF-8 (text.printable), as DuckDB's JSON reader needs: a file name that is
    not UTF-8 is a row like any other, never a results file that cannot be written."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_printable(v) for v in value]
    return value


def output_mode(output: Path, umask: int) -> int:
    """A replaced results file keeps its mode; a new one gets what the umask gives new files."""
    try:
        st = os.stat(output)
    except OSError:
        return 0o666 & ~umask
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o666 & ~umask


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    errors = [r for r in rows if r["status"] == STATUS_ERROR]
    return {"profiles": len(rows), "ok": len(rows) - len(errors), "errors": len(errors),
            "internal": sum(1 for r in errors if is_internal(r))}


def has_finding_at_least(rows: Iterable[dict[str, Any]], severity: str) -> bool:
    return any(Severity(f["severity"]).at_least(severity) for r in rows for f in r["findings"] or [])

