"""The rule set in force (engine/diagnosis/ruleset.py): diagnose.yaml and --set resolved once over the rules'
defaults, and the thresholds the key metrics are judged against, in the unit of the column each rule compares."""

from __future__ import annotations

import pytest

from nsys_diagnose.diagnosis.config import Config, apply_set
from nsys_diagnose.diagnosis.rules import load_rules
from nsys_diagnose.diagnosis.ruleset import RuleSet
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.base.vocabulary import Severity


@pytest.fixture(scope="module")
def rules():
    return load_rules(load_facts())


def _config(*assignments: str) -> Config:
    config = Config()
    for assignment in assignments:
        apply_set(config, assignment)
    return config


def test_the_settings_in_force_are_the_defaults_with_the_configured_values(rules):
    ruleset = RuleSet.from_config(rules, _config("launch-bound.max_overhead_ratio=0.2",
                                                 "slow-launch-calls.severity=error", "low-utilization.enabled=false"))
    defaults = {name: spec.default for name, spec in rules["launch-bound"].spec.params.items()}
    assert ruleset.params["launch-bound"] == {**defaults, "max_overhead_ratio": 0.2}
    assert ruleset.severity("slow-launch-calls") == Severity.ERROR
    assert ruleset.severity("launch-bound") == rules["launch-bound"].spec.severity
    assert "slow-launch-calls" in ruleset.severities and "launch-bound" not in ruleset.severities
    assert ruleset.disabled == {"low-utilization"}


def test_a_threshold_is_in_the_unit_of_the_column_the_rule_compares(rules):
    # slow-launch-calls: p50_ns > $max_median_latency, a param in µs
    ruleset = RuleSet.resolve(rules, {"slow-launch-calls": {"max_median_latency": 30}})
    threshold = ruleset.threshold("slow-launch-calls.max_median_latency")
    assert threshold is not None
    assert (threshold.value, threshold.op, threshold.param) == (30_000, ">", "slow-launch-calls.max_median_latency")
    low = RuleSet.resolve(rules).threshold("low-utilization.min_utilization")
    assert low is not None and (low.value, low.op) == (0.5, "<")


def test_a_disabled_missing_or_unknown_rule_param_has_no_threshold(rules):
    ruleset = RuleSet.from_config(rules, _config("low-utilization.enabled=false"))
    assert ruleset.threshold("low-utilization.min_utilization") is None  # a disabled rule judges nothing
    assert ruleset.threshold("no-such-rule.min_utilization") is None
    assert ruleset.threshold("launch-bound.no_such_param") is None


def test_settings_of_rules_outside_the_set_are_left_out(rules):
    # A configuration shared with multi-rank runs may tune cross-rank rules, which a profile's rule set lacks.
    ruleset = RuleSet.resolve({"launch-bound": rules["launch-bound"]}, {"rank-straggler": {"min_ranks": 3}},
                              {"rank-straggler": "error"}, ["rank-straggler"])
    assert set(ruleset.params) == {"launch-bound"} and not ruleset.severities and not ruleset.disabled


def test_a_subset_keeps_its_rules_settings(rules):
    ruleset = RuleSet.from_config(rules, _config("launch-bound.max_overhead_ratio=0.2", "launch-bound.severity=info",
                                                 "low-utilization.enabled=false", "slow-launch-calls.severity=error"))
    subset = ruleset.only(["launch-bound", "low-utilization"])
    assert set(subset.rules) == {"launch-bound", "low-utilization"}
    assert subset.params["launch-bound"]["max_overhead_ratio"] == 0.2
    assert subset.severities == {"launch-bound": Severity.INFO} and subset.disabled == {"low-utilization"}


def test_a_setting_the_rules_lack_is_refused_never_dropped(rules):
    from nsys_diagnose.diagnosis.config import ConfigError

    with pytest.raises(ConfigError, match=r"^--set launch-bound\.max_overhead=0\.2: rule 'launch-bound' has no "
                                          r"param 'max_overhead'; did you mean 'max_overhead_ratio'"):
        RuleSet.from_config(rules, _config("launch-bound.max_overhead=0.2"))
    with pytest.raises(ConfigError, match=r"^--set launch-bund\.severity=info: unknown rule 'launch-bund'; did you "
                                          r"mean 'launch-bound'"):
        RuleSet.from_config(rules, _config("launch-bund.severity=info"))


@pytest.mark.parametrize("assignment, says", [
    ("nope.x=1", "--set nope.x=1: unknown rule 'nope'; `diagnose rules list` lists the rules"),
    ("launch-bond.max_overhead_ratio=0.2", "--set launch-bond.max_overhead_ratio=0.2: unknown rule 'launch-bond'; "
                                           "did you mean 'launch-bound'?"),
    ("launch-bond.enabled=false", "--set launch-bond.enabled=false: unknown rule 'launch-bond'; did you mean "
                                  "'launch-bound'?"),
    ("launch-bound.max_overhed_ratio=0.25", "--set launch-bound.max_overhed_ratio=0.25: rule 'launch-bound' has no "
                                            "param 'max_overhed_ratio'; did you mean 'max_overhead_ratio'?"),
])
def test_a_set_the_rules_lack_says_it_came_from_set(rules, assignment, says):
    from nsys_diagnose.diagnosis.config import ConfigError

    with pytest.raises(ConfigError) as err:
        RuleSet.from_config(rules, _config(assignment))
    assert str(err.value) == says


def test_a_configuration_file_setting_the_rules_lack_names_the_file_and_key(rules, tmp_path):
    from nsys_diagnose.diagnosis.config import ConfigError, load_config_file

    path = tmp_path / "diagnose.yaml"
    path.write_text("rules:\n  launch-bund:\n    max_overhead_ratio: 0.2\n")
    with pytest.raises(ConfigError) as err:
        RuleSet.from_config(rules, load_config_file(path))
    assert str(err.value) == (f"{path}: rules.launch-bund.max_overhead_ratio: unknown rule 'launch-bund'; did you "
                              f"mean 'launch-bound'?")


def test_the_rule_set_carries_the_overrides_a_report_lists(rules):
    ruleset = RuleSet.from_config(rules, _config("launch-bound.max_overhead_ratio=0.2", "low-utilization.enabled=false",
                                                 "facts.warmup_share=0.2"), load_facts())
    assert [(o.target, o.value, o.default) for o in ruleset.overrides] == [
        ("launch-bound.max_overhead_ratio", 0.2, 0.3), ("low-utilization.enabled", False, True),
        ("facts.warmup_share", 0.2, load_facts()["allocation_overview"].params["warmup_share"])]
    assert [o.target for o in ruleset.only(["launch-bound"], fact_settings=False).overrides] == [
        "launch-bound.max_overhead_ratio"]
    value, set_by = ruleset.explained("launch-bound")["max_overhead_ratio"]
    assert value == 0.2 and set_by is not None and set_by.origin == "command line"
    assert ruleset.explained("launch-bound")["min_kernels"][1] is None
