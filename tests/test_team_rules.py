"""Teams add and tune rules without forking: precise errors for broken rules, sandboxed team SQL."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cli_in_process import run_cli
from conftest import slow_but

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / "examples" / "team-rules"
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"

GOOD_RULE = """\
id: acme/slow-decode
title: Slow decode kernels
category: launch-bound
severity: warning
fact: launch_overhead
params:
  max_ratio: {default: 0.5, unit: ratio, doc: Overhead ratio budget.}
when:
  - overhead_ratio > $max_ratio
message: "GPU {{ row.device_id }} overhead {{ row.overhead_ratio }}"
why: Because.
remediation: [Use CUDA graphs.]
"""


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd)


def pack(tmp_path: Path, rule_text: str, name: str = "slow-decode.yaml", sql: str | None = None) -> Path:
    d = tmp_path / "pack"
    d.mkdir(exist_ok=True)
    (d / name).write_text(rule_text)
    if sql is not None:
        (d / "team_fact.sql").write_text(sql)
    return d


@pytest.mark.slow
def test_example_pack_passes_its_tests():
    p = run("rules", "test", str(PACK))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == "6 passed, 0 failed"


@pytest.mark.slow
def test_example_pack_rules_show_up_namespaced_in_list_and_reports():
    listing = run("rules", "--rule-dir", str(PACK), "list")
    assert "acme/decode-step-budget" in listing.stdout and str(PACK) in listing.stdout
    report = run(str(EXAMPLE), "--rule-dir", str(PACK), "--set", "acme/decode-step-budget.max_p90_step=1",
                 "-f", "json")
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert "acme_decode_steps" in data["facts"]
    assert data["overrides"][0]["target"] == "acme/decode-step-budget.max_p90_step"


@pytest.mark.slow
def test_a_failing_case_prints_expected_and_got(tmp_path):
    d = tmp_path / "pack"
    # One rule of the example pack, with its fact: its cases diagnose two scenarios, not the pack's four.
    shutil.copytree(PACK, d, ignore=shutil.ignore_patterns("communication-budget.*"))
    test = d / "decode-step-budget.test.yaml"
    test.write_text(test.read_text().replace("expect: [{severity: warning}]", "expect: []"))
    p = run("rules", "test", str(d))
    assert p.returncode == 1
    assert "FAIL acme/decode-step-budget: a 2 ms budget is broken" in p.stdout
    assert "exp: []" in p.stdout and "got: [{'subject': 'pid" in p.stdout
    assert p.stdout.strip().splitlines()[-1] == "2 passed, 1 failed"


@pytest.mark.slow
@pytest.mark.parametrize("mutate, message", [
    (lambda t: t.replace("when:\n  - overhead_ratio", "when:\n - overhead_ratio: [\n"), ":1"),
    (lambda t: t.replace("overhead_ratio > $max_ratio", "overhead_ration > $max_ratio"),
     "slow-decode.yaml:9:5: rule \"acme/slow-decode\": fact 'launch_overhead' has no column 'overhead_ration'; "
     "did you mean 'overhead_ratio'?"),
    (lambda t: t.replace("unit: ratio", "unit: us"),
     "slow-decode.yaml:9:5: rule \"acme/slow-decode\": param $max_ratio is in 'us' but the column it is compared "
     "with is in 'ratio'"),
    (lambda t: t.replace("> $max_ratio", "> $max_raito"),
     "slow-decode.yaml:9:5: rule \"acme/slow-decode\": param $max_raito is not declared under params; "
     "did you mean 'max_ratio'?"),
    (lambda t: t.replace("id: acme/slow-decode", "id: slow-decode"), "team rule ids carry a namespace"),
    (lambda t: t + "sevrity: error\n", "unknown key 'sevrity'; did you mean 'severity'?"),
])
def test_broken_rules_get_one_precise_error_and_exit_2(tmp_path, mutate, message):
    d = pack(tmp_path, mutate(GOOD_RULE))
    check = run("rules", "check", str(d))
    assert check.returncode == 2
    assert message in check.stdout
    diag = run(str(EXAMPLE), "--rule-dir", str(d))
    assert diag.returncode == 2
    assert message in diag.stderr and len(diag.stderr.strip().splitlines()) == 1
    assert "Traceback" not in diag.stderr


@pytest.mark.slow
def test_malformed_yaml_points_at_the_line(tmp_path):
    d = pack(tmp_path, GOOD_RULE.replace("when:\n  - overhead_ratio > $max_ratio", "when: [overhead_ratio > 1"))
    p = run("rules", "check", str(d))
    assert p.returncode == 2 and "invalid YAML" in p.stdout and "slow-decode.yaml:" in p.stdout


SANDBOX_ESCAPES = {
    "file read": "SELECT * FROM read_csv('/etc/passwd')",
    "file write": "COPY (SELECT 1) TO '/tmp/nsys-diagnose-escape.csv'",
    "attach": "ATTACH '/tmp/nsys-diagnose-escape.db' AS x",
    "extension": "LOAD httpfs",
    "network": "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')",
    "settings": "SET enable_external_access = true",
    "glob": "SELECT * FROM glob('/etc/*')",
    "second statement": "SELECT 1 AS device_id; DROP TABLE kernels",
}


@pytest.mark.parametrize("what", slow_but(sorted(SANDBOX_ESCAPES), "file read"))
def test_team_sql_cannot_escape_the_sandbox(tmp_path, what):
    sql = f"-- @fact team_fact\n-- @doc Escape attempt.\n-- @column device_id x\n{SANDBOX_ESCAPES[what]}\n"
    rule = GOOD_RULE.replace("fact: launch_overhead", "fact: team_fact").replace(
        "overhead_ratio > $max_ratio", "device_id > 0").replace("params:\n  max_ratio: {default: 0.5, unit: ratio, "
                                                               "doc: Overhead ratio budget.}\n", "")
    d = pack(tmp_path, rule, sql=sql)
    p = run(str(EXAMPLE), "--rule-dir", str(d))
    assert p.returncode == 2, p.stdout
    err = p.stderr
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "team_fact" in err
    assert "sandbox" in err or "single SELECT" in err
    assert not Path("/tmp/nsys-diagnose-escape.csv").exists() and not Path("/tmp/nsys-diagnose-escape.db").exists()


@pytest.mark.slow
def test_sandbox_error_names_the_rule(tmp_path):
    sql = ("-- @fact team_fact\n-- @doc Reads a file.\n-- @column device_id x\n"
           "SELECT 1 AS device_id FROM read_csv('/etc/passwd')\n")
    rule = GOOD_RULE.replace("fact: launch_overhead", "fact: team_fact").replace(
        "overhead_ratio > $max_ratio", "device_id > 0")
    p = run(str(EXAMPLE), "--rule-dir", str(pack(tmp_path, rule, sql=sql)))
    assert p.returncode == 2
    assert "stopped by the sandbox" in p.stderr and "needed by rule acme/slow-decode" in p.stderr


def _bundled_rule_ids() -> list[str]:
    from nsys_diagnose.diagnosis.rules import load_rules
    from nsys_diagnose.facts.loading import load_facts

    return sorted(load_rules(load_facts(), scope=None))  # single-profile and cross-rank rules


@pytest.mark.parametrize("rule_id", slow_but(_bundled_rule_ids(), "launch-bound"))
def test_explain_shows_no_raw_jinja(rule_id):
    """Remediation steps and the example are rendered on the rule's example finding, or written with
    placeholders: a reader never sees `{% if row.graph_share ... %}`."""
    p = run_cli("rules", "explain", rule_id)
    assert p.returncode == 0, p.stderr
    assert "{%" not in p.stdout and "{{" not in p.stdout, p.stdout
    assert "Remediation" in p.stdout


def test_a_template_without_a_row_reads_with_placeholders():
    from nsys_diagnose.diagnosis.templating import readable

    assert readable("Use {{ row.graph_share | pct }} {% if row.x > 1 %}graphs{% else %}none{% endif %}{# c #} "
                    "under {{ params.max_ratio }}.") == "Use <graph_share> graphs none under <max_ratio>."


@pytest.mark.slow
def test_explain_shows_params_remediation_and_a_real_example():
    p = run("rules", "explain", "pcie-bound")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for part in ("What it detects", "Why it matters", "min_stall_fraction = 0.2 ratio", "Remediation",
                 "Example:", "[pageable_copies] GPU 0 spends"):
        assert part in out
    wrong = run("rules", "explain", "pcie-bond")
    assert wrong.returncode == 2 and "did you mean 'pcie-bound'" in wrong.stderr


@pytest.mark.slow
def test_config_file_precedence_command_line_wins(tmp_path):
    cfg = tmp_path / "team.yaml"
    cfg.write_text("rules:\n  launch-bound:\n    max_overhead_ratio: 0.9\n")
    from_file = json.loads(run(str(EXAMPLE), "--config", str(cfg), "-f", "json").stdout)
    assert not [f for f in from_file["findings"] if f["rule"] == "launch-bound"]
    both = json.loads(run(str(EXAMPLE), "--config", str(cfg), "--set", "launch-bound.max_overhead_ratio=0.3",
                          "-f", "json").stdout)
    assert [f for f in both["findings"] if f["rule"] == "launch-bound"]
    assert both["overrides"][0]["origin"] == "command line"


@pytest.mark.slow
def test_unknown_config_key_is_an_error(tmp_path):
    cfg = tmp_path / "diagnose.yaml"
    cfg.write_text("rulez: {}\n")
    p = run(str(EXAMPLE), cwd=tmp_path)
    assert p.returncode == 2 and "unknown key 'rulez'" in p.stderr


def test_yaml_object_tags_never_execute(tmp_path):
    marker = tmp_path / "pwned"
    payload = f'!!python/object/apply:os.system ["touch {marker}"]'
    d = pack(tmp_path, GOOD_RULE.replace("title: Slow decode kernels", f"title: {payload}"))
    check = run("rules", "check", str(d))
    assert check.returncode == 2 and "invalid YAML" in check.stdout
    (tmp_path / "diagnose.yaml").write_text(f"rules: {payload}\n")
    diag = run(str(EXAMPLE), cwd=tmp_path)
    assert diag.returncode == 2 and "invalid YAML" in diag.stderr and "Traceback" not in diag.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_every_mistake_of_a_rule_file_is_listed_by_check_and_by_diagnose(tmp_path):
    broken = (GOOD_RULE.replace("overhead_ratio > $max_ratio", "overhead_ration > $max_ratio")
              .replace("{{ row.device_id }}", "{{ row.device_id | pcent }}") + "sevrity: error\n")
    d = pack(tmp_path, broken)
    f = d / "slow-decode.yaml"
    where = f'{f}:{{}}: rule "acme/slow-decode": '
    expected = [
        where.format("9:5") + "fact 'launch_overhead' has no column 'overhead_ration'; did you mean 'overhead_ratio'?",
        where.format("10:1") + "its message template uses the unknown filter 'pcent'; did you mean 'percent'?",
        where.format("13:1") + "unknown key 'sevrity'; did you mean 'severity'?",
    ]
    check = run("rules", "check", str(d))
    assert check.returncode == 2
    assert check.stdout.splitlines() == [*expected, "checked 1 rule file: 3 errors"]
    diag = run(str(EXAMPLE), "--rule-dir", str(d))
    assert diag.returncode == 2 and "Traceback" not in diag.stderr
    assert diag.stderr.splitlines() == [f"diagnose: error: {e}" for e in expected]


TEAM_FACT = """\
-- @fact team_fact
-- @doc Kernel time per device.
-- @column device_id CUDA device.
-- @column kernel_count Kernels.
-- @column stale_ns A column the query no longer returns.
-- @check kernel_count not_null
SELECT device_id,
       count(*) AS kernel_count,
       sum(dur_ns) AS total_ns
FROM kernels
GROUP BY device_id
"""
TEAM_RULE = GOOD_RULE.replace("fact: launch_overhead", "fact: team_fact").replace(
    "overhead_ratio > $max_ratio", "kernel_count > 0").replace("params:\n  max_ratio: {default: 0.5, unit: ratio, "
                                                               "doc: Overhead ratio budget.}\n", "").replace(
    " overhead {{ row.overhead_ratio }}", "")


@pytest.mark.slow
def test_rules_check_compiles_team_sql_and_points_at_the_typo(tmp_path):
    d = pack(tmp_path, TEAM_RULE, sql=TEAM_FACT.replace("sum(dur_ns)", "sum(durr_ns)"))
    check = run("rules", "check", str(d))
    assert check.returncode == 2, check.stdout
    sql = d / "team_fact.sql"
    assert check.stdout.splitlines()[0].startswith(
        f"{sql}:9:12: fact 'team_fact' does not compile: Binder Error: Referenced column \"durr_ns\" not found")
    assert check.stdout.splitlines()[-1] == "checked 1 rule file: 1 error"


@pytest.mark.slow
def test_rules_check_reports_stale_and_missing_column_docs(tmp_path):
    d = pack(tmp_path, TEAM_RULE, sql=TEAM_FACT)
    check = run("rules", "check", str(d))
    sql = d / "team_fact.sql"
    assert check.returncode == 2
    assert check.stdout.splitlines() == [
        f"{sql}:5:1: fact 'team_fact' declares column 'stale_ns', which its query does not return; did you mean "
        f"'total_ns'?",
        f"{sql}:5:1: fact 'team_fact' returns column 'total_ns', which no @column declares; add "
        f"`-- @column total_ns DESCRIPTION`",
        "checked 1 rule file: 2 errors",
    ]
    (d / "team_fact.sql").write_text(
        TEAM_FACT.replace("stale_ns A column the query no longer returns", "total_ns Time"))
    fixed = run("rules", "check", str(d))
    assert fixed.returncode == 0, fixed.stdout


@pytest.mark.slow
def test_rules_check_runs_a_team_facts_column_tests_over_an_empty_export(tmp_path):
    sql = ("-- @fact team_fact\n-- @doc Kernels.\n-- @column device_id GPU.\n-- @column kernel_count Kernels.\n"
           "-- @column busiest Busiest GPU.\n-- @check busiest not_null\n"
           "SELECT 0 AS device_id, count(*) AS kernel_count, max(device_id) AS busiest FROM kernels\n")
    d = pack(tmp_path, TEAM_RULE, sql=sql)
    check = run("rules", "check", str(d))
    assert check.returncode == 2
    assert check.stdout.splitlines() == [
        f"{d / 'team_fact.sql'}:6:1: team_fact.busiest: not_null failed on an empty export: row 0 "
        f"{{'device_id': 0, 'kernel_count': 0, 'busiest': None}}",
        "checked 1 rule file: 1 error",
    ]


def test_rules_check_of_the_bundled_rules_and_facts_passes():
    check = run("rules", "check")
    assert check.returncode == 0, check.stdout
    assert check.stdout.splitlines()[-1].endswith(": 0 errors")


@pytest.mark.slow
def test_a_bundled_fact_with_a_typo_would_be_caught(tmp_path):
    """check_facts compiles bundled facts too; one is copied with a typo under another name."""
    from nsys_diagnose.facts.loading import load_facts
    from nsys_diagnose.facts.catalog import parse_fact
    from nsys_diagnose.facts.compile_check import check_facts

    facts = load_facts()
    source = Path(facts["launch_overhead"].path).read_text(encoding="utf-8")
    broken = source.replace("-- @fact launch_overhead", "-- @fact launch_overhead_copy").replace(
        "JOIN kernel_gaps g", "JOIN kernel_gap g")
    facts["launch_overhead_copy"] = parse_fact(broken, "copy.sql")
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "JOIN kernel_gap g" in text)
    assert check_facts(facts) == [f"copy.sql:{line}:6: fact 'launch_overhead_copy' does not compile: Catalog Error: "
                                  f"Table with name kernel_gap does not exist! Did you mean \"kernel_gaps\"?"]


@pytest.mark.slow
def test_a_team_fact_requiring_an_unknown_column_is_one_sentence(tmp_path):
    sql = ("-- @fact team_fact\n-- @doc Needs a column.\n-- @requires devices.smcount\n-- @column device_id x\n"
           "SELECT device_id FROM devices\n")
    rule = GOOD_RULE.replace("fact: launch_overhead", "fact: team_fact").replace("overhead_ratio > $max_ratio",
                                                                                "device_id > $max_ratio")
    p = run(str(EXAMPLE), "--rule-dir", str(pack(tmp_path, rule, sql=sql)), "--no-cache")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "@requires devices.smcount: no canonical column devices.smcount" in p.stderr
    assert "Traceback" not in p.stderr
