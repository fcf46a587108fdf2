"""Fact tests (`NAME.test.yaml` beside `NAME.sql`): every bundled one passes, a wrong expected value fails and says
what differs, a mistake in a case is one FILE:LINE:COL sentence, and `diagnose facts test` runs a team pack's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nsys_diagnose.cli.main import main
from nsys_diagnose.authoring.facttest import (
    FactTestError,
    bundled_fact_tests,
    find_fact_tests,
    load_fact_test,
    run_fact_tests,
    fact_test_file,
)
from nsys_diagnose.facts.loading import load_facts

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / "examples" / "team-rules"
FACTS = load_facts()
FILES = bundled_fact_tests()


def test_the_subtle_facts_have_tests():
    tested = {f.name.removesuffix(".test.yaml") for f in FILES}
    assert {"kernel_gaps", "launch_overhead", "gpu_utilization", "sync_summary", "copy_summary", "phases"} <= tested
    assert all(fact_test_file(FACTS[name]) in FILES for name in tested)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.removesuffix(".test.yaml"))
def test_bundled_fact_cases(path):
    results = run_fact_tests([path], FACTS)
    failures = [f"{r.name}: {r.problem}\n  expected {r.expected}\n  got      {r.got}" for r in results if not r.passed]
    assert not failures, "\n".join(failures)
    assert results


GAPS = """\
fact: kernel_gaps
cases:
  - name: two kernels 4 µs apart
    tables:
      kernels:
        - {start_ns: 0, end_ns: 1000, device_id: 0, stream_id: 7, name: gemm}
        - {start_ns: 5000, end_ns: 6000, device_id: 0, stream_id: 7, name: gemm}
    expect:
      - {device_id: 0, stream_id: null, gap_count: 1, total_gap_ns: 4000}
      - {device_id: 0, stream_id: 7, gap_count: 1, total_gap_ns: 4000}
"""


def write(tmp_path: Path, text: str) -> Path:
    """A one-fact pack: kernel_gaps' test beside a copy of its SQL (a fact test sits beside its fact)."""
    pack = tmp_path / "pack"
    pack.mkdir(exist_ok=True)
    path = pack / "kernel_gaps.test.yaml"
    path.write_text(text)
    return path


def test_a_wrong_expected_value_fails_and_shows_the_rows(tmp_path):
    path = write(tmp_path, GAPS.replace("stream_id: 7, gap_count: 1, total_gap_ns: 4000",
                                        "stream_id: 7, gap_count: 1, total_gap_ns: 4001"))
    [result] = run_fact_tests([path], FACTS)
    assert not result.passed
    assert result.problem == "no row matches expected row 2"
    assert {"device_id": 0, "stream_id": 7, "gap_count": 1, "total_gap_ns": 4000} in result.got


def test_rows_match_in_any_order_unless_ordered(tmp_path):
    swapped = GAPS.replace("      - {device_id: 0, stream_id: null, gap_count: 1, total_gap_ns: 4000}\n", "") \
        + "      - {device_id: 0, stream_id: null, gap_count: 1, total_gap_ns: 4000}\n"
    assert run_fact_tests([write(tmp_path, swapped)], FACTS)[0].passed
    [ordered] = run_fact_tests([write(tmp_path, swapped + "    ordered: true\n")], FACTS)
    assert not ordered.passed and ordered.problem == "row 1 differs"


def test_a_missing_row_is_a_count_mismatch(tmp_path):
    path = write(tmp_path, GAPS.replace("      - {device_id: 0, stream_id: 7, gap_count: 1, total_gap_ns: 4000}\n", ""))
    [result] = run_fact_tests([path], FACTS)
    assert result.problem == "2 rows, expected 1"


@pytest.mark.parametrize("old, new, message", [
    ("      kernels:", "      kernel:",
     "5:7: case 1: no canonical table 'kernel'; did you mean 'kernels'?"),
    ("stream_id: 7, name: gemm}\n        - {start_ns: 5000", "stream: 7, name: gemm}\n        - {start_ns: 5000",
     "6:53: case 1: canonical table 'kernels' has no column 'stream'; did you mean 'stream_id'?"),
    ("{start_ns: 5000,", "{start_ns: 5 µs,", "7:12: case 1: kernels.start_ns is a whole number, not '5 µs'"),
    ("gap_count: 1, total_gap_ns: 4000}\n      - {device_id: 0, stream_id: 7",
     "gaps: 1, total_gap_ns: 4000}\n      - {device_id: 0, stream_id: 7",
     "9:41: case 1: fact 'kernel_gaps' has no column 'gaps'; its columns are device_id, stream_id, kernel_count, "
     "gap_count, total_gap_ns, mean_gap_ns, p50_gap_ns, p90_gap_ns, p99_gap_ns, gaps_over_threshold, "
     "host_wait_gap_ns, other_gap_ns"),
    ("    tables:", "    params: {gap_threshold: 5}\n    tables:",
     "4:14: case 1: fact 'kernel_gaps' and the facts it needs have no param 'gap_threshold'; did you mean "
     "'gap_threshold_ns'?"),
    ("    tables:", "    tabels:", "4:5: case 1: unknown key 'tabels'; did you mean 'tables'?"),
    ("fact: kernel_gaps", "fact: kernel_gap", "1:1: no fact 'kernel_gap'; did you mean 'kernel_gaps'?"),
    ("fact: kernel_gaps\n", "fact: kernel_gaps\ncase: []\n", "2:1: unknown key 'case'; did you mean 'cases'?"),
    ("fact: kernel_gaps\n", "fact: kernel_gaps\nrule: x\n",
     "2:1: unknown key 'rule'; a fact test file has the keys 'fact' and 'cases'"),
])
def test_a_mistake_in_a_case_is_one_sentence_with_its_place(tmp_path, old, new, message):
    assert old in GAPS
    path = write(tmp_path, GAPS.replace(old, new))
    with pytest.raises(FactTestError) as err:
        load_fact_test(path, FACTS)
    assert str(err.value) == f"{path}:{message}"


def test_diagnose_facts_test_runs_a_team_packs_fact_tests(tmp_path, capsys):
    assert main(["facts", "test", str(PACK)]) == 0
    out = capsys.readouterr().out
    assert "ok   acme_decode_steps: decode steps of 1, 2 and 3 ms" in out and out.endswith("2 passed, 0 failed\n")

    pack = tmp_path / "pack"
    shutil.copytree(PACK, pack)
    test = pack / "acme_decode_steps.test.yaml"
    test.write_text(test.read_text().replace("step_count: 3", "step_count: 4"))
    assert main(["facts", "test", str(test)]) == 1
    out = capsys.readouterr().out
    assert "FAIL acme_decode_steps: decode steps of 1, 2 and 3 ms" in out and "got: [{'pid': 7, 'step_count': 3" in out

    test.write_text(test.read_text().replace("text: decode,", "txt: decode,", 1))
    assert main(["facts", "test", str(pack)]) == 2
    err = capsys.readouterr().err
    assert err == (f"diagnose: error: {test}:8:79: case 1: canonical table 'nvtx_ranges' has no column 'txt'; did "
                   f"you mean 'text'?\n")


def test_diagnose_facts_test_by_name_and_what_it_refuses(capsys):
    assert main(["facts", "test", "copy_summary"]) == 0
    assert capsys.readouterr().out.endswith("2 passed, 0 failed\n")
    assert main(["facts", "test", "kernel_gap"]) == 2
    assert "no fact 'kernel_gap'; did you mean 'kernel_gaps'?" in capsys.readouterr().err
    rule_test = REPO / "rules" / "launch-bound" / "launch-bound.test.yaml"
    assert main(["facts", "test", str(rule_test)]) == 2
    assert "not a fact test" in capsys.readouterr().err


@pytest.mark.slow  # rules check compiles every fact first (seconds); the fast tier checks the same loader above
def test_rules_check_finds_the_mistakes_of_a_packs_fact_tests(tmp_path, capsys):
    pack = tmp_path / "pack"
    shutil.copytree(PACK, pack)
    test = pack / "acme_decode_steps.test.yaml"
    test.write_text(test.read_text().replace("nvtx_ranges:", "nvtx_range:", 1))
    assert main(["rules", "check", str(pack)]) == 2
    assert capsys.readouterr().out.splitlines()[0] == (f"{test}:6:7: case 1: no canonical table 'nvtx_range'; did "
                                                       f"you mean 'nvtx_ranges'?")


def test_a_number_yaml_reads_as_text_fits_a_number_column(tmp_path):
    """PyYAML reads 5e3 as text; the case means the number, as the reader would store it."""
    assert "{start_ns: 5000," in GAPS
    [result] = run_fact_tests([write(tmp_path, GAPS.replace("{start_ns: 5000,", "{start_ns: 5e3,"))], FACTS)
    assert result.passed, result.got


def test_a_missing_path_is_no_such_file(tmp_path):
    with pytest.raises(FactTestError) as err:
        find_fact_tests([tmp_path / "gone.test.yaml"])
    assert str(err.value) == f"{tmp_path / 'gone.test.yaml'}: no such file or directory"
