"""Bad configuration and bad inputs are one sentence on stderr and exit code 2: never a traceback, a hang or a
quiet wrong answer (a NaN threshold that silently turns a rule off, a rank counted twice, a rank left out)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nsys_diagnose.runs.api import load_rule_set
from nsys_diagnose.diagnosis.ruleset import RuleSet
from nsys_diagnose.cli.main import main
from nsys_diagnose.diagnosis.config import Config, apply_set
from nsys_diagnose.base.errors import InputError
from nsys_diagnose.fixtures.runs import generate_run
from nsys_diagnose.reading.ranks import resolve_run

from conftest import REAL_EXPORTS, slow_but

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"
TEAM_RULES = REPO / "examples" / "team-rules"
HANG = 60  # seconds: far beyond a refusal, which takes about one; a read of a FIFO would block forever


@pytest.fixture(autouse=True)
def _cache_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("NSYS_DIAGNOSE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "eager_decode.sqlite"
    shutil.copy(EXAMPLE, path)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """Four rank exports of one size and different contents."""
    target = tmp_path_factory.mktemp("run") / "balanced"
    generate_run("multi_rank_balanced", target)
    return target


def one_sentence(stderr: str, prog: str = "diagnose") -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), stderr
    return lines[0]


def cli(*args: str | Path, cwd: Path | None = None, timeout: float = 300) -> str:
    """Run `diagnose ARGS` in a fresh process, which must fail with exit code 2; its one line of stderr."""
    try:
        p = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", *map(str, args)], capture_output=True,
                           text=True, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"diagnose {' '.join(map(str, args))} still ran after {timeout} s (it hangs)")
    assert p.returncode == 2, p.stdout + p.stderr
    return one_sentence(p.stderr, "diagnose compare" if args[0] == "compare" else "diagnose")


def in_process(capsys, *args: str | Path) -> str:
    """`diagnose ARGS` in this process (fast, for errors found before any export is read)."""
    code = main([*map(str, args), "-q", "--no-cache"] if args[0] != "rules" else list(map(str, args)))
    err = capsys.readouterr().err
    assert code == 2, err
    return one_sentence(err)


# --- diagnose.yaml / --config ---------------------------------------------------------------------------------
BAD_CONFIGS = [
    ("rule_dirs: 5", "rule_dirs must be a list of directories, not the value 5; write e.g. `rule_dirs: ["),
    ("rule_dirs: [5]", "rule_dirs holds 5, which is not a directory path; write e.g."),
    ("rule_dirs: {ci: rules}", "rule_dirs must be a list of directories, not a mapping"),
    ("rule_dirs: ci/nsys-rules", "rule_dirs must be a list of directories, not the text 'ci/nsys-rules'"),
    ("rules: [a, b]", "rules must be a mapping, not a list; write e.g. `rules: {launch-bound: {"),
    ("facts: [1]", "facts must be a mapping, not a list; write e.g. `facts: {gap_threshold_ns: 5000}`"),
    ("rules: {launch-bound: [1]}", "rules.launch-bound must be a mapping, not a list; write e.g."),
    ("rules: {launch-bound: {enabled: 'no'}}", "rules.launch-bound.enabled must be true or false, got 'no'"),
    ("phases: {decode: 5}", "phases.decode must be a regular expression in quotes, not 5"),
    ('phases: {5: "(?i)decode"}', "phases has the key 5, which is not a name"),
    ("5", "the config must be a mapping of rules, facts, phases and rule_dirs, not the value 5; write e.g."),
    ("[rules, facts]", "the config must be a mapping of rules, facts, phases and rule_dirs, not a list"),
    ("facts: {gap_threshold_ns: .nan}", "facts.gap_threshold_ns: expected a finite number, got nan"),
    ("rules: {launch-bound: {max_overhead_ratio: .inf}}",
     "rules.launch-bound.max_overhead_ratio: expected a finite number, got inf; to turn the rule off, write "
     "`enabled: false` under rules.launch-bound"),
    ("rules: {launch-bound: {max_overhead_ratio: -.inf}}", "expected a finite number, got -inf"),
    ("rules: {launch-bound: {max_overhead_ratio: .NaN}}", "expected a finite number, got nan"),
]


@pytest.mark.parametrize("text, message", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_malformed_config_file_is_one_sentence_naming_the_file_and_the_key(capsys, tmp_path, profile, text,
                                                                            message):
    config = tmp_path / "team.yaml"
    config.write_text(text + "\n")
    line = in_process(capsys, profile, "--config", config)
    assert line.startswith(f"diagnose: error: {config}: ") and message in line


@pytest.mark.parametrize("text, message", [
    ("rule_dirs: 5", "rule_dirs must be a list of directories"),
    ("phases: {}", "phases is empty"),
    ("rules: {launch-bound: {max_overhead_ratio: .nan}}", "expected a finite number"),
])
def test_the_config_read_from_the_working_directory_is_checked_the_same(capsys, tmp_path, monkeypatch, profile,
                                                                         text, message):
    (tmp_path / "diagnose.yaml").write_text(text + "\n")
    monkeypatch.chdir(tmp_path)
    line = in_process(capsys, profile)
    assert line.startswith("diagnose: error: diagnose.yaml: ") and message in line


def test_a_config_that_is_not_utf8_is_one_sentence(capsys, tmp_path, monkeypatch, profile):
    (tmp_path / "diagnose.yaml").write_bytes("phases: {decode: \"décodage\"}\n".encode("latin-1"))
    monkeypatch.chdir(tmp_path)
    line = in_process(capsys, profile)
    assert line == "diagnose: error: diagnose.yaml: not UTF-8 text (byte 20 is 0xe9); save the configuration as UTF-8"


def test_a_directory_given_as_config_is_one_sentence(capsys, tmp_path, profile):
    line = in_process(capsys, profile, "--config", tmp_path)
    assert line == (f"diagnose: error: {tmp_path} is a directory; give --config the path of a YAML file such as "
                    f"diagnose.yaml")


def test_a_fifo_given_as_config_is_refused_without_reading_it(tmp_path, profile):
    fifo = tmp_path / "diagnose.yaml"
    os.mkfifo(fifo)
    line = cli(profile, "--config", fifo, "-q", "--no-cache", timeout=HANG)
    assert f"{fifo} is not a regular file; give --config the path of a YAML file" in line


@pytest.mark.slow
def test_phase_patterns_are_checked_by_duckdb_which_runs_them(capsys, tmp_path, monkeypatch, profile):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "diagnose.yaml"
    for pattern, problem in [("(?<=step)decode", "invalid perl operator: (?<"), ("(decode", "missing ): (decode")]:
        config.write_text(f'phases: {{decode: "{pattern}"}}\n')  # look-behind: Python's `re` takes it, RE2 not
        line = in_process(capsys, profile)
        assert line == (f"diagnose: error: diagnose.yaml: phases.decode: {pattern!r} is not a regular expression "
                        f"DuckDB accepts ({problem}); patterns are RE2 syntax (no look-behind or back-references), "
                        f'e.g. "(?i)(^|[^a-z])decode([^a-z]|$)"')
    config.write_text('phases: {decode: "(?i)\\\\pN*decode", prefill: "(?i)prefill"}\n')  # RE2 only: \pN
    assert main([str(profile), "-q", "--no-cache"]) == 0, capsys.readouterr().err


@pytest.mark.slow
def test_empty_phases_are_an_error_and_an_empty_phases_key_keeps_the_defaults(capsys, tmp_path, monkeypatch,
                                                                              profile):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "diagnose.yaml").write_text("phases: {}\n")
    line = in_process(capsys, profile)
    assert line == ('diagnose: error: diagnose.yaml: phases is empty, and phase detection cannot be turned off; list '
                    'at least one pattern, e.g. `phases: {decode: "(?i)(^|[^a-z])decode([^a-z]|$)"}`, or remove the '
                    'key to use the default patterns')
    (tmp_path / "diagnose.yaml").write_text("phases:\nrule_dirs:\nfacts:\nrules:\n")
    assert main([str(profile), "-q", "--no-cache"]) == 0, capsys.readouterr().err


# --- non-finite numbers ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_set_refuses_a_non_finite_threshold(capsys, profile, value):
    line = in_process(capsys, profile, "--set", f"launch-bound.max_overhead_ratio={value}")
    assert line == (f"diagnose: error: --set launch-bound.max_overhead_ratio={value}: expected a finite number, "
                    f"got '{value}'; to turn the rule off, write launch-bound.enabled=false")


def test_set_refuses_a_non_finite_fact_param(capsys, profile):
    line = in_process(capsys, profile, "--set", "facts.gap_threshold_ns=nan")
    assert line == "diagnose: error: --set facts.gap_threshold_ns=nan: expected a finite number, got 'nan'"


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "nan"])
def test_a_rule_file_with_a_non_finite_default_is_refused(capsys, tmp_path, profile, value):
    pack = shutil.copytree(TEAM_RULES, tmp_path / "pack")
    rule = pack / "communication-budget.yaml"
    rule.write_text(rule.read_text().replace("default: 0.15", f"default: {value}"))
    line = in_process(capsys, profile, "--rule-dir", pack)
    assert line.startswith(f"diagnose: error: {rule}:")
    assert "params.max_comm_share.default" in line and "the default must be a finite number" in line


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_a_fact_file_with_a_non_finite_param_default_is_refused(capsys, tmp_path, profile, value):
    (tmp_path / "pack").mkdir()
    fact = tmp_path / "pack" / "acme_min_steps.sql"
    fact.write_text(f"-- @fact acme_min_steps\n-- @doc A threshold.\n-- @param min_steps {value}\n"
                    f"-- @column n The threshold.\nSELECT ${{min_steps}} AS n\n")
    line = in_process(capsys, profile, "--rule-dir", tmp_path / "pack")
    assert line == (f"diagnose: error: {fact}: @param min_steps needs a finite numeric default, not '{value}'; "
                    f"write a number such as 10000")


@pytest.mark.parametrize("key, value", [("params", "{max_overhead_ratio: .nan}"), ("facts", "{gap_threshold_ns: .inf}"),
                                        ("params", "{max_overhead_ratio: lots}")])
def test_a_rule_test_case_with_a_non_finite_param_is_refused(capsys, tmp_path, key, value):
    test = tmp_path / "launch-bound.test.yaml"
    test.write_text(f"rule: launch-bound\ncases:\n  - name: never fires\n    scenario: eager_decode\n"
                    f"    {key}: {value}\n    expect: []\n")
    line = in_process(capsys, "rules", "test", test)
    # file:line:col of the offending value's key: line 5, inside the flow mapping
    assert line.startswith(f"diagnose: error: {test}:5:{len(key) + 8}: case 1: {key}.")
    assert "must be a finite number, not" in line


# --- params out of their range ---------------------------------------------------------------------------------
OUT_OF_RANGE = [
    ("launch-bound.max_overhead_ratio=-1",
     "launch-bound.max_overhead_ratio must be between 0 and 1 (unit: ratio), not -1; `diagnose rules explain "
     "launch-bound` describes it"),
    ("launch-bound.min_kernels=-5",
     "launch-bound.min_kernels must be at least 0 (unit: count), not -5; `diagnose rules explain launch-bound` "
     "describes it"),
    ("memory-bound.min_dram_pct=120",
     "memory-bound.min_dram_pct must be between 0 and 100 (unit: percent), not 120; `diagnose rules explain "
     "memory-bound` describes it"),
    ("facts.warmup_share=5", "facts.warmup_share must be between 0 and 1, not 5"),
    ("facts.gap_threshold_ns=-1000", "facts.gap_threshold_ns must be at least 0, not -1000"),
    ("facts.timeline_bins=0", "facts.timeline_bins must be between 1 and 10000, not 0"),
]


@pytest.mark.parametrize("assignment, message", OUT_OF_RANGE, ids=[a for a, _ in OUT_OF_RANGE])
def test_set_refuses_a_value_outside_the_params_range(capsys, profile, assignment, message):
    line = in_process(capsys, profile, "--set", assignment)
    assert line == f"diagnose: error: --set {assignment}: {message}"


def test_a_config_file_value_outside_the_range_names_the_file_and_key(capsys, tmp_path, profile):
    config = tmp_path / "diagnose.yaml"
    config.write_text("rules:\n  launch-bound:\n    max_overhead_ratio: 1.5\nfacts:\n  warmup_share: 0.2\n")
    line = in_process(capsys, profile, "--config", config)
    assert line == (f"diagnose: error: {config}: rules.launch-bound.max_overhead_ratio: "
                    f"launch-bound.max_overhead_ratio must be between 0 and 1 (unit: ratio), not 1.5; "
                    f"`diagnose rules explain launch-bound` describes it")
    config.write_text("facts:\n  warmup_share: -0.5\n")
    line = in_process(capsys, profile, "--config", config)
    assert line == (f"diagnose: error: {config}: facts.warmup_share: facts.warmup_share must be between 0 and 1, "
                    f"not -0.5")


def test_the_limits_of_a_range_and_a_declared_unbounded_ratio_are_accepted(profile):
    """A ratio of two counts (blocking calls per kernel) declares `max: .inf`: 3 per kernel is a valid threshold."""
    fact_defs, rules = load_rule_set(Config())
    config = Config()
    for assignment in ("launch-bound.max_overhead_ratio=1", "launch-bound.min_kernels=0", "facts.warmup_share=0",
                       "frequent-synchronization.min_calls_per_kernel=3", "facts.timeline_bins=10000"):
        apply_set(config, assignment)
    RuleSet.from_config(rules, config, fact_defs)  # raises on any value out of range
    assert rules["frequent-synchronization"].spec.params["min_calls_per_kernel"].range_text == "at least 0"


@pytest.mark.slow
def test_a_rule_file_whose_default_is_outside_its_range_is_a_rule_error(capsys, tmp_path, profile):
    pack = shutil.copytree(TEAM_RULES, tmp_path / "pack")
    rule = pack / "communication-budget.yaml"
    text = rule.read_text()
    rule.write_text(text.replace("default: 0.15", "default: 1.5"))  # a ratio param, so 0-1 unless declared
    assert main(["rules", "check", "--rule-dir", str(pack)]) == 2
    assert capsys.readouterr().out.startswith(
        f"{rule}:8:3: rule \"acme/communication-budget\": params.max_comm_share: the default 1.5 is outside the "
        f"param's range (between 0 and 1); change the default, or declare the range with min/max\n")
    line = in_process(capsys, profile, "--rule-dir", pack)  # a diagnosis with the pack stops the same way
    assert line.startswith(f"diagnose: error: {rule}:8:3: ") and "the default 1.5 is outside" in line
    rule.write_text(text.replace("default: 0.15", "default: 0.15, min: 0.2, max: 0.5"))  # its own declared range
    assert main(["rules", "check", "--rule-dir", str(pack)]) == 2
    assert "the default 0.15 is outside the param's range (between 0.2 and 0.5)" in capsys.readouterr().out
    rule.write_text(text.replace("default: 0.15", "default: 1.5, max: 2"))  # declared wider: a valid rule
    assert main(["rules", "check", "--rule-dir", str(pack)]) == 0
    capsys.readouterr()
    line = in_process(capsys, profile, "--rule-dir", pack, "--set", "acme/communication-budget.max_comm_share=2.5")
    assert "acme/communication-budget.max_comm_share must be between 0 and 2 (unit: ratio), not 2.5" in line


@pytest.mark.parametrize("header, message", [
    ("-- @param min_share 1.5", ":3:4: @param min_share: the default 1.5 is outside its range (between 0 and 1); "
                                "change the default or declare `range LO HI`"),
    ("-- @param min_steps 5 range 10 inf", ":3:4: @param min_steps: the default 5 is outside its range (at least 10)"),
    ("-- @param min_steps 5 range 10", ":3:4: @param min_steps: after the default, write `range LO HI`"),
    ("-- @param min_steps 5 between 1 9", ":3:4: @param min_steps: after the default, write `range LO HI`"),
])
def test_a_fact_file_whose_param_default_is_outside_its_range_is_refused(capsys, tmp_path, profile, header, message):
    (tmp_path / "pack").mkdir()
    fact = tmp_path / "pack" / "acme_min_steps.sql"
    name = header.split()[2]
    fact.write_text(f"-- @fact acme_min_steps\n-- @doc A threshold.\n{header}\n"
                    f"-- @column n The threshold.\nSELECT ${{{name}}} AS n\n")
    line = in_process(capsys, profile, "--rule-dir", tmp_path / "pack")
    assert line.startswith(f"diagnose: error: {fact}{message}")


@pytest.mark.slow
def test_rules_explain_and_facts_list_show_each_params_range(capsys):
    assert main(["rules", "explain", "launch-bound"]) == 0
    out = capsys.readouterr().out
    assert "max_overhead_ratio = 0.3 ratio (between 0 and 1)" in out and "min_kernels = 20 count (at least 0)" in out
    assert main(["facts", "list"]) == 0
    out = capsys.readouterr().out
    assert "warmup_share=0.1 (between 0 and 1), top_apis=3 (at least 1)" in out
    assert main(["facts", "list", "-f", "json"]) == 0
    [listed] = [f for f in json.loads(capsys.readouterr().out) if f["name"] == "allocation_overview"]
    assert listed["param_ranges"] == {"warmup_share": [0, 1], "top_apis": [1, None]}  # None: no upper limit


def test_rules_explain_shows_the_settings_in_force_and_where_each_was_made(capsys, tmp_path):
    config = tmp_path / "diagnose.yaml"
    config.write_text("rules:\n  launch-bound:\n    max_overhead_ratio: 0.2\n    severity: error\n")
    assert main(["rules", "explain", "launch-bound", "--config", str(config),
                 "--set", "launch-bound.min_kernels=50"]) == 0
    out = capsys.readouterr().out
    assert f"max_overhead_ratio = 0.2 ratio ({config}; default 0.3; between 0 and 1)" in out
    assert "min_kernels = 50 count (--set; default 20; at least 0)" in out
    assert f"severity error ({config}; default warning)" in out
    assert "min_launch_idle_share = 0.5 ratio (between 0 and 1)" in out  # not set: the default, no origin
    line = in_process(capsys, "rules", "explain", "launch-bound", "--set", "launch-bound.max_overhed=0.2")
    assert line == ("diagnose: error: --set launch-bound.max_overhed=0.2: rule 'launch-bound' has no param "
                    "'max_overhed'; did you mean 'max_overhead_ratio'?")


def test_a_rule_test_case_with_a_param_outside_its_range_is_refused(capsys, tmp_path):
    test = tmp_path / "launch-bound.test.yaml"
    test.write_text("rule: launch-bound\ncases:\n  - name: never fires\n    scenario: eager_decode\n"
                    "    params: {min_kernels: -1}\n    expect: []\n")
    line = in_process(capsys, "rules", "test", test)
    assert line == (f"diagnose: error: {test}:5:14: case 1: params.min_kernels must be at least 0 (unit: count), "
                    f"not -1")


# --- profile paths -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_an_empty_profile_path_is_an_error_not_the_working_directory(tmp_path, profile):
    shutil.copy(profile, tmp_path / "rank0.sqlite")  # the working directory holds exports: "" must not mean it
    shutil.copy(EXAMPLE.with_name("healthy_prefill.sqlite"), tmp_path / "rank1.sqlite")
    for args in ([""], ["", profile], [profile, ""]):
        line = cli(*args, "-q", "--no-cache", cwd=tmp_path)
        assert "profile path is empty; give the path of an nsys SQLite export" in line
    line = cli("compare", "", profile, "--no-cache", cwd=tmp_path)
    assert line == ("diagnose compare: error: the profile path is empty; give the path of an nsys SQLite export, "
                    "e.g. run.sqlite.")


@pytest.fixture(scope="module")
def special_dir() -> Path:
    base = Path(tempfile.mkdtemp(prefix="nsd-"))  # short: a socket's path holds at most 107 bytes
    os.mkfifo(base / "fifo.sqlite")
    os.mkfifo(base / "fifo.nsys-rep")  # a report would be handed to nsys, which would block on it
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(base / "socket.sqlite"))
    server.close()
    (base / "link-to-fifo.sqlite").symlink_to(base / "fifo.sqlite")
    (base / "zero.sqlite").symlink_to("/dev/zero")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("name, kind", [
    pytest.param("fifo.sqlite", "a FIFO (named pipe)", marks=pytest.mark.slow),
    ("link-to-fifo.sqlite", "a FIFO (named pipe)"),
    pytest.param("fifo.nsys-rep", "a FIFO (named pipe)", marks=pytest.mark.slow),
    pytest.param("socket.sqlite", "a socket", marks=pytest.mark.slow),
    pytest.param("zero.sqlite", "a character device", marks=pytest.mark.slow),
    pytest.param("/dev/zero", "a character device", marks=pytest.mark.slow),
])
def test_a_profile_that_is_not_a_regular_file_is_refused_without_opening_it(special_dir, name, kind):
    path = special_dir / name  # an absolute name stays itself
    if not path.exists():
        pytest.skip(f"{path} is not available here")
    line = cli(path, "-q", "--no-cache", timeout=HANG)
    assert line == (f"diagnose: error: {path} is not a regular file but {kind}; give the path of an nsys SQLite "
                    f"export file (`nsys export --type sqlite --output run.sqlite report.nsys-rep`).")


# --- multi-rank runs ---------------------------------------------------------------------------------------------
def _run_with(tmp_path: Path, run_dir: Path, extra: str) -> Path:
    """Two rank exports, and `extra`: a third entry named like a rank export."""
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(run_dir / f"rank{r}.sqlite", d / f"rank{r}.sqlite")
    if extra == "hard link":
        os.link(d / "rank1.sqlite", d / "rank2.sqlite")
    elif extra == "copy":
        shutil.copy(d / "rank0.sqlite", d / "rank2.sqlite")
    elif extra == "directory":
        (d / "rank3.sqlite").mkdir()
    elif extra == "dangling link":
        (d / "rank5.sqlite").symlink_to(tmp_path / "gone" / "rank5.sqlite")
    elif extra == "fifo":
        os.mkfifo(d / "rank2.sqlite")
    return d


@pytest.mark.parametrize("extra, message", slow_but([
    ("hard link", "{d}/rank1.sqlite and {d}/rank2.sqlite are the same file (hard links, or two paths to one file); "
                  "give each rank's export once."),
    ("copy", "{d}/rank0.sqlite and {d}/rank2.sqlite have identical contents, so they cannot be two ranks of one run; "
             "give each rank's own export (one rank's export was probably copied twice)."),
    ("directory", "{d}/rank3.sqlite is named like a rank export but is a directory; remove or rename it, or give "
                  "the rank exports as files (diagnose RANK0.sqlite RANK1.sqlite ...)."),
    ("dangling link", "{d}/rank5.sqlite is named like a rank export but is a symbolic link to a missing file ("),
    ("fifo", "{d}/rank2.sqlite is named like a rank export but is a FIFO (named pipe); remove or rename it"),
], "hard link"))
def test_a_run_directory_with_a_duplicate_or_unreadable_rank_is_refused(tmp_path, run_dir, extra, message):
    d = _run_with(tmp_path, run_dir, extra)
    line = cli(d, "-q", "--no-cache", timeout=HANG)
    assert line.startswith("diagnose: error: " + message.format(d=d))


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    ("hard link", "rank1.sqlite and {d}/rank2.sqlite are the same file (hard links, or two paths to one file)"),
    ("copy", "rank0.sqlite and {d}/rank2.sqlite have identical contents, so they cannot be two ranks of one run"),
    ("fifo", "rank2.sqlite is not a regular file but a FIFO (named pipe)"),
])
def test_rank_files_given_one_by_one_are_checked_the_same(tmp_path, run_dir, extra, message):
    d = _run_with(tmp_path, run_dir, extra)
    line = cli(d / "rank0.sqlite", d / "rank1.sqlite", d / "rank2.sqlite", "-q", "--no-cache", timeout=HANG)
    assert message.format(d=d) in line


def test_only_identical_contents_are_refused_not_exports_of_one_size(tmp_path, run_dir):
    assert len({p.stat().st_size for p in run_dir.iterdir()}) == 1  # compared byte by byte, and all differ
    assert [r.rank for r in resolve_run([run_dir])[0]] == [0, 1, 2, 3]
    d = _run_with(tmp_path, run_dir, "copy")
    with pytest.raises(InputError, match="have identical contents"):
        resolve_run([d / "rank2.sqlite", d / "rank1.sqlite", d / "rank0.sqlite"])


def test_a_dangling_link_is_refused_unless_it_is_a_report_beside_its_export(tmp_path, run_dir):
    d = _run_with(tmp_path, run_dir, "")
    (d / "rank0.nsys-rep").symlink_to(tmp_path / "moved" / "rank0.nsys-rep")  # rank0.sqlite beside it is read
    assert [r.path.name for r in resolve_run([d])[0]] == ["rank0.sqlite", "rank1.sqlite"]
    (d / "rank2.nsys-rep").symlink_to(tmp_path / "moved" / "rank2.nsys-rep")  # rank 2 would be left out
    with pytest.raises(InputError, match=r"rank2\.nsys-rep is named like a rank export but is a symbolic link"):
        resolve_run([d])


# Exports that are not the ranks of one run: each case edits one rank of a generated 4-rank run (in a copy).
TEN_MINUTES_NS = 600 * 10**9
NOT_ONE_RUN = [
    ("nsys version", "UPDATE META_DATA_EXPORT SET value = '2023.4.4.54' WHERE name = 'EXPORT_PRODUCT_VERSION'",
     "{d}/rank0.sqlite was recorded by nsys 2024.6.2.225 and {d}/rank2.sqlite by nsys 2023.4.4.54"),
    ("session start", f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + {TEN_MINUTES_NS}",
     "the capture of {d}/rank0.sqlite started at 2024-12-10 19:48:59 UTC and that of {d}/rank2.sqlite at "
     "2024-12-10 19:58:59 UTC, 10 minutes later (the ranks of one run start within 5 minutes of each other)"),
    ("same process", "UPDATE TARGET_INFO_CUDA_CONTEXT_INFO SET processId = 51204; "
                     "UPDATE TARGET_INFO_GPU SET uuid = 'GPU-5f1c0000-8d2e-4b7a-9c61-0a3e7d2b0000'",
     "{d}/rank0.sqlite and {d}/rank2.sqlite both hold process 51204 on one machine (the same GPUs), so they are "
     "one process profiled twice, not two ranks"),
]


def _run_edited(tmp_path: Path, run_dir: Path, sql: str) -> Path:
    d = tmp_path / "run"
    shutil.copytree(run_dir, d)
    con = sqlite3.connect(d / "rank2.sqlite")
    con.executescript(sql)
    con.close()
    return d


@pytest.mark.parametrize("what, sql, message", NOT_ONE_RUN, ids=[c[0] for c in NOT_ONE_RUN])
def test_exports_that_are_not_ranks_of_one_run_are_refused_pointing_to_batch(tmp_path, run_dir, what, sql,
                                                                             message):
    d = _run_edited(tmp_path, run_dir, sql)
    with pytest.raises(InputError) as refused:
        resolve_run([d])
    text = str(refused.value)
    assert text.startswith(message.format(d=d)), text
    assert text.endswith("these look like independent profiles, not the ranks of one run: diagnose each on its "
                         "own, or all of them with `diagnose batch` (one row per profile, no cross-rank "
                         "comparison).")
    with pytest.raises(InputError, match="`diagnose batch`"):  # the same when the files are given one by one
        resolve_run(sorted(d.iterdir()))


def test_not_one_run_is_one_sentence_and_exit_2_before_any_rank_is_read(tmp_path, run_dir):
    d = _run_edited(tmp_path, run_dir, NOT_ONE_RUN[1][1])
    line = cli(d, "--no-cache", timeout=HANG)
    assert "the capture of" in line and "`diagnose batch`" in line
    assert sorted(p.name for p in d.iterdir()) == [f"rank{r}.sqlite" for r in range(4)]  # nothing beside them


def test_ranks_of_one_run_whose_sessions_start_minutes_apart_are_one_run(tmp_path, run_dir):
    """Launchers start ranks seconds apart, a slow one minutes: 4 minutes is within the 5-minute tolerance."""
    d = _run_edited(tmp_path, run_dir, "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + "
                                       f"{240 * 10**9}")
    assert [(r.rank, r.path.name) for r in resolve_run([d])[0]] == [(r, f"rank{r}.sqlite") for r in range(4)]


@pytest.mark.real_exports
def test_a_directory_of_unrelated_real_exports_is_not_one_run(tmp_path):
    """Every real export of the corpus (nine nsys versions, T4 to H200), linked into one directory."""
    d = tmp_path / "corpus"
    d.mkdir()
    for export in REAL_EXPORTS:
        (d / export.name).symlink_to(export)
    line = cli(d, "--no-cache", timeout=HANG)
    assert " by nsys " in line and "these look like independent profiles, not the ranks of one run" in line
    assert "`diagnose batch`" in line
    # the two GindaChen 2-GPU windows share one nsys version but were captured 42 hours apart
    pair = sorted(p for p in REAL_EXPORTS if p.name.startswith("GindaChen") and "DERIVED-window" in p.name)
    if len(pair) == 2:
        line = cli(*pair, "--no-cache", timeout=HANG)
        assert "started at 2026-05-24 13:40:14 UTC" in line and "42 hours later" in line
