"""Run the fact SQL files over an opened export and collect their rows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from .facts import Fact, load_facts, materialize, run_order
from .duck import sql_literal
from .source import Export

# Default NVTX phase patterns (case-insensitive regular expressions on the range text). vLLM and
# SGLang name their model-runner steps prefill/decode or extend/decode; TensorRT-LLM says context/generation.
DEFAULT_PHASE_PATTERNS: dict[str, str] = {
    "prefill": r"(?i)prefill|\bextend|prompt|context[ _]?phase|\bcontext\b",
    "decode": r"(?i)decode|generat",
}


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

    def __getitem__(self, name: str) -> FactResult:
        return self.results[name]

    def rows(self, name: str) -> list[dict[str, Any]]:
        return self.results[name].rows

    def first(self, name: str) -> dict[str, Any]:
        rows = self.results[name].rows
        return rows[0] if rows else {}


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            return value.item()
        except (AttributeError, ValueError):
            return value
    return value


def compute_facts(export: Export, *, params: dict[str, float] | None = None,
                  phase_patterns: dict[str, str] | None = None, extra_fact_dirs: list | None = None,
                  facts: dict[str, Fact] | None = None,
                  progress: Callable[[str], None] | None = None) -> FactSet:
    facts = facts if facts is not None else load_facts(extra_fact_dirs)
    con = export.con
    patterns = phase_patterns if phase_patterns is not None else DEFAULT_PHASE_PATTERNS
    con.execute("CREATE OR REPLACE TABLE _phase_patterns (phase VARCHAR, pattern VARCHAR, priority INTEGER)")
    con.executemany("INSERT INTO _phase_patterns VALUES (?, ?, ?)",
                    [(phase, pattern, i) for i, (phase, pattern) in enumerate(patterns.items())])
    # phase_of(text): the first configured phase whose pattern matches. Patterns are written into the macro
    # as constants so DuckDB compiles each regular expression once, not once per NVTX range.
    cases = " ".join(f"WHEN regexp_matches(t, {sql_literal(pattern)}) THEN {sql_literal(phase)}"
                     for phase, pattern in patterns.items())
    con.execute(f"CREATE OR REPLACE MACRO phase_of(t) AS {'CASE ' + cases + ' END' if cases else 'NULL'}")
    out = FactSet()
    order = run_order(facts)
    sandboxed = False
    # Bundled facts first; team facts run after DuckDB's external access and configuration are locked,
    # so their SQL sees the canonical views and facts and nothing else.
    ops = sum(export.count(v) for v in ("kernels", "graph_launches", "memcpys", "memsets") if v in export.views)
    ordered = [f for f in order if not f.team] + [f for f in order if f.team]
    for number, fact in enumerate(ordered, 1):
        if fact.team and not sandboxed:
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            sandboxed = True
        if progress:
            progress(f"computing fact {number}/{len(ordered)} {fact.name} over {ops:,} GPU operations")
        materialize(con, fact, params)
        if fact.is_helper:
            continue
        cursor = con.execute(f'SELECT * FROM "{fact.name}"')
        columns = [d[0] for d in cursor.description]
        rows = [{c: _clean(v) for c, v in zip(columns, row)} for row in cursor.fetchall()]
        skipped = None
        for view in fact.requires:
            status = export.views.get(view)
            if status is not None and status.rows == 0:
                skipped = status.reason
                break
        out.results[fact.name] = FactResult(fact, columns, rows, skipped)
    return out
