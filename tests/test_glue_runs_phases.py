"""Glue runs with the phase as a dimension (rules/facts/_glue_runs.sql, engine/facts/scopes.py): the run's one pass
over every stream numbers each phase's runs apart and counts each sequence's repeats within its phase too, so a
phase's fusion candidates are a filter of the run's glue runs. They must be exactly what a pass over the phase's
own operations finds, which is how each phase computed them before."""

from __future__ import annotations

import pytest

from nsys_diagnose.facts.catalog import render_sql
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.scopes import OTHER
from nsys_diagnose.reading.export import open_export

from conftest import scenario_analysis, scenario_path

COLUMNS = ("device_id, stream_id, run_id, pid, correlation_id, start_ns, dur_ns, name_id, run_kernels, run_ns, "
           "is_first, order_key, set_key, repeats, is_cast, fused_factor, run_fused_ns")


@pytest.mark.parametrize("scenario", ["prefill_decode_nvtx", "vllm_v1_forward_ranges"])
def test_a_phases_glue_runs_are_those_a_pass_over_its_own_operations_finds(scenario: str) -> None:
    facts = load_facts()
    with open_export(scenario_path(scenario), cache=False) as export:
        computed = compute_facts(export, facts=facts, helpers={"_glue_runs", "_timeline"})
        con = export.con
        phases = [p for p in computed.phases]
        assert len(phases) >= 2, "the scenario must be judged phase by phase"
        found = 0
        for phase in phases:
            tagged = "phase IS NULL" if phase == OTHER else f"phase = '{phase}'"
            # the phase's glue runs as the phase reads them: the run's rows of the phase, its own repeats
            from_run = con.execute(f"SELECT {COLUMNS} FROM (SELECT * REPLACE (phase_repeats AS repeats) "
                                   f"FROM main._glue_runs WHERE {tagged} AND phase_repeated) ORDER BY ALL").fetchall()
            # the same SQL over nothing but the phase's operations
            con.execute("CREATE OR REPLACE SCHEMA alone")
            con.execute(f"CREATE VIEW alone._timeline AS SELECT * FROM main._timeline WHERE {tagged}")
            con.execute("SET search_path = 'alone,main'")
            try:
                alone = con.execute(f"SELECT {COLUMNS} FROM ({render_sql(facts['_glue_runs'])}) "
                                    f"ORDER BY ALL").fetchall()
            finally:
                con.execute("RESET search_path")
                con.execute("DROP SCHEMA alone CASCADE")
            assert from_run == alone, phase
            found += len(alone)
        assert found > 0, "the scenario must have glue runs in its phases"


def test_a_phase_reports_the_fusion_candidates_of_its_own_steps() -> None:
    facts, report = scenario_analysis("prefill_decode_nvtx")
    run = facts.first("fusion_candidates")
    per_phase = {phase: scoped.first("fusion_candidates") for phase, scoped in facts.phases.items()}
    # each phase's glue time is its own share of the run's, and the phases' add up to the run's
    assert sum(p["glue_ns"] for p in per_phase.values()) == run["glue_ns"]
    # a sequence is shown by the kernels of one run, never two runs of different phases that share a number
    for row in [run, *per_phase.values()]:
        for sequence in row["top_sequences"]:
            assert sequence["sequence"].count("→") == sequence["kernels"] - 1
