"""Every bundled rule loads, is documented, and passes the tests that sit beside it (<id>.test.yaml); the
cross-rank rules (`scope: run`) are tested on generated multi-rank runs."""

from __future__ import annotations

import io
import sys

import pytest
import yaml

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.diagnosis.rules import bundled_rules_dir, load_rules, rule_files
from nsys_diagnose.authoring.ruletest import FactCache, find_test_files, run_rule_tests

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


def _cases(path) -> tuple[str, list[dict]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data["rule"], data["cases"]


RULE_TESTS = {_cases(path)[0]: path for path in TEST_FILES}  # rule id -> its test file, one test item per rule


@pytest.fixture(scope="module")
def profile_facts():
    """The facts of the profiles diagnosed with a case's fact params, shared by the rules of one worker."""
    cache = FactCache(FACTS, scenario_facts=lambda name: scenario_analysis(name)[0])
    yield cache
    cache.close()


def _failures(results) -> list[str]:
    return [f"{r.rule} / {r.name}: expected {r.expected}, got {r.got}" for r in results if not r.passed]


# Most cases run on generated scenarios, and diagnosing all of them is most of the slow tier's set-up. The fast
# tier runs every inline-rows case and the cases on the few scenarios it diagnoses anyway; test_rule_cases, in
# the slow tier, runs every case.
FAST_TIER_SCENARIOS = {"eager_decode", "prefill_decode_nvtx", "memory_bound_metrics", "multi_gpu_straggler"}


def _fast_case(case: dict) -> bool:
    return "rows" in case or (case.get("scenario") in FAST_TIER_SCENARIOS and not case.get("facts"))


FAST_RULES = [rule_id for rule_id, path in RULE_TESTS.items()
              if RULES[rule_id].spec.scope != "run" and any(_fast_case(c) for c in _cases(path)[1])]


def test_the_fast_tier_runs_inline_rows_cases_and_cases_on_its_scenarios():
    fast = [c for rule_id in FAST_RULES for c in _cases(RULE_TESTS[rule_id])[1] if _fast_case(c)]
    assert sum("rows" in c for c in fast) >= 10
    assert len(fast) >= 40


@pytest.mark.parametrize("rule_id", FAST_RULES)
def test_fast_rule_cases(rule_id, tmp_path):
    path = RULE_TESTS[rule_id]
    copy = tmp_path / path.parent.name / path.name
    copy.parent.mkdir()
    cases = [c for c in _cases(path)[1] if _fast_case(c)]
    copy.write_text(yaml.safe_dump({"rule": rule_id, "cases": cases}, sort_keys=False), encoding="utf-8")
    results = run_rule_tests([copy], RULES, FACTS, scenario_facts=lambda name: scenario_analysis(name)[0])
    assert not _failures(results), "\n".join(_failures(results))
    assert len(results) == len(cases)


@pytest.mark.slow
@pytest.mark.parametrize("rule_id", sorted(RULE_TESTS))
def test_rule_cases(rule_id, profile_facts):
    results = run_rule_tests([RULE_TESTS[rule_id]], RULES, FACTS, cache=profile_facts)
    assert not _failures(results), "\n".join(_failures(results))


@pytest.mark.parametrize("rule_id", sorted(RULE_TESTS))
def test_every_rule_has_a_firing_and_a_quiet_case(rule_id):
    cases = _cases(RULE_TESTS[rule_id])[1]
    assert any(c["expect"] for c in cases), f"{rule_id} has no case where it fires"
    assert any(not c["expect"] for c in cases), f"{rule_id} has no case where it must stay quiet"


THREE_MISTAKES = """\
id: acme/slow-decode
title: Slow decode kernels
category: launch-bound
severity: warning
fact: launch_overhead
params:
  max_ratio: {default: 0.5, unit: ratio, doc: Overhead ratio budget.}
when:
  - overhead_ration > $max_ratio
message: "GPU {{ row.device_id | pcent }}"
why: Because.
remediation: [Use CUDA graphs.]
sevrity: error
"""


def test_a_broken_rule_file_lists_every_independent_problem(tmp_path):
    from nsys_diagnose.diagnosis.rule_spec import RuleError
    from nsys_diagnose.diagnosis.rules import load_rule_file

    path = tmp_path / "slow-decode.yaml"
    path.write_text(THREE_MISTAKES)
    with pytest.raises(RuleError) as err:
        load_rule_file(path, FACTS, str(tmp_path))
    prefix = f'{path}:{{}}: rule "acme/slow-decode": '
    assert err.value.problems == [
        prefix.format("9:5") + "fact 'launch_overhead' has no column 'overhead_ration'; did you mean 'overhead_ratio'?",
        prefix.format("10:1") + "its message template uses the unknown filter 'pcent'; did you mean 'percent'?",
        prefix.format("13:1") + "unknown key 'sevrity'; did you mean 'severity'?",
    ]
    assert str(err.value) == "\n".join(err.value.problems)


def test_checks_that_depend_on_a_broken_key_are_left_out(tmp_path):
    """A bad params block must not also blame every condition that uses a param."""
    from nsys_diagnose.diagnosis.rule_spec import RuleError
    from nsys_diagnose.diagnosis.rules import load_rule_file

    path = tmp_path / "slow-decode.yaml"
    path.write_text(THREE_MISTAKES.replace("unit: ratio", "unit: furlongs").replace("sevrity: error\n", "")
                    .replace("fact: launch_overhead", "fact: launch_overhed"))
    with pytest.raises(RuleError) as err:
        load_rule_file(path, FACTS, str(tmp_path))
    problems = err.value.problems
    assert len(problems) == 3, problems
    assert ":5:1: " in problems[0] and "unknown fact 'launch_overhed'; did you mean 'launch_overhead'?" in problems[0]
    assert ":7:3: " in problems[1] and "params.max_ratio.unit: unknown unit 'furlongs'" in problems[1]
    assert ":10:1: " in problems[2] and "unknown filter 'pcent'" in problems[2]


def test_a_capture_switch_yaml_split_at_its_commas_is_refused_at_its_line(tmp_path):
    """`pass: [--trace=cuda,nvtx]` is three YAML items; the advice would print --nsys-arg=nvtx, which exits 2."""
    from nsys_diagnose.diagnosis.rule_spec import RuleError
    from nsys_diagnose.diagnosis.rules import load_rule_file

    source = (bundled_rules_dir() / "capture" / "capture-empty.yaml").read_text()
    path = tmp_path / "capture" / "capture-empty.yaml"
    path.parent.mkdir()
    path.write_text(source.replace('["--trace=cuda,nvtx,osrt"]', "[--trace=cuda,nvtx,osrt]"))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip().startswith("pass:"))
    with pytest.raises(RuleError) as err:
        load_rule_file(path, FACTS, "bundled")
    assert err.value.problems == [f'{path}:{line}:3: rule "capture-empty": capture.pass: \'nvtx\' is not an nsys '
                                  f'switch: each item must be one whole --switch=value (quote a value with commas: '
                                  f'["--trace=cuda,nvtx"])']


INLINE = """\
rule: launch-bound
cases:
  - name: just over the ratio
    rows:
      launch_overhead:
        - {device_id: 0, kernel_count: 500, mean_kernel_ns: 8000, median_gap_ns: 3500, overhead_ratio: 0.31,
           launch_idle_share: 0.8, launch_idle_fraction: 0.25, launch_gap_allocation_share: 0, graph_share: 0}
    expect:
      - {subject: GPU 0, severity: warning, message: the overhead ratio is 0.31, evidence: {overhead_ratio: 0.31}}
"""


def test_an_inline_rows_case_checks_message_and_evidence(tmp_path):
    path = tmp_path / "launch-bound.test.yaml"
    path.write_text(INLINE)
    [ok] = run_rule_tests([path], RULES, FACTS)
    assert ok.passed, ok.got
    path.write_text(INLINE.replace("evidence: {overhead_ratio: 0.31}", "evidence: {median_gap_ns: 3.4 µs}"))
    [wrong] = run_rule_tests([path], RULES, FACTS)
    assert not wrong.passed
    assert wrong.got[0]["evidence"] == {"median_gap_ns": {"value": 3500, "display": "3.5 µs"}}
    path.write_text(INLINE.replace("message: the overhead ratio is 0.31", "message: the overhead ratio is 0.32"))
    [wrong] = run_rule_tests([path], RULES, FACTS)
    assert not wrong.passed and "the overhead ratio is 0.31, and 80.0 %" in wrong.got[0]["message"]


def _refused_as(tmp_path, old, new, message):
    """INLINE with `old` replaced by `new` fails to load with exactly `message` after its path."""
    from nsys_diagnose.authoring.ruletest import RuleTestError, load_test_file

    assert old in INLINE
    path = tmp_path / "launch-bound.test.yaml"
    path.write_text(INLINE.replace(old, new))
    with pytest.raises(RuleTestError) as err:
        load_test_file(path, RULES, FACTS)
    assert str(err.value) == f"{path}:{message}"


@pytest.mark.parametrize("old, new, message", [
    ("      launch_overhead:", "      launch_overheads:",
     "5:7: case 1: no fact 'launch_overheads'; did you mean 'launch_overhead'?"),
    ("median_gap_ns: 3500", "median_gap: 3500",
     "6:67: case 1: fact 'launch_overhead' has no column 'median_gap'; did you mean 'median_gap_ns'?"),
    ("    rows:", "    scenario: eager_decode\n    rows:",
     "5:5: case 1: give exactly one of 'scenario', 'profile' or 'rows'"),
    ("    rows:", "    facts: {gap_threshold_ns: 5000}\n    rows:",
     "4:5: case 1: 'facts' sets how facts are computed from a profile; a case with 'rows' gives the fact rows "
     "themselves"),
    ("evidence: {overhead_ratio: 0.31}", "evidence: {overhead: 0.31}",
     "9:93: case 1: the rule's fact has no column 'overhead'; did you mean 'overhead_ratio'?"),
])
def test_a_mistake_in_an_inline_rows_case_is_one_sentence_with_its_place(tmp_path, old, new, message):
    _refused_as(tmp_path, old, new, message)


@pytest.mark.parametrize("old, new", [
    ("overhead_ratio: 0.31", "overhead_ratio: 3.1e-1"),  # YAML 1.1 reads this as text
    ("kernel_count: 500", 'kernel_count: "500"'),
])
def test_an_inline_number_written_as_text_is_read_as_the_column_s_number(tmp_path, old, new):
    """Compared as text, the threshold check would fail and the case expecting a finding would see none."""
    path = tmp_path / "launch-bound.test.yaml"
    path.write_text(INLINE.replace(old, new))
    [case] = run_rule_tests([path], RULES, FACTS)
    assert case.passed, case.got
    assert case.got[0]["evidence"]["overhead_ratio"]["value"] == pytest.approx(0.31)


@pytest.mark.parametrize("old, new, message", [
    ("kernel_count: 500", "kernel_count: zero",
     "6:26: case 1: rows.launch_overhead.kernel_count is a whole number, not 'zero'"),
    ("kernel_count: 500", "kernel_count: 500.5",
     "6:26: case 1: rows.launch_overhead.kernel_count is a whole number, not 500.5"),
    ("overhead_ratio: 0.31", "overhead_ratio: high",
     "6:88: case 1: rows.launch_overhead.overhead_ratio is a number, not 'high'"),
    ("overhead_ratio: 0.31", "overhead_ratio: true",
     "6:88: case 1: rows.launch_overhead.overhead_ratio is a number, not True"),
    ("    expect:", "      small_kernels: [{device_id: 0}]\n    expect:",
     "8:7: case 1: rule 'launch-bound' does not read fact 'small_kernels', so its rows change nothing; it reads "
     "'launch_overhead'"),
])
def test_an_inline_value_that_does_not_fit_its_column_is_an_input_error(tmp_path, old, new, message):
    _refused_as(tmp_path, old, new, message)


def test_a_rows_case_may_give_the_facts_a_remediation_step_reads(tmp_path):
    """host-bound's steps read capture_traces.COLUMN: rows of that fact are input, not a mistake."""
    rule = RULES["host-bound"]
    assert "capture_traces" in {s.value[0] for cs in rule.step_conditions.values() for c in cs
                                for s in (c.left, c.right) if s.kind == "fact"}
    path = tmp_path / "host-bound.test.yaml"
    path.write_text(f"rule: host-bound\ncases:\n  - rows:\n      {rule.spec.fact}: []\n"
                    f"      capture_traces: [{{cpu_sample_count: 4e3, osrt_call_count: 0}}]\n    expect: []\n")
    from nsys_diagnose.authoring.ruletest import load_test_file

    _, [case] = load_test_file(path, RULES, FACTS)
    assert case["rows"]["capture_traces"] == [{"cpu_sample_count": 4000, "osrt_call_count": 0}]


TEXT_AGAINST_NUMBER = """\
id: acme/busy-sync
title: Busy sync
category: api-latency
severity: warning
fact: sync_overview
when:
  - sync_calls > 0
  - most_frequent_api > 5
message: "{{ row.sync_calls }} syncs"
why: Because.
remediation: [Sync less.]
"""


def test_a_condition_that_cannot_compare_its_values_is_a_rule_error_and_null_does_not_hold(tmp_path):
    """Text ordered against a number would silently never fire; NULL (not measured) just does not hold."""
    from nsys_diagnose.diagnosis.evaluate import ConditionError, evaluate
    from nsys_diagnose.diagnosis.rules import load_rule_file
    from nsys_diagnose.diagnosis.ruleset import RuleSet
    from nsys_diagnose.authoring.ruletest import inline_facts

    path = tmp_path / "busy-sync.yaml"
    path.write_text(TEXT_AGAINST_NUMBER)
    rule = load_rule_file(path, FACTS, str(tmp_path))
    rules = RuleSet.resolve({rule.id: rule})
    quiet = evaluate(rules, inline_facts({"sync_overview": [{"sync_calls": 10, "most_frequent_api": None}]}, FACTS))
    assert quiet.findings == [] and [o.rule for o in quiet.passed] == [rule.id]
    with pytest.raises(ConditionError) as err:
        evaluate(rules, inline_facts({"sync_overview": [{"sync_calls": 10,
                                                         "most_frequent_api": "cudaDeviceSynchronize"}]}, FACTS))
    assert str(err.value) == (f'{path}:8:5: rule "acme/busy-sync": condition `most_frequent_api > 5` cannot compare '
                              f"'cudaDeviceSynchronize' (text) with 5.0 (a number); compare a column with a value of "
                              f"its own type")


INLINE_ROWS = INLINE[INLINE.index("    rows:"):INLINE.index("    expect:")]
INLINE_EXPECT = INLINE[INLINE.index("    expect:"):]


@pytest.mark.parametrize("old, new, message", [
    (INLINE_ROWS, "    scenario: eager_decod\n",
     "4:5: case 1: unknown scenario 'eager_decod'; did you mean 'eager_decode'?"),
    (INLINE_ROWS, "    scenario: multi_rank_straggler\n",
     "4:5: case 1: scenario 'multi_rank_straggler' is a multi-rank run, but rule 'launch-bound' judges one profile; "
     "cross-rank rules carry `scope: run`"),
    (INLINE_ROWS, "    profile: missing.sqlite\n",
     "4:5: case 1: profile 'missing.sqlite' does not exist (relative to the test file)"),
    ("{subject: GPU 0, severity: warning,", "{subject: GPU 0, severity: warnin,",
     "9:26: case 1: unknown severity 'warnin'; did you mean 'warning'?"),
    ("{subject: GPU 0, severity: warning,", "{subject: GPU 0, severty: warning,",
     "9:26: case 1: each expected finding may name evidence, message, severity, subject; did you mean 'severity'?"),
    ("rule: launch-bound\n", "rule: launch-bound\nrules: []\n",
     "2:1: unknown key 'rules'; did you mean 'rule'?"),
    ("rule: launch-bound\n", "rule: launch-bound\nname: x\n",
     "2:1: unknown key 'name'; a rule test file has the keys 'rule' and 'cases'"),
])
def test_a_test_input_that_cannot_run_is_refused_when_the_file_loads(tmp_path, old, new, message):
    """`rules check` finds these (it loads the file), not only `rules test` at the case, without a place."""
    _refused_as(tmp_path, old, new, message)


def test_a_failed_case_prints_only_what_it_expects(tmp_path, capsys):
    from nsys_diagnose.cli.main import main

    path = tmp_path / "launch-bound.test.yaml"
    path.write_text(INLINE.replace(INLINE_EXPECT, "    expect: [{subject: GPU 1}]\n"))
    assert main(["rules", "test", str(path)]) == 1
    out = capsys.readouterr().out
    assert "       exp: [{'subject': 'GPU 1'}]\n" in out and "got: [{'subject': 'GPU 0', 'severity': 'warning'}]" in out


def test_rules_test_of_a_missing_file_names_the_file(tmp_path, capsys):
    """Not its directory, as if a rule pack were missing: the user mistyped the file."""
    from nsys_diagnose.cli.main import main

    gone = tmp_path / "no-such-pack" / "launch-bound.test.yaml"
    assert main(["rules", "test", str(gone)]) == 2
    assert capsys.readouterr().err.strip() == f"diagnose: error: {gone}: no such file or directory"


@pytest.mark.slow  # rules check compiles every fact first (seconds); the loader is checked in the fast tier above
def test_rules_check_checks_test_files_even_when_a_rule_file_is_broken(tmp_path, capsys):
    import shutil
    from pathlib import Path

    from nsys_diagnose.cli.main import main

    pack = tmp_path / "pack"
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "team-rules", pack)
    rule = pack / "decode-step-budget.yaml"
    rule.write_text(rule.read_text().replace("  - p90_step_ns > $max_p90_step", "  - p90_step > $max_p90_step"))
    test = pack / "communication-budget.test.yaml"
    test.write_text(test.read_text().replace("scenario: multi_gpu_straggler", "scenario: multi_gpu_stragler", 1))
    assert main(["rules", "check", str(pack)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{rule}:") and "has no column 'p90_step'" in line for line in out), out
    assert any(line.startswith(f"{test}:") and "unknown scenario 'multi_gpu_stragler'; did you mean "
               "'multi_gpu_straggler'?" in line for line in out), out
    assert f"note: {pack / 'decode-step-budget.test.yaml'}: not checked: its rule file decode-step-budget.yaml has " \
           f"errors" in out
    assert out[-1] == "checked 2 rule files: 2 errors"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal, quiet", [(True, False), (True, True), (False, False)])
def test_rules_test_shows_its_progress_on_a_terminal_only(tmp_path, monkeypatch, capsys, terminal, quiet):
    """Each case is announced on stderr, rewritten in place (as `diagnose` shows its stages); nothing under -q
    or when stderr is no terminal; the line is erased before the results are printed."""
    from nsys_diagnose.cli.main import main

    path = tmp_path / "launch-bound.test.yaml"
    path.write_text(INLINE)
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["rules", "test", str(path), *(["-q"] if quiet else [])]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out
    shown = err.getvalue()
    if terminal and not quiet:
        assert "\r\x1b[2K" in shown and "testing rule 1/1 launch-bound: case 1/1 just over the ratio" in shown
        assert shown.endswith("\r\x1b[2K")  # erased before the results
    else:
        assert shown == ""
