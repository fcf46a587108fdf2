from __future__ import annotations

import os
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest

# diagnose() keeps its caches (and the key that seals them) in the user's cache directory; the suite must not
# write into the home directory of whoever runs it, so XDG_CACHE_HOME points to a scratch directory for this
# session (subprocesses too), and a cache directory set in the environment is ignored.
_OWN_CACHE_DIR = tempfile.mkdtemp(prefix="nsys-diagnose-test-cache-")
os.environ["XDG_CACHE_HOME"] = _OWN_CACHE_DIR
os.environ.pop("NSYS_DIAGNOSE_CACHE_DIR", None)

REPO = Path(__file__).resolve().parents[1]
REAL_DIR = REPO.parent / "shared" / "real-profiles"
REAL_EXPORTS = sorted(REAL_DIR.glob("*.sqlite")) if REAL_DIR.is_dir() else []

# A test that reads the real-export corpus carries this mark (module-wide `pytestmark = requires_real`, or
# `@pytest.mark.real_exports` on the test). Such tests belong to the slow tier; without the corpus they are
# skipped with one reason, counted in one line at the end of the run, and under CI=true the run fails.
requires_real = pytest.mark.real_exports
CORPUS_ABSENT = (f"the real-export corpus {os.path.relpath(REAL_DIR, REPO)} is absent; put the nsys SQLite "
                 f"exports there to run these tests (CI=true makes this a failure)")


# ------------------------------------------------------------------------------------------------------------
# Two tiers. `pytest` runs the fast tier (pyproject.toml: addopts -m "not slow"), `pytest -m slow` the slow tier,
# `pytest --all` both: what CI runs (.ci/run). The slow tier holds
#   - every hypothesis property test (fuzzing), in any module;
#   - every test that reads the real-export corpus (marked `real_exports`; see requires_real above);
#   - the modules of SLOW_MODULES and the tests of SLOW_TESTS (every case of a parametrized one), below;
#   - the cases of a SAMPLED parametrized test other than the cases the fast tier keeps.
# What stays fast still covers every fact (single-sort invariants on sampled scenarios, the scenario
# expectations), every rule (.test.yaml cases on the generated scenarios), every renderer, the CLI end to end,
# the cache and its trust checks, output safety, multi-rank runs and one case of each sandbox.
# ------------------------------------------------------------------------------------------------------------
SLOW_MODULES = {
    "test_benchmark.py": "benchmark smoke: runs tools/benchmark.py end to end",
    "test_team_sandbox.py": "team SQL pushed to its limits (time, memory, rows, text, files), a diagnosis each",
    "test_capture_real.py": "captures a program with the real nsys, end to end (about 10 s; skipped without nsys)",
}
# Tests that take seconds each (CLI subprocesses, several diagnoses, a timeout waited out, memory filled) for a
# path a quicker test of the fast tier already walks. A name stands for every case of a parametrized test.
SLOW_TESTS = {
    "test_reports.py": ["test_html_in_headless_chromium", "test_cli_writes_the_html_report"],
    "test_timeline_excerpt.py": ["test_chromium_draws_the_profiles_own_events"],
    "test_cli_outputs.py": ["test_compare_writes_every_format_from_one_comparison"],
    "test_compare.py": ["test_cli_exit_codes"],
    "test_batch.py": ["test_a_worker_that_dies_is_an_internal_error_row_not_the_end_of_the_batch",
                      "test_a_stop_signal_stops_the_workers_and_leaves_nothing"],
    "test_batch_dask.py": ["test_a_worker_killed_mid_task_is_retried_then_an_internal_error_row",
                           "test_ctrl_c_stops_the_local_cluster_and_leaves_nothing",
                           "test_a_scheduler_that_goes_away_leaves_a_row_for_every_profile"],
    "test_cli.py": ["test_both_module_entry_points_run_every_command", "test_tokens_turn_time_into_throughput",
                    "test_rule_options_go_before_or_after_the_subcommand",
                    "test_a_file_named_like_a_command_is_a_profile", "test_config_file_in_working_directory_is_used"],
    "test_facts_cli.py": ["test_list_includes_team_facts_and_speaks_json",
                          "test_show_json_and_csv_carry_the_rows_diagnose_reports",
                          "test_fact_params_come_from_set_and_config", "test_show_computes_team_facts_and_helpers",
                          "test_show_writes_to_a_file_but_never_over_its_input",
                          "test_the_rows_of_a_cross_rank_fact_come_from_a_run",
                          "test_usage_errors_exit_2_with_the_usage_line", "test_a_broken_team_fact_is_one_sentence"],
    "test_cache.py": ["test_touching_the_profile_invalidates_the_cache",
                      "test_same_size_and_mtime_but_other_content_is_not_reused",
                      "test_damaged_cache_is_rebuilt_not_trusted", "test_a_cache_of_another_profile_is_not_used",
                      "test_no_cache_writes_nothing_anywhere", "test_default_cache_is_never_beside_the_profile",
                      "test_cache_beside_the_profile_is_opt_in",
                      "test_cache_dir_env_keeps_caches_out_of_the_profile_directory",
                      "test_unusable_cache_directory_means_no_cache", "test_long_profile_names_are_cached_too",
                      "test_ctrl_c_stops_promptly_and_leaves_no_temporary_files",
                      "test_full_cache_disk_falls_back_to_no_cache", "test_full_temporary_disk_is_one_sentence"],
    "test_cache_trust.py": ["test_a_sealed_cache_whose_tables_were_altered_is_refused",
                            "test_cache_directory_and_key_are_private",
                            "test_a_hot_journal_is_named_not_called_a_permissions_problem",
                            "test_a_cache_sealed_by_another_key_cannot_forge_the_verdict",
                            "test_cache_is_never_more_readable_than_the_profile",
                            "test_another_user_cannot_read_the_cache_of_a_private_profile",
                            "test_a_cache_planted_by_another_user_is_not_trusted",
                            "test_a_planted_directory_at_the_cache_path_means_no_cache",
                            "test_rows_committed_into_a_wal_are_read_not_a_stale_cache",
                            "test_a_symlink_switched_during_a_run_mixes_nothing",
                            "test_a_file_moved_over_the_profile_during_a_run_mixes_nothing"],
    "test_output_safety.py": ["test_output_onto_the_cache_of_the_input_is_refused",
                              "test_output_is_checked_again_right_before_writing",
                              "test_character_device_is_written_into_not_replaced", "test_block_device_is_refused",
                              "test_fifo_reader_gets_the_report", "test_unix_socket_is_sent_the_report",
                              "test_dash_is_standard_output", "test_standard_output_names_are_standard_output",
                              "test_symlink_output_writes_its_target_and_stays_a_link",
                              "test_new_report_gets_the_mode_the_umask_asks_for",
                              "test_replaced_report_keeps_its_mode_and_owner_and_is_private_while_written",
                              "test_interrupted_write_leaves_the_old_report_and_no_temporary_file"],
    "test_exits.py": ["test_timeout_leaves_nothing_behind", "test_leftovers_of_killed_runs_are_removed_by_the_next_run",
                      "test_leftovers_of_another_user_are_not_touched", "test_an_internal_error_in_compare_is_exit_3",
                      "test_exit_codes_are_documented_in_help", "test_too_little_address_space_is_one_sentence",
                      "test_running_out_of_memory_is_not_called_a_damaged_file"],
    "test_robustness.py": ["test_locked_database_is_one_sentence",  # waits out SQLite's busy timeout
                           "test_nsys_rep_is_converted_and_the_temporary_removed"],
    "test_input_validation.py": ["test_phase_patterns_are_checked_by_duckdb_which_runs_them",
                                 "test_empty_phases_are_an_error_and_an_empty_phases_key_keeps_the_defaults",
                                 "test_an_empty_profile_path_is_an_error_not_the_working_directory",
                                 "test_rank_files_given_one_by_one_are_checked_the_same"],
    "test_source_inputs.py": ["test_strings_stored_as_invalid_utf8_blobs_are_read_lossily",
                              "test_impossible_timestamps_are_dropped_and_counted"],
    "test_multirank.py": ["test_balanced_run_does_not_fire", "test_directory_input_equals_the_explicit_file_list",
                          "test_ranks_renamed_in_the_files_are_renumbered",
                          "test_a_rank_that_is_no_nsys_export_is_named_with_its_rank",
                          "test_one_file_keeps_the_single_profile_report",
                          "test_cli_terminal_summary_of_the_straggler_run",
                          "test_cli_fail_on_counts_cross_rank_and_rank_findings",
                          "test_set_tunes_the_cross_rank_rule_and_is_reported",
                          "test_team_rules_can_judge_runs_and_misplaced_facts_get_a_hint",
                          "test_json_output_validates_against_the_shipped_schema",
                          "test_hostile_file_names_are_inert_in_every_format", "test_ranks_are_diagnosed_side_by_side",
                          "test_workers_never_exceed_the_ranks_or_the_cpus"],
    "test_team_rules.py": ["test_example_pack_passes_its_tests",
                           "test_example_pack_rules_show_up_namespaced_in_list_and_reports",
                           "test_a_failing_case_prints_expected_and_got",
                           "test_broken_rules_get_one_precise_error_and_exit_2",
                           "test_malformed_yaml_points_at_the_line", "test_sandbox_error_names_the_rule",
                           "test_explain_shows_params_remediation_and_a_real_example",
                           "test_config_file_precedence_command_line_wins", "test_unknown_config_key_is_an_error",
                           "test_every_mistake_of_a_rule_file_is_listed_by_check_and_by_diagnose",
                           "test_rules_check_compiles_team_sql_and_points_at_the_typo",
                           "test_rules_check_reports_stale_and_missing_column_docs",
                           "test_rules_check_runs_a_team_facts_column_tests_over_an_empty_export"],
    "test_categories.py": ["test_a_team_pack_adds_a_category_and_its_findings_use_it",
                           "test_a_broken_categories_file_is_one_sentence_with_its_path"],
    "test_team_templates.py": ["test_label_and_remediation_templates_are_named_too",
                               "test_rules_check_lists_every_template_error_of_a_file",
                               "test_rules_check_lists_template_errors_beside_another_error",
                               "test_a_template_that_does_not_compile_stops_diagnose_before_the_profile_is_read",
                               "test_renders_in_threads_are_bounded_each_and_restore_the_trace_function"],
}
# Parametrized tests whose cases guard one mechanism each: the fast tier keeps the cases named here.
SAMPLED = {
    "test_fact_invariants.py::test_single_sort_facts_match_interval_merging_on_scenarios": ("prefill_decode_nvtx",),
    "test_reports.py::test_json_report_validates_against_the_schema": (
        "eager_decode", "multi_gpu_straggler", "memory_bound_metrics", "empty_capture"),
    "test_cli.py::test_bad_input_gets_one_sentence_and_exit_2": ("args1-did you mean 'max_overhead_ratio'",),
    "test_facts_cli.py::test_bad_input_is_one_sentence_and_exit_2": ("args0-parts0",),
    "test_output_safety.py::test_output_onto_the_input_profile_is_refused": ("symlink chain", "hard link"),
    "test_output_safety.py::test_output_onto_a_sqlite_side_file_of_the_input_is_refused": ("-wal",),
    "test_output_safety.py::test_output_where_no_file_can_go_is_refused_with_what_to_do": ("existing directory",),
    "test_output_safety.py::test_compare_output_onto_either_input_is_refused": ("before",),
    "test_output_safety.py::test_multi_rank_output_onto_a_rank_export_is_refused": ("files",),
    "test_exits.py::test_a_stop_signal_exits_128_plus_n_and_leaves_nothing": (
        "starting-15-143-stopped by SIGTERM", "reading CUPTI_ACTIVITY_KIND_KERNEL-2-130-interrupted"),
    "test_robustness.py::test_profile_untouched": ("success-md",),
    "test_robustness.py::test_a_wal_mode_export_gets_no_side_files": (
        "cache-no writer", "no-cache-writer with committed rows in the WAL"),
    "test_robustness.py::test_interrupted_write_keeps_the_old_report": ("replace",),
    "test_input_validation.py::test_a_profile_that_is_not_a_regular_file_is_refused_without_opening_it": (
        "link-to-fifo.sqlite-a FIFO (named pipe)",),
    "test_input_validation.py::test_a_run_directory_with_a_duplicate_or_unreadable_rank_is_refused": (
        "hard link-message0",),
    "test_multirank.py::test_bad_run_inputs_exit_2_with_one_sentence": ("duplicate-is given twice",),
    "test_team_rules.py::test_team_sql_cannot_escape_the_sandbox": ("file read",),
    "test_team_templates.py::test_a_misbehaving_message_template_is_one_sentence_naming_the_rule": (
        "''.__class__.__mro__",),
}
REAL_EXPORTS_MARK = "real_exports"


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", dest="run_all",
                     help="run the whole suite, fast and slow tiers (fuzzing, benchmark, Chromium, real exports): "
                          "what CI runs")


def pytest_configure(config):
    if config.getoption("run_all", False):
        if config.option.markexpr not in ("", "not slow"):
            raise pytest.UsageError("--all runs every test; use -m alone to choose by mark")
        config.option.markexpr = ""


def _slow_reason(item) -> str | None:
    if item.get_closest_marker(REAL_EXPORTS_MARK):
        return "reads the real-export corpus"
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        return "hypothesis property test (fuzzing)"
    module, function = item.path.name, getattr(item, "originalname", item.name)
    if module in SLOW_MODULES:
        return SLOW_MODULES[module]
    if function in SLOW_TESTS.get(module, ()):
        return "takes seconds for a path that a quicker test of the fast tier walks"
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.id not in SAMPLED.get(f"{module}::{function}", (callspec.id,)):
        return "a further case of a parametrized test the fast tier samples"
    return None


_TIERS = {"slow_deselected": 0, "corpus_skipped": set(), "stale": []}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the slow tier (before -m deselects by mark), and skip the real-export tests without the corpus."""
    seen: set[str] = set()
    for item in items:
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        seen.add(name)
        if callspec := getattr(item, "callspec", None):
            seen.add(f"{name}[{callspec.id}]")
            if any(isinstance(v, Path) and REAL_DIR in v.parents for v in callspec.params.values()):
                item.add_marker(pytest.mark.real_exports)  # parametrized over the corpus but left unmarked
        if reason := _slow_reason(item):
            item.add_marker(pytest.mark.slow(reason=reason))
        if item.get_closest_marker(REAL_EXPORTS_MARK) and not REAL_EXPORTS:
            # first, so that this reason wins over pytest's own "got empty parameter set"
            item.add_marker(pytest.mark.skip(reason=CORPUS_ABSENT), append=False)
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:  # the whole suite was collected
        named = [*(f"{m}::{f}" for m, fs in SLOW_TESTS.items() for f in fs), *SAMPLED,
                 *(f"{k}[{case}]" for k, v in SAMPLED.items() for case in v)]
        _TIERS["stale"] = [n for n in named if n not in seen]


def pytest_deselected(items):
    _TIERS["slow_deselected"] += sum(1 for i in items if i.get_closest_marker("slow"))


def pytest_runtest_logreport(report):
    if report.skipped and report.when == "setup" and isinstance(report.longrepr, tuple) \
            and report.longrepr[2].endswith(CORPUS_ABSENT):
        _TIERS["corpus_skipped"].add(report.nodeid)


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    write = terminalreporter.write_line
    if skipped := len(_TIERS["corpus_skipped"]):
        prefix = "FAILED (CI requires the corpus): " if _ci() else ""
        write(f"{prefix}{skipped} tests skipped: {CORPUS_ABSENT}", red=_ci(), yellow=not _ci(), bold=True)
    if _TIERS["slow_deselected"] and config.option.markexpr == "not slow":
        write(f"fast tier: {_TIERS['slow_deselected']} slow tests not run (fuzzing, benchmark, Chromium, real "
              f"exports, long CLI cases); `pytest -m slow` runs them, `pytest --all` runs everything")
    if _TIERS["stale"]:
        write("tests/conftest.py names tests that no longer exist: " + ", ".join(_TIERS["stale"]), red=True)


def pytest_sessionfinish(session, exitstatus):
    """The suite's caches and generated scenarios are scratch: remove them (tens of MB per run)."""
    if _ci() and _TIERS["corpus_skipped"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    import shutil

    for d in [_OWN_CACHE_DIR, *_SCENARIO_DIR, *_CLEANUP]:
        if d:
            shutil.rmtree(d, ignore_errors=True)
    import subprocess

    for user in _CREATED_USERS:
        subprocess.run(["userdel", user], capture_output=True)


def real(fragment: str) -> Path:
    """The real export whose file name contains `fragment`."""
    matches = [p for p in REAL_EXPORTS if fragment in p.name]
    if len(matches) != 1:
        pytest.skip(f"real export matching {fragment!r} not available")
    return matches[0]


def rounded(value, digits: int):
    """`value` (numbers, lists and dicts of them) with every float cut to `digits` significant digits, for
    comparing results whose last bits may differ between machines or between runs."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


def sqlite_ro(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con


def table_exists(con: sqlite3.Connection, table: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


def raw_count(path: Path, table: str, where: str = "") -> int:
    with sqlite_ro(path) as con:
        if not table_exists(con, table):
            return 0
        return con.execute(f'SELECT count(*) FROM "{table}" {where}').fetchone()[0]


_ANALYSES: dict = {}


_SCENARIO_DIR: list[Path] = []
_CLEANUP: list[Path] = []
_CREATED_USERS: list[str] = []


def scenario_analysis(name: str):
    """(facts, report) of a generated fixture scenario, computed once per test session."""
    import tempfile

    from nsys_diagnose.fixtures.generator import generate

    if not _SCENARIO_DIR:
        _SCENARIO_DIR.append(Path(tempfile.mkdtemp(prefix="nsys-diagnose-scenarios-")))
    path = _SCENARIO_DIR[0] / f"{name}.sqlite"
    if str(path) not in _ANALYSES:
        generate(name, path)
    return analysis(path)


def analysis(path: Path):
    """(facts, report) of an export, computed once per test session: several test modules read them."""
    key = str(path)
    if key not in _ANALYSES:
        from nsys_diagnose.api import build_report
        from nsys_diagnose.diagnosis.config import Config
        from nsys_diagnose.facts.compute import compute_facts
        from nsys_diagnose.facts import load_facts
        from nsys_diagnose.diagnosis.rules import load_rules
        from nsys_diagnose.reading.export import open_export

        fact_defs = load_facts()
        rules = load_rules(fact_defs)
        with open_export(path) as export:
            facts = compute_facts(export, facts=fact_defs)
            report = build_report(export, facts, rules, Config(), fact_defs)
        _ANALYSES[key] = (facts, report)
    return _ANALYSES[key]


@pytest.fixture
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh user cache directory (XDG_CACHE_HOME) for this test, the default location; its key is read
    afresh."""
    from nsys_diagnose.reading import cache as store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(store.CACHE_DIR_ENV, raising=False)
    store.cache_secret.cache_clear()
    yield tmp_path / "xdg" / "nsys-diagnose"
    store.cache_secret.cache_clear()


OTHER_USER = "nsys-diagnose-other"


@pytest.fixture(scope="session")
def other_user() -> tuple[int, int]:
    """(uid, gid) of a second, unprivileged user, for the cases where another user on a shared machine plants
    files or tries to read ours. Created when the suite runs as root (as in CI); skipped, with the reason
    printed, where that is impossible."""
    import pwd
    import shutil
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("the cross-user cases need root to create a second user; this suite runs unprivileged")
    try:
        entry = pwd.getpwnam(OTHER_USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            pytest.skip("the cross-user cases need `useradd` to create a second user, and it is not installed")
        done = subprocess.run([useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot create a second user for the cross-user cases: {done.stderr.strip()}")
        _CREATED_USERS.append(OTHER_USER)  # removed again at the end of the session
        entry = pwd.getpwnam(OTHER_USER)
    return entry.pw_uid, entry.pw_gid


def run_as(user: tuple[int, int], command: list[str], **kwargs):
    """Run `command` as `user` (uid, gid) with no supplementary groups."""
    import subprocess

    uid, gid = user
    return subprocess.run(command, user=uid, group=gid, extra_groups=[], capture_output=True, text=True, **kwargs)


def shared_directory() -> Path:
    """A directory every user may write, with the sticky bit, like /tmp."""
    d = Path(tempfile.mkdtemp(prefix="nsys-diagnose-shared-"))
    d.chmod(0o1777)
    _CLEANUP.append(d)  # removed at the end of the session
    return d


def start_and_wait_for(command: list[str], stage: str, ready_file: Path, *, timeout: float = 120,
                       **popen) -> "subprocess.Popen[str]":
    """Start a command-line run and return once it has reached `stage` (the first line it announces that starts
    with it: "starting", "reading CUPTI_ACTIVITY_KIND_KERNEL", "computing fact", see engine/cli/interrupt.py), so
    a test signals at a known point of the run instead of after a guessed delay, which a loaded machine turns into
    another point. Fails when the run ends or times out before it gets there."""
    import time

    env = {**popen.pop("env", os.environ), "NSYS_DIAGNOSE_TEST_READY_FILE": str(ready_file)}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reached = ready_file.read_text().splitlines() if ready_file.exists() else []
        if any(line.startswith(stage) for line in reached):
            return proc
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run ended (exit {proc.returncode}) before it reached {stage!r}; it reached "
                        f"{reached[-3:]}; stderr: {err[-500:]}")
        time.sleep(0.005)
    proc.kill()
    proc.communicate()
    pytest.fail(f"the run did not reach {stage!r} within {timeout} s")
