"""Every bundled rule loads, is documented, and passes the tests that sit beside it (<id>.test.yaml); the
cross-rank rules (`scope: run`) are tested on generated multi-rank runs."""

from __future__ import annotations

import pytest

from nsys_diagnose.facts import load_facts
from nsys_diagnose.diagnosis.rules import bundled_rules_dir, load_rules, rule_files
from nsys_diagnose.diagnosis.ruletest import find_test_files, run_rule_tests

from conftest import scenario_analysis

FACTS = load_facts()
RULES = load_rules(FACTS, scope=None)  # single-profile and cross-rank rules
TEST_FILES = find_test_files([bundled_rules_dir()])


def test_every_rule_has_a_test_file():
    tested = {f.name.removesuffix(".test.yaml") for f in TEST_FILES}
    assert tested == {p.stem for p in rule_files(bundled_rules_dir())}


def test_rules_are_filed_under_their_category():
    for rule in RULES.values():
        assert f"/{rule.spec.category}/{rule.id}.yaml" in rule.path.replace("\\", "/")


@pytest.fixture(scope="module")
def results():
    return run_rule_tests(TEST_FILES, RULES, FACTS, scenario_facts=lambda name: scenario_analysis(name)[0])


def test_rule_cases(results):
    failures = [f"{r.rule} / {r.name}: expected {r.expected}, got {r.got}" for r in results if not r.passed]
    assert not failures, "\n".join(failures)
    assert len(results) >= 2 * len(RULES)


def test_every_rule_has_a_firing_and_a_quiet_case(results):
    for rule_id in RULES:
        mine = [r for r in results if r.rule == rule_id]
        assert any(r.expected for r in mine), f"{rule_id} has no case where it fires"
        assert any(not r.expected for r in mine), f"{rule_id} has no case where it must stay quiet"
