"""The phase as a dimension of the run's rows (engine/facts/scopes.py): a phase reads its calls, operations, gaps and
glue runs through a filter of what the run computed, and must read exactly the rows a pass over its own operations
would find. The glue runs (rules/facts/_glue_runs.sql): the run's one pass over every stream numbers each phase's
runs apart and counts each sequence's repeats within its phase too. The calls (rules/facts/_call_phases.sql): every
call of the phase threads, with its phase, instead of a copy of the phase's calls."""

from __future__ import annotations

import pytest

from nsys_diagnose.facts.catalog import render_sql
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.scopes import OTHER, _copy_rows, phase_scope
from nsys_diagnose.reading.export import open_export

from conftest import scenario_analysis, scenario_path

COLUMNS = ("device_id, stream_id, run_id, pid, correlation_id, start_ns, dur_ns, name_id, run_kernels, run_ns, "
           "is_first, order_key, set_key, repeats, is_cast, fused_factor, run_fused_ns")


def _read_in_phase(con, run: str, phase: str, sql: str) -> list[tuple]:
    """Rows of `sql` read in the phase's scope, as the phase's facts read them."""
    claimed, keep, tagged = phase_scope(run, phase)
    con.execute("CREATE SCHEMA scope")
    con.execute("CREATE SCHEMA scope_stored")
    con.execute("SET search_path = 'scope,main'")
    try:
        _copy_rows(con, run, "scope_stored", claimed, keep, tagged, None)
        return con.execute(sql).fetchall()
    finally:
        con.execute("RESET search_path")
        con.execute("DROP SCHEMA scope CASCADE")
        con.execute("DROP SCHEMA scope_stored CASCADE")


@pytest.mark.parametrize("scenario", ["prefill_decode_nvtx", "vllm_v1_forward_ranges"])
def test_a_phases_glue_runs_are_those_a_pass_over_its_own_operations_finds(scenario: str) -> None:
    facts = load_facts()
    with open_export(scenario_path(scenario), cache=False) as export:
        computed = compute_facts(export, facts=facts, helpers={"_glue_runs", "_timeline", "_call_phases"})
        con = export.con
        run = f'"{con.execute("SELECT current_database()").fetchone()[0]}".main'
        phases = list(computed.phases)
        assert len(phases) >= 2, "the scenario must be judged phase by phase"
        found = 0
        for phase in phases:
            tagged = phase_scope(run, phase)[2]
            # the phase's glue runs as its facts read them: the run's rows of the phase, with its own repeats
            as_read = _read_in_phase(con, run, phase, f"SELECT {COLUMNS} FROM scope._glue_runs ORDER BY ALL")
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
            assert as_read == alone, phase
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


@pytest.mark.parametrize("scenario", ["prefill_decode_nvtx", "vllm_v1_forward_ranges"])
def test_a_named_phase_reads_the_calls_its_ranges_claim(scenario: str) -> None:
    with open_export(scenario_path(scenario), cache=False) as export:
        computed = compute_facts(export, facts=load_facts(), helpers={"_call_phases"})
        con = export.con
        run = f'"{con.execute("SELECT current_database()").fetchone()[0]}".main'
        for phase in [p for p in computed.phases if p != OTHER]:
            claimed = phase_scope(run, phase)[0]
            # what the phase copied before: every call whose thread and start a phase row of _call_phases names
            copied = con.execute(f"SELECT x.* FROM api_calls x SEMI JOIN {claimed} p "
                                 f"ON p.global_tid = x.global_tid AND p.start_ns = x.start_ns ORDER BY ALL").fetchall()
            read = _read_in_phase(con, run, phase, "SELECT * FROM scope.api_calls ORDER BY ALL")
            assert read == copied and read, phase
