"""Read a PyTorch-profiler (Kineto) trace into the canonical tables, as loader.py reads an nsys export.

The events (split from the trace into parts by kineto_file.split_trace) are read by DuckDB, the parts side by side,
into one TEMP table, `_raw_events` (seen through the view `_events`, which adds the time in ns), with the few `args`
fields the canonical tables need, already typed; kineto_adapters.py then fills every canonical
table from it through the same Loader machinery (time checks, GPU placement, name tables) an nsys export goes
through. Timestamps are microseconds with three decimals (pytorch/kineto, output_json.cpp): each becomes an exact
integer of nanoseconds on the trace's own time base (relative to its baseTimeNanoseconds since PyTorch 2.4, Unix
epoch microseconds before that; both far below 2**53 ns).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import duckdb

from . import kineto_adapters as kadapt
from .adapter_base import Adapter, Source
from .kineto_file import KINETO_CATEGORIES, KINETO_KEYS, SplitTrace
from .loader import TIME_LIMIT_NS, Loader, ViewStatus
from .metadata import ProfileInfo
from ..base.duck import insert_rows, one_row, reraise_interrupt, scalar, sql_literal
from ..base.errors import InputError
from ..pack.apinames import bundled_api_names

SOURCE_FORMAT = "kineto"

# Old capitalised category names (Kineto before 2022) and their current spelling.
_CATEGORY_ALIASES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime",
                     "Operator": "cpu_op"}
# The categories a canonical table is filled from; every other event is left out when the trace is read.
_READ_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cuda_sync",
                    "user_annotation", "cpu_op")
_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver")
_ARG_FIELDS = ("correlation", "device", "context", "stream", "registers per thread", "grid", "block", "bytes",
               "graph id", "graph node id", "name")


class CutInsideEvents(InputError):
    """A trace split into parts (kineto_file.split_trace) whose parts DuckDB could not read: a cut was not between
    two events after all; the trace is read again as one part."""


def _events_sql(parts: list[Path]) -> str:
    """One row per complete event (`ph` X) of a read category, plus the `process_name` metadata; `args` fields
    that hold the wrong JSON type (a string grid on a Triton launch op) read as NULL rather than failing."""
    args = ", ".join(f'"{f}" JSON' for f in _ARG_FIELDS)
    columns = (f"{{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'JSON', tid: 'JSON', ts: 'DOUBLE', "
               f"dur: 'DOUBLE', args: 'STRUCT({args})'}}")
    category = "CASE " + " ".join(f"WHEN cat = '{old}' THEN '{new}'" for old, new in _CATEGORY_ALIASES.items()) \
               + " ELSE cat END"
    read = ", ".join(f"'{c}'" for c in _READ_CATEGORIES)
    return f"""
    SELECT ph, cat, name, try_cast(pid AS BIGINT) AS pid_n, try_cast(tid AS BIGINT) AS tid_n,
           ts AS ts_us, try_cast(round(dur * 1000) AS BIGINT) AS dur_ns,
           try_cast(args."correlation" AS BIGINT) AS correlation, try_cast(args."device" AS BIGINT) AS device,
           try_cast(args."context" AS BIGINT) AS context, try_cast(args."stream" AS BIGINT) AS stream,
           try_cast(args."registers per thread" AS BIGINT) AS registers,
           CAST(list_aggregate(try_cast(args."grid" AS BIGINT[]), 'product') AS BIGINT) AS grid,
           CAST(list_aggregate(try_cast(args."block" AS BIGINT[]), 'product') AS BIGINT) AS block,
           try_cast(args."bytes" AS BIGINT) AS bytes, try_cast(args."graph id" AS BIGINT) AS graph_id,
           try_cast(args."graph node id" AS BIGINT) AS graph_node, args."name" ->> '$' AS arg_name
    FROM (SELECT ph, {category} AS cat, name, pid, tid, ts, dur, args
          FROM read_json([{", ".join(sql_literal(str(p)) for p in parts)}], format = 'array', columns = {columns}))
    WHERE (ph = 'X' AND cat IN ({read})) OR (ph = 'M' AND name = 'process_name')"""


def short_kernel_name(name: str) -> str:
    """The bare function name of a demangled kernel signature, as nsys's shortName has it:
    `void at::native::vectorized_elementwise_kernel<4, ...>(int, T2, T3)` -> `vectorized_elementwise_kernel`."""
    text = name.replace("<unnamed>", "(anonymous)").replace("(anonymous namespace)", "(anonymous)")
    text = text.replace("(anonymous)", "anonymous")
    depth = 0
    cut = len(text)
    for i, ch in enumerate(text):  # the parameter list: the first `(` outside template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    head = text[:cut]
    bare, depth = [], 0
    for ch in head:  # without template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            bare.append(ch)
    words = "".join(bare).split()
    last = words[-1] if words else name
    return last.rsplit("::", 1)[-1] or name


class KinetoLoader(Loader):
    """Loader for the events of a Kineto trace; `split`: what kineto_file.split_trace made of it."""

    adapters: dict[str, Callable[[Source], list[Adapter]]] = kadapt.ADAPTERS

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, split: SplitTrace,
                 progress: Callable[[str], None] | None):
        super().__init__(con, path, "", {}, progress)
        self.split = split
        self.info = ProfileInfo(path=self.info.path, source_format=SOURCE_FORMAT)

    def build(self) -> tuple[ProfileInfo, dict[str, ViewStatus]]:
        self._read_events()
        self._describe()
        try:
            info, views = super().build()
        finally:
            self.con.execute("DROP VIEW IF EXISTS _events")
            for table in ("_raw_events", "_launchers", "_host", "_short_names", "_device_properties"):
                self.con.execute(f'DROP TABLE IF EXISTS "{table}"')
        return info, views

    def _read_events(self) -> None:
        parts = self.split.parts
        if not parts:
            raise InputError(f"{self.path} is JSON but has no traceEvents list, so it is no Chrome trace of the "
                             f"PyTorch profiler; give the .pt.trace.json(.gz) file the profiler wrote.")
        self.progress(f"reading the trace's events ({self.split.event_bytes / 1e6:,.0f} MB)")
        try:
            self.con.execute(f"CREATE TEMP TABLE _raw_events AS {_events_sql(parts)}")
        except duckdb.Error as exc:
            reraise_interrupt(exc)
            if not isinstance(exc, (duckdb.InvalidInputException, duckdb.ConversionException)):
                raise  # memory, disk: said by inputs.unreadable
            if len(parts) > 1:
                raise CutInsideEvents(str(exc)) from None
            text = str(exc)
            if "utf" in text.lower() or "unicode" in text.lower():
                raise InputError(f"{self.path} holds text that is not valid UTF-8 among its events, so it is not "
                                 f"JSON as the PyTorch profiler writes it; export the trace again.") from None
            found = re.search(r"record/value (\d+): (.*)", text)
            where = (found.group(2).strip().rstrip(".") if found
                     else (text.splitlines() or [type(exc).__name__])[0].replace(str(parts[0]), "its events"))
            raise InputError(f"{self.path} is not a well-formed Chrome trace: its traceEvents cannot be read as "
                             f"JSON ({where[:200]}); export the trace again.") from None
        finally:
            self.split.remove()
        self._check_kineto()
        origin = self._time_origin_us()
        self.con.execute(f"CREATE TEMP VIEW _events AS SELECT *, try_cast(round((ts_us - {origin}) * 1000) AS BIGINT) "
                         f"AS ts_ns FROM _raw_events")
        # The launching call of every GPU activity: its process, and whether it replays a CUDA graph (a call of the
        # graph_launch family of rules/vocabulary/api_names.yaml, whose names are globs).
        graph_launch = " OR ".join(f"name GLOB {sql_literal(glob)}"
                                   for glob in bundled_api_names().names("graph_launch")) or "false"
        self.con.execute(f"""CREATE TEMP TABLE _launchers AS
            SELECT correlation, any_value(pid_n) AS pid, bool_or({graph_launch}) AS graph_launch
            FROM _events WHERE cat IN ('cuda_runtime', 'cuda_driver') AND correlation IS NOT NULL
            GROUP BY correlation""")
        self.con.execute("""CREATE TEMP TABLE _host AS
            SELECT coalesce((SELECT mode(pid_n) FROM _events WHERE cat IN ('cuda_runtime', 'cuda_driver')),
                            (SELECT mode(pid_n) FROM _events WHERE cat IN ('cpu_op', 'user_annotation'))) AS pid""")

    def _time_origin_us(self) -> int:
        """0 for the trace's own time base, which since PyTorch 2.4 counts from its baseTimeNanoseconds; older
        traces count whole microseconds of the Unix epoch, 1.7e18 ns, beyond the 2**53 ns a time may reach
        (loader.TIME_LIMIT_NS) and a DOUBLE holds exactly: their times count from the first whole microsecond of
        the trace instead (the subtraction is exact on whole microseconds)."""
        last = scalar(self.con, "SELECT max(ts_us) FROM _raw_events WHERE isfinite(ts_us)")
        if last is None or last * 1000 < TIME_LIMIT_NS:
            return 0
        first = scalar(self.con, "SELECT floor(min(ts_us)) FROM _raw_events WHERE isfinite(ts_us) AND ts_us >= 0")
        return int(first)

    def _check_kineto(self) -> None:
        """A Chrome trace another tool wrote (no Kineto category, no Kineto key), or one without GPU activity,
        is refused in one sentence."""
        seen = {c for (c,) in self.con.execute("SELECT DISTINCT cat FROM _raw_events WHERE cat IS NOT NULL").fetchall()}
        header = self.split.header
        if not seen & KINETO_CATEGORIES and not any(k in header for k in KINETO_KEYS):
            raise InputError(f"{self.path} is a Chrome trace, but not one the PyTorch profiler wrote: none of its "
                             f"events has a Kineto category (kernel, cuda_runtime, cpu_op ...); give a "
                             f".pt.trace.json(.gz) from torch.profiler, vLLM or SGLang, or an nsys export.")
        if not seen:
            raise InputError(f"{self.path} holds no events (its traceEvents list is empty): the profiler recorded "
                             f"nothing, or was stopped before the work it was to trace; profile the work again.")
        if not seen & set(_GPU_CATEGORIES):
            raise InputError(f"{self.path} holds no GPU activity (no kernel, copy or CUDA API event): either it is "
                             f"the trace of a process that runs no GPU work (vLLM and SGLang write one for their API "
                             f"server beside the workers' traces: diagnose those), or the profiler ran without CUDA "
                             f"activities (profile with torch.profiler.profile(activities=[ProfilerActivity.CPU, "
                             f"ProfilerActivity.CUDA])).")
        calls, ids = one_row(self.con, "SELECT count(*), count(DISTINCT correlation) FROM _raw_events "
                                       "WHERE cat IN ('cuda_runtime', 'cuda_driver') AND correlation IS NOT NULL")
        if calls > 100 and calls > 1.5 * ids:
            # CUPTI gives every CUDA call of a process its own correlation id; a trace that repeats them cannot
            # say which call launched which kernel, and matching them would pair every call with every kernel.
            raise InputError(f"{self.path} gives {calls:,} CUDA calls only {ids:,} correlation ids, so it cannot say "
                             f"which call launched which GPU operation; the trace was altered or merged from "
                             f"several processes: give each process's own trace.")

    def _describe(self) -> None:
        header = self.split.header
        self.info.schema_version = _text(header.get("schemaVersion"))
        self.info.producer = "PyTorch profiler"
        dist = header.get("distributedInfo")
        if isinstance(dist, dict):
            self.info.rank = _int(dist.get("rank"))
            self.info.world_size = _int(dist.get("world_size"))
        rows: list[tuple | list] = []
        for prop in header.get("deviceProperties") or []:
            if not isinstance(prop, dict) or _int(prop.get("id")) is None:
                continue
            major, minor = _int(prop.get("computeMajor")), _int(prop.get("computeMinor"))
            rows.append((_int(prop.get("id")), _text(prop.get("name")) or None, _int(prop.get("numSms")),
                         _int(prop.get("totalGlobalMem")),
                         f"{major}.{minor}" if major is not None and minor is not None else None))
        self.con.execute("CREATE TEMP TABLE _device_properties (device_id INTEGER, name VARCHAR, sm_count INTEGER, "
                         "total_memory BIGINT, compute_capability VARCHAR)")
        if rows:
            insert_rows(self.con, "_device_properties", rows)

    def _strings(self) -> None:
        """The names the stored tables keep once: kernel names and their short forms, and API names."""
        self.con.execute("CREATE TEMP TABLE _short_names (name VARCHAR, short_name VARCHAR)")
        names = [n for (n,) in self.con.execute(
            "SELECT DISTINCT name FROM _events WHERE cat = 'kernel' AND name IS NOT NULL").fetchall()]
        if names:
            insert_rows(self.con, "_short_names", [(n, short_kernel_name(n)) for n in names])
        self.con.execute("""CREATE TEMP TABLE _strings AS
            SELECT CAST(row_number() OVER (ORDER BY value) AS BIGINT) AS id, value,
                   regexp_replace(value, '_v[0-9]+$', '') AS api_name
            FROM (SELECT name AS value FROM _events WHERE cat IN ('kernel', 'cuda_runtime', 'cuda_driver')
                  UNION SELECT short_name FROM _short_names) WHERE value IS NOT NULL""")

    def _empty_reason(self, table: str, adapters: list[Adapter]) -> str:
        return kadapt.MISSING_REASON[table]


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)

