"""The column tests of the fact headers (`-- @check COLUMN TEST [ARG ...]`): parsed and validated when the
facts load, and holding on every fixture scenario and real export."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nsys_diagnose.facts import FactError, check_rows, load_facts, parse_fact
from nsys_diagnose.fixtures.generator import SCENARIOS

from conftest import REAL_EXPORTS, analysis, requires_real, scenario_analysis

FACTS = load_facts()
RATIO = re.compile(r"(^|_)(fraction|ratio|share|utilization|imbalance)(_|$)")


def _failures(fact_set, where: str) -> list[str]:
    return [failure.describe(where) for result in fact_set.results.values()
            for failure in check_rows(result.fact, result.rows)]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
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
