"""The fusion saving (rules/facts/fusion_candidates.sql) is the same number in every run over one export: it is a sum
over the repeated glue runs, and a sum of floating-point values changes in its last digits with the order DuckDB's
threads add them in, which a JSON report diffed between two runs would show as a change."""

from __future__ import annotations

from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.reading.export import open_export

from conftest import scenario_path


def test_every_time_summed_into_the_fusion_saving_is_whole_nanoseconds() -> None:
    with open_export(scenario_path("eager_unfused_glue"), cache=False) as export:
        computed = compute_facts(export, facts=load_facts(), helpers={"_glue_runs"})
        types = dict(export.con.execute("SELECT column_name, data_type FROM duckdb_columns() "
                                        "WHERE table_name = '_glue_runs'").fetchall())
        runs = computed.rows("_glue_runs")
        saving = computed.first("fusion_candidates")
    assert runs, "the scenario must have repeated glue runs"
    # integers add up to the same total in any order
    assert types["run_fused_ns"] == "BIGINT" and types["run_ns"] in ("BIGINT", "HUGEINT")
    assert saving["fusion_saving_ns"] > 0
    assert saving["fusion_saving_fraction"] == saving["fusion_saving_ns"] / saving["window_ns"]
