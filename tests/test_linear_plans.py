"""Every bundled fact's query stays linear in the export: no operator of its executed plan produces more rows
than a small multiple of all the rows the export holds. A plan that is quadratic on a small fixture is hours on a
capture of millions of kernels, long before a timing test would notice. DuckDB plans an ASOF join whose left side
it estimates small as a nested loop with every earlier row of the right side; estimates behind semi joins are
often 1, so _steps met 2 M joined rows on a 4,000-call export (engine/base/duck.py turns that plan off)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.catalog import render_sql
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.reading.export import open_export

from conftest import REAL_EXPORTS, scenario_path

# Many steps or many calls on one thread (the ASOF joins of steps, gaps and metric samples), and GPU metrics.
SCENARIOS = ("sync_storm", "tiny_kernels_queued", "idle_server_bursts", "memory_bound_metrics")
# Bundled tables of fixed size (the GPU-metric names) may outnumber a tiny export's rows.
FIXED_ROWS = 1000
MAX_RATIO = 4


def _largest_operators(plan: dict, fact: str) -> list[tuple[int, str]]:
    operator = plan.get("operator_name") or plan.get("operator_type")
    conditions = json.dumps(plan.get("extra_info", {}).get("Conditions", ""))[:120]
    found = [(int(plan.get("operator_cardinality") or 0), f"{fact}: {operator} {conditions}")]
    for child in plan.get("children", []):
        found += _largest_operators(child, fact)
    return found


def _too_big(path: Path, min_rows: int = 0) -> tuple[int, int, list[tuple[int, str]]]:
    """The export's rows, the limit, and the operators of any bundled fact's executed plan above it."""
    facts = load_facts()
    with open_export(path, cache=False) as export:
        compute_facts(export, facts=facts)
        con = export.con
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'canon'").fetchall()]
        export_rows = sum(con.execute(f'SELECT count(*) FROM canon."{t}"').fetchone()[0] for t in tables)
        assert export_rows > min_rows, f"{path.name} is too small to tell a quadratic plan from a linear one"
        limit = MAX_RATIO * export_rows + FIXED_ROWS
        too_big = []
        for fact in facts.values():
            plan = json.loads(con.execute("EXPLAIN (ANALYZE, FORMAT json) " + render_sql(fact)).fetchall()[0][1])
            too_big += [op for op in _largest_operators(plan, fact.name) if op[0] > limit]
    return export_rows, limit, sorted(too_big, reverse=True)[:5]


@pytest.mark.parametrize("name", SCENARIOS)
def test_no_fact_plan_grows_faster_than_the_export(name):
    export_rows, limit, too_big = _too_big(scenario_path(name), min_rows=1000)
    assert not too_big, (f"{name} holds {export_rows:,} rows, but these operators produced more than "
                         f"{limit:,}: {too_big}")


@pytest.mark.real_exports  # slow tier, as every real-export test (conftest.py)
@pytest.mark.parametrize("path", REAL_EXPORTS, ids=lambda p: p.name.split("__")[0])
def test_no_fact_plan_grows_faster_than_a_real_export(path):
    export_rows, limit, too_big = _too_big(path)
    assert not too_big, (f"{path.name} holds {export_rows:,} rows, but these operators produced more than "
                         f"{limit:,}: {too_big}")
