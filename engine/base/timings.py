"""Where one diagnosis spends its time (`diagnose --timings`): the wall time of each stage and of each fact, the
rows each fact holds, and the DuckDB spill (temporary files) it added, for the run and for each phase.

Spill is sampled: a thread reads DuckDB's `duckdb_temporary_files()` every SPILL_SAMPLE_S while a fact runs
(https://duckdb.org/docs/stable/sql/meta/duckdb_table_functions), and the fact's spill is the most temporary bytes
seen above those present when it began: the facts' tables live in an in-memory database that also spills once it
outgrows the memory limit, so the total would charge every fact with the tables computed before it. Facts that
run side by side (small exports, engine/facts/parallel.py) see each other's spill.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

SPILL_SAMPLE_S = 0.05
RUN = "run"  # the scope of the facts computed over the whole run (or its steady window)
STAGE = "stage"  # the scope of the stages around the facts (reading, judging)


@dataclass
class Timing:
    scope: str  # RUN, STAGE or a phase name
    name: str
    wall_s: float
    rows: int | None = None  # None: a view, or a stage
    spill_bytes: int | None = None  # None: not sampled (a stage)


# eq=False: a watch is one fact's, and Timings.fact removes it by identity. With the dataclass's field-wise ==,
# list.remove took the first watch of equal fields: two facts running side by side that began at the same spill
# (engine/facts/parallel.py) and ended in the opposite order removed each other's, and once the spill grew the
# second removal found no watch equal to its own and raised ValueError (and the first fact's spill went unsampled).
@dataclass(eq=False)
class _Watch:
    start: int | None = None  # temporary bytes when the fact began
    peak: int = 0

    @property
    def added(self) -> int:
        return max(self.peak - (self.start or 0), 0)


@dataclass
class Timings:
    """Collects Timing entries; thread-safe, since facts may run side by side."""

    entries: list[Timing] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """The facts not computed: neither the enabled rules nor the requested formats read them."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _watches: list[_Watch] = field(default_factory=list, repr=False)
    _sampler: threading.Thread | None = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _cursor: Any = field(default=None, repr=False)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        begin = time.perf_counter()
        try:
            yield
        finally:
            self._add(Timing(STAGE, name, time.perf_counter() - begin))

    @contextlib.contextmanager
    def fact(self, con: Any, scope: str, name: str,
             counter: Callable[[], int | None] | None = None) -> Iterator[dict[str, int | None]]:
        """Time one fact computed on `con`; the caller sets out["rows"] when it knows them, else counter() (called
        after the clock stops) counts them. Its spill is read only once `sample` has started."""
        watch = _Watch(start=self._spilled())
        with self._lock:
            self._watches.append(watch)
        out: dict[str, int | None] = {"rows": None}
        begin = time.perf_counter()
        try:
            yield out
        finally:
            wall = time.perf_counter() - begin
            if out["rows"] is None and counter is not None:
                out["rows"] = counter()
            self._sample()
            with self._lock:
                self._watches.remove(watch)
            self._add(Timing(scope, name, wall, out["rows"], watch.added if watch.start is not None else None))

    def close(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
            self._sampler = None
        if self._cursor is not None:
            with contextlib.suppress(Exception):
                self._cursor.close()
            self._cursor = None

    def _add(self, timing: Timing) -> None:
        with self._lock:
            self.entries.append(timing)

    def sample(self, con: Any) -> None:
        """Start sampling the spill on a cursor of `con`, the connection the facts' cursors come from: a cursor of
        one of those would be closed with it (DuckDB closes a connection's cursors with it), and the spill of the
        facts after it would not be read."""
        with self._lock:
            if self._sampler is not None or self._stop.is_set():
                return
            try:
                self._cursor = con.cursor()
            except Exception:  # a connection that gives no cursor: no spill column
                return
            self._sampler = threading.Thread(target=self._sample_loop, name="timings-spill", daemon=True)
            self._sampler.start()

    def _sample_loop(self) -> None:
        while not self._stop.wait(SPILL_SAMPLE_S):
            self._sample()

    def _spilled(self) -> int | None:
        """DuckDB's temporary bytes now, or None when they cannot be read."""
        cursor = self._cursor
        if cursor is None:
            return None
        try:
            with self._lock:  # one query at a time on the sampler's cursor
                return int(cursor.execute("SELECT coalesce(sum(size), 0) FROM duckdb_temporary_files()").fetchone()[0])
        except Exception:  # the connection closed under us: the run is over
            return None

    def _sample(self) -> None:
        spilled = self._spilled()
        if spilled is None:
            return
        with self._lock:
            for watch in self._watches:
                watch.peak = max(watch.peak, spilled)


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def render_timings(timings: Timings, total_s: float | None = None, limit: int | None = None) -> str:
    """A plain-text table: the stages in order, then the facts of the run and of each phase, slowest first
    (`limit`: that many per scope), each scope with its sum."""
    lines = [f"{'scope':<10} {'fact or stage':<28} {'wall s':>8} {'share':>6} {'rows':>11} {'spill':>9}"]
    whole = total_s if total_s else sum(t.wall_s for t in timings.entries if t.scope == STAGE) or None

    def line(t: Timing) -> str:
        share = f"{t.wall_s / whole * 100:5.1f}%" if whole else ""
        rows = "-" if t.rows is None else f"{t.rows:,}"
        return f"{t.scope:<10} {t.name:<28} {t.wall_s:8.3f} {share:>6} {rows:>11} {_size(t.spill_bytes):>9}"

    for t in timings.entries:
        if t.scope == STAGE:
            lines.append(line(t))
    scopes = list(dict.fromkeys(t.scope for t in timings.entries if t.scope != STAGE))
    for scope in scopes:
        mine = sorted((t for t in timings.entries if t.scope == scope), key=lambda t: -t.wall_s)
        shown = mine[:limit] if limit else mine
        lines += [line(t) for t in shown]
        rest = len(mine) - len(shown)
        summed = sum(t.wall_s for t in mine)
        lines.append(f"{scope:<10} {f'sum of {len(mine)} facts' + (f' ({rest} not shown)' if rest else ''):<28} "
                     f"{summed:8.3f} {(f'{summed / whole * 100:5.1f}%' if whole else ''):>6}")
    if total_s is not None:
        lines.append(f"{'total':<10} {'':<28} {total_s:8.3f}")
    if timings.skipped:
        lines.append(f"skipped (not needed by the rules or the requested formats): {', '.join(timings.skipped)}")
    return "\n".join(lines)


@contextlib.contextmanager
def timed(timings: Timings | None, con: Any, scope: str, fact: Any) -> Iterator[dict[str, int | None]]:
    """timings.fact() for a fact (anything with name, is_helper and materialized), or nothing when `timings` is
    None. A fact created as a table whose rows the caller did not set is counted; a view has no rows of its own."""
    if timings is None:
        yield {"rows": None}
        return

    def count() -> int | None:
        if fact.is_helper and not fact.materialized:
            return None
        try:
            return int(con.execute(f'SELECT count(*) FROM "{fact.name}"').fetchone()[0])
        except Exception:  # the fact failed: its error is what the user sees
            return None

    with timings.fact(con, scope, fact.name, count) as out:
        yield out
