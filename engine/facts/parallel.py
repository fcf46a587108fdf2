"""Facts that do not need each other run side by side, each on a DuckDB cursor of its own.

Most fact queries are small: on a short capture their cost is planning and fetching, done on one core, and on a
long one many of them (quantiles, window frames, final aggregations) keep only one core busy for part of the
time. Two queries at once keep both cores of a small machine busy. The facts' DuckDB instance, its memory
limit and its settings are shared; each worker thread has its own connection (a cursor), as DuckDB's Python
client requires (https://duckdb.org/docs/stable/guides/python/multiple_threads).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from .catalog import Fact

T = TypeVar("T")

# Two queries at once fill two cores; more only adds contention for the memory limit the queries share.
MAX_SIDE_BY_SIDE = 2
# From about this many GPU operations on, each big query keeps every core busy on its own, and two at once only
# compete for the cores and the memory limit (measured with tools/benchmark.py exports on 2 cores: the facts of
# 50,000 kernels take 0.49 s instead of 0.80 s side by side, those of 2,000,000 take 9.1 s instead of 8.6 s).
SIDE_BY_SIDE_MAX_OPERATIONS = 500_000


def side_by_side(threads: int | None, operations: int) -> int:
    """How many facts to run at once for a DuckDB instance of `threads` threads (None: every CPU) over an export
    of `operations` GPU operations."""
    if operations >= SIDE_BY_SIDE_MAX_OPERATIONS:
        return 1
    return max(1, min(MAX_SIDE_BY_SIDE, threads or os.cpu_count() or 1))


def run_facts(con: Any, ordered: list[Fact], work: Callable[[Any, Fact], T], *, workers: int,
              setup: Iterable[str] = (), started: Callable[[Fact], None] | None = None) -> dict[str, T]:
    """work(cursor, fact) for each fact of `ordered` (in dependency order), a fact starting once the facts of
    `ordered` it needs are done, at most `workers` at once; returns each fact's result by name. `setup`:
    statements each new cursor runs first (session settings such as the search path). The first failure, or
    Ctrl-C, interrupts the queries still running and is raised once they have stopped."""
    if workers <= 1 or len(ordered) <= 1:
        for statement in setup:
            con.execute(statement)
        serial: dict[str, T] = {}
        for fact in ordered:
            if started:
                started(fact)
            serial[fact.name] = work(con, fact)
        return serial
    names = {f.name for f in ordered}
    needs = {f.name: {d for d in f.needs if d in names} for f in ordered}
    local = threading.local()
    cursors: list[Any] = []
    lock = threading.Lock()
    setup = list(setup)

    def cursor() -> Any:
        cur = getattr(local, "cursor", None)
        if cur is None:
            cur = con.cursor()
            with lock:
                cursors.append(cur)
            for statement in setup:
                cur.execute(statement)
            local.cursor = cur
        return cur

    stopping = threading.Event()

    def run(fact: Fact) -> T:
        if stopping.is_set():
            raise KeyboardInterrupt
        return work(cursor(), fact)

    out: dict[str, T] = {}
    waiting = list(ordered)
    running: dict[Future[T], Fact] = {}
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fact")
    try:
        while waiting or running:
            # Queue no more than there are workers, so the next free worker takes the earliest ready fact.
            for fact in [f for f in waiting if needs[f.name] <= out.keys()][: workers - len(running)]:
                waiting.remove(fact)
                if started:
                    started(fact)
                running[pool.submit(run, fact)] = fact
            if not running:
                raise RuntimeError(f"facts wait for each other: {', '.join(f.name for f in waiting)}")
            # Waking now and then lets a signal handler run (Ctrl-C, SIGTERM) whichever thread the signal reached.
            done, _ = wait(running, timeout=0.1, return_when=FIRST_COMPLETED)
            for future in done:
                fact = running.pop(future)
                out[fact.name] = future.result()
        return out
    except BaseException:
        # A query that began just after an interrupt would run on: interrupt until every worker has stopped.
        stopping.set()
        unfinished = set(running)
        while unfinished:
            with lock:
                for cur in cursors:
                    cur.interrupt()
            unfinished = wait(unfinished, timeout=0.05).not_done
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for cur in cursors:
            cur.close()
