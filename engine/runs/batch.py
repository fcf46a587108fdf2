"""Diagnose a fleet of independent profiles in parallel and write one row per profile to a table file.

    rows = diagnose_batch(find_profiles(["nightly/", "runs/**/*.sqlite"]).profiles, config, jobs=4)
    write_table(rows, Path("results.parquet"), mode=0o644)     # or .csv, .jsonl

Each profile is diagnosed exactly as `diagnose(path, config)` would, in a process of its own pool: DuckDB is not
fork-safe once used, so the workers are spawned, and each gets an equal share of the CPUs and of DuckDB's memory
limit. A profile that cannot be diagnosed is a row with the one-sentence error `diagnose` would print, never the
end of the batch; a bug (an unexpected exception, or a worker process that died) is a row whose error starts with
"internal error:". The table's columns are the same for every row (nulls where absent), so the files of several
shards can be concatenated. Finding the profiles and sharding them is engine/runs/batch_profiles.py; the table's
columns, its rows and writing it, engine/runs/batch_table.py.
"""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.queues import SimpleQueue
from pathlib import Path
from typing import Any


from .api import Pack, diagnose, load_pack
from ..diagnosis.config import Config
from ..base.duck import usable_cpus
from ..base.errors import INTERNAL, error_sentence
from ..reading.cache import cache_secret, usable_cache_dir
from .batch_table import error_row, report_row


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


