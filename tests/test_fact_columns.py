"""The column tests of the fact headers (`-- @check COLUMN TEST [ARG ...]`): parsed and validated when the
facts load, and holding on every fixture scenario and real export."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nsys_diagnose.facts.catalog import FactError, check_rows, parse_fact
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.fixtures.generator import SCENARIOS

from conftest import REAL_EXPORTS, analysis, requires_real, scenario_analysis, slow_but

FACTS = load_facts()
RATIO = re.compile(r"(^|_)(fraction|ratio|share|utilization|imbalance)(_|$)")


def _failures(fact_set, where: str) -> list[str]:
    return [failure.describe(where) for result in fact_set.results.values()
            for failure in check_rows(result.fact, result.rows)]


@pytest.mark.parametrize("scenario", slow_but(sorted(SCENARIOS), "prefill_decode_nvtx"))
def test_column_checks_hold_on_every_scenario(scenario):
    facts, _ = scenario_analysis(scenario)
    failures = _failures(facts, f"scenario {scenario}")
    assert not failures, "\n".join(failures)


@requires_real
@pytest.mark.parametrize("export", REAL_EXPORTS, ids=[p.name[:60] for p in REAL_EXPORTS])
def test_column_checks_hold_on_every_real_export(export):
    facts, _ = analysis(export)
    failures = _failures(facts, f"real export {export.name}")
    assert not failures, "\n".join(failures)


def test_every_fact_rules_read_is_checked_and_every_share_is_in_0_1():
    public = [f for f in FACTS.values() if not f.is_helper]
    assert all(f.checks for f in public), [f.name for f in public if not f.checks]
    missing = [f"{f.name}.{c.name}" for f in public for c in f.columns
               if (RATIO.search(c.name) or "(0-1)" in c.doc)
               and not any(k.column == c.name and k.test == "range" and k.args == ("0", "1") for k in f.checks)]
    assert not missing, f"0-1 columns without `-- @check COLUMN range 0 1`: {missing}"


def test_a_violation_names_the_fact_column_test_and_row():
    fact = parse_fact("-- @fact f\n-- @column device_id GPU.\n-- @column share Share (0-1).\n"
                      "-- @check device_id not_null\n-- @check share range 0 1\n-- @check device_id unique\n"
                      "SELECT 1 AS device_id, 0.5 AS share\n", "f.sql")
    rows = [{"device_id": 0, "share": 0.5}, {"device_id": 1, "share": 1.5}, {"device_id": None, "share": None},
            {"device_id": 1, "share": 0.0}]
    assert [f.describe("scenario x") for f in check_rows(fact, rows)] == [
        "f.device_id: not_null failed on scenario x: row 2 {'device_id': None, 'share': None}",
        "f.share: range 0 1 failed on scenario x: row 1 {'device_id': 1, 'share': 1.5}",
        "f.device_id: unique failed on scenario x: row 3 {'device_id': 1, 'share': 0.0}",
    ]


@pytest.mark.parametrize("test, good, bad", [
    ("non_negative", [0, 3.5, None], [-1]),
    ("range 0 1", [0, 1, 0.25, None, 1 + 1e-12], [1.01, -0.5, "x"]),
    ("accepted_values runtime driver", ["runtime", None], ["kernel"]),
    ("not_null", [0, "", False], [None]),
])
def test_each_test_passes_and_fails_as_documented(test, good, bad):
    fact = parse_fact(f"-- @fact f\n-- @column v Value.\n-- @check v {test}\nSELECT 1 AS v\n", "f.sql")
    assert check_rows(fact, [{"v": value} for value in good]) == []
    for value in bad:
        assert check_rows(fact, [{"v": value}]), value


@pytest.mark.parametrize("line, message", [
    ("-- @check device_idd not_null", "f.sql:4: @check names column 'device_idd', which no @column of fact 'f' "
                                      "declares; did you mean 'device_id'?"),
    ("-- @check device_id not_nul", "f.sql:4: @check device_id: unknown test 'not_nul'; did you mean 'not_null'?"),
    ("-- @check device_id range 0", "f.sql:4: @check device_id range takes the arguments LO HI"),
    ("-- @check device_id range 1 0", "f.sql:4: @check device_id range needs two finite numbers LO <= HI"),
    ("-- @check device_id range 0 nan", "f.sql:4: @check device_id range needs two finite numbers LO <= HI"),
    ("-- @check device_id unique 3", "f.sql:4: @check device_id unique takes no arguments"),
    ("-- @check device_id", "f.sql:4: write -- @check COLUMN TEST [ARG ...]"),
])
def test_a_bad_check_is_a_load_error_with_file_and_line(line, message):
    text = f"-- @fact f\n-- @doc A fact.\n-- @column device_id GPU.\n{line}\nSELECT 1 AS device_id\n"
    with pytest.raises(FactError) as err:
        parse_fact(text, "f.sql")
    assert str(err.value).startswith(message)


def test_a_helper_fact_takes_no_checks():
    with pytest.raises(FactError, match=r"^h\.sql:3: @check on the helper fact '_h'"):
        parse_fact("-- @fact _h\n-- @column x X.\n-- @check x not_null\nSELECT 1 AS x\n", "h.sql")


def test_a_team_fact_with_a_bad_check_stops_the_load(tmp_path: Path):
    (tmp_path / "acme.sql").write_text("-- @fact acme_steps\n-- @doc Steps.\n-- @column steps Steps.\n"
                                       "-- @check step non_negative\nSELECT 1 AS steps\n")
    with pytest.raises(FactError, match=r"acme\.sql:4: @check names column 'step'.*did you mean 'steps'"):
        load_facts([tmp_path])


# Report metadata in the headers (`-- @report [rows=N] [per-phase]`, `-- @whole-run`)

def test_report_header_says_what_a_report_keeps():
    fact = parse_fact("-- @fact f\n-- @report rows=5 per-phase\n-- @per-phase\n-- @column device_id GPU.\n"
                      "-- @check device_id not_null\nSELECT 1 AS device_id\n", "f.sql")
    assert (fact.reported, fact.report_rows, fact.report_per_phase) == (True, 5, True)
    plain = parse_fact("-- @fact g\n-- @report\n-- @column x X.\n-- @check x not_null\nSELECT 1 AS x\n", "g.sql")
    assert (plain.reported, plain.report_rows, plain.report_per_phase) == (True, None, False)


@pytest.mark.parametrize("header, message", [
    ("-- @report rows=0", r"f\.sql:2:4: @report takes `rows=N`.*not 'rows=0'"),
    ("-- @report top=5", r"f\.sql:2:4: @report takes .*not 'top=5'"),
    ("-- @report per-phase", r"@report per-phase on 'f', which is not computed per phase"),
])
def test_a_wrong_report_header_names_the_file_and_the_fix(header, message):
    with pytest.raises(FactError, match=message):
        parse_fact(f"-- @fact f\n{header}\n-- @column x X.\n-- @check x not_null\nSELECT 1 AS x\n", "f.sql")


def test_a_helper_is_never_reported():
    with pytest.raises(FactError, match="@report on the helper fact '_h'"):
        parse_fact("-- @fact _h\n-- @report\nSELECT 1 AS x\n", "_h.sql")


def test_the_report_keeps_the_facts_and_rows_the_headers_name():
    """What `-- @report` marks is what the JSON report holds: each fact cut to its `rows=N`, and the per-phase rows
    of the facts marked `per-phase` under each phase judged alone."""
    from nsys_diagnose.facts.catalog import reported_facts

    facts, report = scenario_analysis("prefill_heavy_eager_decode")
    marked = {f.name: f for f in reported_facts(FACTS)}
    assert {"kernel_summary", "summary", "gpu_utilization"} <= marked.keys()
    assert set(report.facts) == {name for name in marked if name in facts.results}
    for name, rows in report.facts.items():
        limit = marked[name].report_rows
        assert rows == facts.rows(name)[:limit], name
    assert marked["kernel_gaps"].report_rows == 200 and marked["kernel_summary"].report_rows == 50
    assert report.phase_facts and facts.phases.keys() == report.phase_facts.keys()
    for phase, reported in report.phase_facts.items():
        per_phase = {n for n, f in marked.items() if f.report_per_phase}
        assert set(reported) == per_phase & facts.phases[phase].results.keys()
        assert "launch_overhead" in reported and "kernel_gaps" not in reported


def test_phases_read_the_whole_run_facts_instead_of_computing_them_again():
    from nsys_diagnose.facts.scopes import from_run, per_phase_order

    whole_run = from_run(FACTS)
    assert {"_idle_gaps", "_timeline", "_call_phases"} <= whole_run
    assert all(FACTS[name].is_helper for name in whole_run)
    again = {f.name for f in per_phase_order(FACTS)}
    assert not again & whole_run and {"gpu_utilization", "launch_overhead"} <= again
