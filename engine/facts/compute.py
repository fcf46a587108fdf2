"""Run the fact SQL files over an opened export and collect their rows."""

from __future__ import annotations

import csv
import datetime
import decimal
import math
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Callable


from ..pack.layout import bundled, FACTS_DIR
from ..base.duck import insert_rows, scalar, sql_literal
from .catalog import Fact, FactError, run_order, with_needs
from .materialize import check_documented_columns, materialize, table_columns
from .loading import load_facts
from .team_sql import team_sql_problem
from ..reading.canonical import VIEWS
from ..reading.export import Export
from .compact import Compactor
from ..pack.opclasses import OperationClasses, define_op_classes
from ..pack.stacks import Stacks, bundled_stacks, define_stacks
from .nvtx_patterns import default_phase_patterns, default_startup_patterns, default_step_patterns
from ..pack.apinames import ApiNames, define_api_names
from .parallel import run_facts, side_by_side
from .scopes import bundled_from_run, compute_phase, per_phase_order, phases_to_judge
from .window import steady_start, steady_window
from ..base.timings import RUN, Timings, timed

@dataclass(frozen=True)
class TeamLimits:
    """Bounds on what one team fact may cost: team rule packs are semi-trusted (docs/security.md)."""

    seconds: float = 60.0      # wall time to compute the fact
    rows: int = 10_000         # rows it may return (rules and reports read every row)
    text_bytes: int = 65_536   # longest text value in those rows
    spill: str = "4GB"         # DuckDB spill space for team facts (the memory limit applies as for every fact)


TEAM_LIMITS = TeamLimits()


def _materialize_bounded(con: Any, fact: Fact, params: dict[str, float] | None, limits: TeamLimits, *,
                         readable: Collection[str], keep_lines: bool = False, check_columns: bool = True) -> None:
    """materialize() a team fact, stopped when it runs past `limits.seconds`, runs out of memory, or returns
    more rows or longer text than the limits allow; each is one sentence naming the fact. Before it runs, the
    sandbox refuses a query that reads anything but the canonical views and the facts `readable` (names), or
    calls a function that reads the database's state (team_sql_problem)."""
    problem = team_sql_problem(fact, readable)
    if problem is not None:
        raise FactError(problem, fact.name)
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        con.interrupt()

    timer = threading.Timer(limits.seconds, stop)
    timer.daemon = True
    timer.start()
    try:
        materialize(con, fact, params, keep_lines=keep_lines, check_columns=check_columns)
    except KeyboardInterrupt:
        if not timed_out.is_set():
            raise
        raise FactError(f"{fact.path}: team fact {fact.name!r} ran longer than {limits.seconds:g} s, the limit for "
                        f"team SQL; make the query cheaper (no unbounded recursion, aggregate before joining)",
                        fact.name) from None
    except FactError as exc:
        if "ran out of memory" in str(exc):
            raise FactError(f"{fact.path}: team fact {fact.name!r} ran out of memory (DuckDB's memory limit); make "
                            f"the query cheaper (no unbounded recursion, aggregate before joining)",
                            fact.name) from None
        raise
    finally:
        timer.cancel()
    if fact.is_helper and not fact.materialized:
        return
    rows = con.execute(f'SELECT count(*) FROM "{fact.name}"').fetchone()[0]
    if rows > limits.rows:
        raise FactError(f"{fact.path}: team fact {fact.name!r} returns {rows:,} rows, more than the {limits.rows:,} "
                        f"a team fact may return; aggregate it (one row per device, stream, kernel name ...)",
                        fact.name)
    texts = [(c, kind) for c, kind in table_columns(con, fact.name) if kind in ("VARCHAR", "BLOB", "JSON")]
    if texts:
        sizes = [f'max(octet_length("{c}"))' if kind == "BLOB" else f'max(strlen(CAST("{c}" AS VARCHAR)))'
                 for c, kind in texts]
        longest = con.execute(f'SELECT greatest({", ".join(sizes)}, 0) FROM "{fact.name}"').fetchone()[0] or 0
        if longest > limits.text_bytes:
            raise FactError(f"{fact.path}: team fact {fact.name!r} returns a text value of {longest:,} bytes, more "
                            f"than the {limits.text_bytes:,} a team fact may return", fact.name)


@dataclass
class FactResult:
    fact: Fact
    columns: list[str]
    rows: list[dict[str, Any]]
    skipped: str | None = None  # why rules on this fact cannot judge anything

    @property
    def name(self) -> str:
        return self.fact.name


@dataclass
class FactSet:
    results: dict[str, FactResult] = field(default_factory=dict)
    phases: dict[str, "FactSet"] = field(default_factory=dict)
    """The per-phase facts computed again over each inference phase (engine/facts/scopes.py), by phase name;
    empty when the run is judged whole."""
    stacks: Stacks | None = None
    """The software stacks the software_stack fact detected (engine/pack/stacks.py); None: the bundled ones."""

    def __getitem__(self, name: str) -> FactResult:
        return self.results[name]

    def rows(self, name: str) -> list[dict[str, Any]]:
        return self.results[name].rows

    def first(self, name: str) -> dict[str, Any]:
        rows = self.results[name].rows
        return rows[0] if rows else {}


def _blob_text(data: bytes) -> str:
    """A BLOB as DuckDB prints it: printable ASCII as is, every other byte as \\xNN."""
    return "".join(chr(c) if 32 <= c < 127 and c != 92 else f"\\x{c:02X}" for c in data)


def _clean(value: Any) -> Any:
    """A fact value as plain JSON-able data: a team fact may return any DuckDB type (BLOB, DECIMAL, dates,
    intervals, UUIDs, lists, structs), and reports, rules and JSON need numbers, text and None."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _blob_text(bytes(value))
    if isinstance(value, decimal.Decimal):
        return _clean(float(value))
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):
        try:
            return _clean(value.item())
        except (AttributeError, ValueError, TypeError):
            pass
    return str(value)


def _define_phases(con: Any, phase_patterns: dict[str, str] | None,
                   startup_patterns: dict[str, str] | None = None,
                   step_patterns: dict[str, str] | None = None,
                   op_classes: OperationClasses | None = None, stacks: Stacks | None = None,
                   api_names: ApiNames | None = None) -> None:
    stacks = stacks or bundled_stacks()
    patterns = phase_patterns if phase_patterns is not None else default_phase_patterns(stacks)
    con.execute("CREATE OR REPLACE TABLE _phase_patterns (phase VARCHAR, pattern VARCHAR, priority INTEGER)")
    insert_rows(con, "_phase_patterns", [(phase, pattern, i) for i, (phase, pattern) in enumerate(patterns.items())])
    # phase_of(text): the first configured phase whose pattern matches. Patterns are written into the macro
    # as constants so DuckDB compiles each regular expression once, not once per NVTX range.
    _define_classifier(con, "phase_of", patterns)
    # startup_of(text): load, warmup (or NULL), the same way.
    _define_classifier(con, "startup_of", startup_patterns if startup_patterns is not None
                       else default_startup_patterns(stacks))
    # step_of(text): the name of the first step pattern that matches (or NULL), the same way.
    _define_classifier(con, "step_of", step_patterns if step_patterns is not None else default_step_patterns(stacks))
    # op_class_of(name), gemm_precision_of(name): the operation classes (rules/vocabulary/operation_classes.yaml).
    define_op_classes(con, op_classes)
    # stack_of_kernel/nvtx/process(name) and _stacks: the software stacks (rules/vocabulary/stacks.yaml).
    define_stacks(con, stacks)
    # _api_name_patterns: the CUDA API families (rules/vocabulary/api_names.yaml), read by _api_classes.sql alone.
    define_api_names(con, api_names)


def _define_classifier(con: Any, macro: str, patterns: dict[str, str]) -> None:
    cases = " ".join(f"WHEN regexp_matches(t, {sql_literal(pattern)}) THEN {sql_literal(name)}"
                     for name, pattern in patterns.items())
    con.execute(f"CREATE OR REPLACE MACRO {macro}(t) AS {'CASE ' + cases + ' END' if cases else 'NULL'}")


METRIC_NAMES_FILE = "gpu_metric_names.csv"


def metric_names() -> list[dict[str, str]]:
    """The GPU-metric name table (rules/facts/gpu_metric_names.csv): every metric name nsys is known to write,
    with its canonical metric, unit, nsys versions, chips and where the name was seen."""
    text = bundled(FACTS_DIR, METRIC_NAMES_FILE).read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if line and not line.startswith("#")))


def _define_metric_names(con: Any) -> None:
    """Table _metric_names(name_key, canonical, unit): the name table, keyed on the lower-cased name."""
    rows = sorted({(r["name"].strip().lower(), r["canonical"], r["unit"]) for r in metric_names()})
    # One statement: executemany() would run one INSERT per name, a third of a second for the whole table.
    values = ", ".join(f"({', '.join(sql_literal(v) for v in row)})" for row in rows)
    con.execute("CREATE OR REPLACE TABLE _metric_names AS SELECT * FROM (VALUES " + values + ") "
                "t(name_key, canonical, unit)")


def _in_run_order(facts: dict[str, Fact]) -> list[Fact]:
    """Bundled facts first, then team facts (which may read them)."""
    order = run_order(facts)
    return [f for f in order if not f.team] + [f for f in order if f.team]


def _lock_for_team_facts(con: Any, limits: TeamLimits) -> None:
    """The connection already reads nothing but the canonical database: external access is off and the SQLite
    extension was never loaded in its DuckDB instance (engine/reading/cache.py). Before team SQL runs, its spill space
    is
    bounded and the configuration locked, so the SQL cannot change either."""
    con.execute(f"SET max_temp_directory_size = {sql_literal(limits.spill)}")
    con.execute("SET lock_configuration = true")


def compute_facts(export: Export, *, params: dict[str, float] | None = None,
                  phase_patterns: dict[str, str] | None = None, extra_fact_dirs: list | None = None,
                  facts: dict[str, Fact] | None = None,
                  progress: Callable[[str], None] | None = None, helpers: Collection[str] = (),
                  startup_patterns: dict[str, str] | None = None,
                  step_patterns: dict[str, str] | None = None,
                  op_classes: OperationClasses | None = None, timings: Timings | None = None,
                  stacks: Stacks | None = None, api_names: ApiNames | None = None) -> FactSet:
    """Compute `facts` (default: the bundled ones and those of `extra_fact_dirs`) over the export. The result
    holds the rows of every fact that is not a helper, and of the helpers named in `helpers`. The facts marked
    `-- @whole-capture` (the start-up) run first over the whole capture; when a start-up is followed by steady
    work, every other fact runs over the steady window after it (engine/facts/window.py). `op_classes`: the
    operation classes (engine/pack/opclasses.py); None: the bundled ones. `stacks`: the software stacks
    (engine/pack/stacks.py), kept on the result for detect_stack; None: the bundled ones. `api_names`: the CUDA API
    families that define a launch and a sync (engine/pack/apinames.py); None: the bundled ones. `timings`: record each
    fact's wall time, rows and spill there (engine/base/timings.py)."""
    facts = facts if facts is not None else load_facts(extra_fact_dirs)
    con = export.con
    if timings is not None:
        timings.sample(con)
    stacks = stacks or bundled_stacks()
    _define_phases(con, phase_patterns, startup_patterns, step_patterns, op_classes, stacks, api_names)
    _define_metric_names(con)
    compact = Compactor(con)
    out = FactSet(stacks=stacks)
    ops = sum(export.count(v) for v in ("kernels", "graph_launches", "memcpys", "memsets") if v in export.views)
    ordered = _in_run_order(facts)
    bundled = [f for f in ordered if not f.team]
    team = [f for f in ordered if f.team]
    unmet: dict[str, str | None] = {}  # requirement -> why it does not hold; several facts share one

    def announce(fact: Fact) -> None:
        if progress:
            progress(f"computing fact {ordered.index(fact) + 1}/{len(ordered)} {fact.name} over {ops:,} GPU operations")

    def compute(cursor: Any, fact: Fact) -> tuple[list[str], list[dict[str, Any]]] | None:
        with timed(timings, cursor, RUN, fact) as timing:
            materialize(cursor, fact, params, check_columns=False)  # checked below on the rows' columns
            if workers == 1:  # side by side, another fact may be writing: its table is compacted after it
                compact(cursor)
            if fact.is_helper and fact.name not in helpers:
                return None
            found = _rows(cursor, fact)
            timing["rows"] = len(found[1])
            return found

    def record(fact: Fact, found: tuple[list[str], list[dict[str, Any]]] | None) -> None:
        if found is None:
            return
        columns, rows = found
        if not fact.is_helper:
            check_documented_columns(fact, columns)
        skipped = None
        for requirement in fact.requires:
            if requirement not in unmet:
                unmet[requirement] = _unmet(export, requirement)
            skipped = unmet[requirement]
            if skipped:
                break
        out.results[fact.name] = FactResult(fact, columns, rows, skipped)

    workers = side_by_side(scalar(con, "SELECT current_setting('threads')"), ops)
    whole = _whole_capture(facts)
    first = [f for f in bundled if f.name in whole]
    computed = run_facts(con, first, compute, workers=workers, started=announce)
    for fact in first:
        record(fact, computed[fact.name])
    since = steady_start(out.rows("startup")) if "startup" in out.results else None
    with steady_window(con, since):
        rest = [f for f in bundled if f.name not in whole]
        computed = run_facts(con, rest, compute, workers=workers, started=announce)
        for fact in rest:
            record(fact, computed[fact.name])
        # Before the team facts: they run with the configuration locked, and a phase sets the search path.
        _compute_phases(con, facts, out, params, progress, workers, since, timings, compact)
        if team:
            _lock_for_team_facts(con, TEAM_LIMITS)
        for fact in team:
            announce(fact)
            with timed(timings, con, RUN, fact) as timing:
                _materialize_bounded(con, fact, params, TEAM_LIMITS, readable=facts.keys())
                found = None if fact.is_helper and fact.name not in helpers else _rows(con, fact)
                timing["rows"] = len(found[1]) if found else timing["rows"]
            record(fact, found)
    return out


def _whole_capture(facts: dict[str, Fact]) -> set[str]:
    """The bundled facts marked `-- @whole-capture` and the facts they need."""
    team = {name for name, fact in facts.items() if fact.team}
    return with_needs(facts, [f.name for f in facts.values() if f.whole_capture], skip=team)


def _compute_phases(con: Any, facts: dict[str, Fact], out: FactSet, params: dict[str, float] | None,
                    progress: Callable[[str], None] | None, workers: int, since_ns: int | None = None,
                    timings: Timings | None = None, compact: Compactor | None = None) -> None:
    """out.phases: the per-phase facts over each phase worth judging on its own (engine/facts/scopes.py)."""
    # Only when the run's facts a phase reads (-- @whole-run) were computed: `diagnose facts show phases` computes
    # the phases fact and what it needs, not the idle gaps every phase is cut from.
    if "phases" not in out.results or not bundled_from_run() <= facts.keys():
        return
    phases = phases_to_judge(out.rows("phases"))
    ordered = per_phase_order(facts) if phases else []
    threads = scalar(con, "SELECT current_setting('threads')") if phases else None
    kernels = {r["phase"]: r.get("kernel_count") or 0 for r in out.rows("phases")}
    for number, phase in enumerate(phases, 1):
        if progress:
            progress(f"computing the facts of phase {number}/{len(phases)} {phase}")
        scoped = FactSet(stacks=out.stacks)
        # A phase with few operations runs its facts side by side, as a small run does, whatever the run's size.
        found = compute_phase(con, phase, f"phase_{number}", ordered, params, _rows,
                              max(workers, side_by_side(threads, kernels.get(phase, 0))), since_ns, timings, compact)
        for fact in ordered:
            if fact.name in found:
                columns, rows = found[fact.name]
                run = out.results.get(fact.name)
                scoped.results[fact.name] = FactResult(fact, columns, rows, run.skipped if run else None)
        out.phases[phase] = scoped


def _unmet(export: Export, requirement: str) -> str | None:
    """Why a `-- @requires` requirement does not hold, or None. `kernels|graph_launches`: any one of the views
    holding rows is enough; `devices.sm_count`: some row of the view must have a value there that is not NULL
    (newer nsys columns, or ones an export leaves empty), and of `devices` every GPU that did work must have one
    (a property of the GPUs is needed for each GPU judged; a trace may list some GPUs and use another)."""
    if "." in requirement:
        view, column = requirement.split(".", 1)
        if view not in VIEWS or column not in [c.name for c in VIEWS[view].columns]:
            raise FactError(f"-- @requires {requirement}: no canonical column {requirement}; write VIEW.COLUMN with "
                            f"a column of engine/reading/nsys-schema.md, e.g. devices.sm_count")
        doc = next(c.doc for c in VIEWS[view].columns if c.name == column)
        source = "trace" if export.info.source_format == "kineto" else "export"
        if view == "devices":
            lacking = [r[0] for r in export.query(f'SELECT device_id FROM devices WHERE used AND "{column}" IS NULL '
                                                  f'ORDER BY device_id')]
            if lacking and scalar(export.con, f'SELECT count("{column}") FROM devices'):
                gpus = ("GPUs " if len(lacking) > 1 else "GPU ") + ", ".join(str(d) for d in lacking)
                return f"the {source} records no {view}.{column} ({doc.rstrip('.')}) for {gpus}, which did work"
        found = scalar(export.con, f'SELECT count("{column}") FROM "{view}"')
        if found:
            return None
        return f"the {source} records no {view}.{column} ({doc.rstrip('.')})"
    statuses = [export.views.get(view) for view in requirement.split("|")]
    if all(status is not None and status.rows == 0 for status in statuses):
        return next(s.reason for s in statuses if s is not None)
    return None


def _rows(con: Any, fact: Fact) -> tuple[list[str], list[dict[str, Any]]]:
    cursor = con.execute(f'SELECT * FROM "{fact.name}"')
    columns = [d[0] for d in cursor.description]
    return columns, [{c: _clean(v) for c, v in zip(columns, row)} for row in cursor.fetchall()]
