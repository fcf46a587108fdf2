"""What the diagnosis says about every generated scenario, pinned in one small, reviewable data file.

tests/expected/scenarios.yaml records, for each scenario of fixtures/generator.py, the verdict (primary
category, rule, subject), the rules that fire with their severity and subject, and the key metrics (the
report's `metrics`, floats to 4 significant digits). A change in the engine, a fact or a rule shows up here
as a few readable lines ("eager_decode: rule launch-bound (GPU 0) no longer fires",
"eager_decode: gpu_utilization 0.3736 → 0.39") rather than as a whole-report diff.

Only the rules that fire are recorded: a new rule that stays quiet on every scenario needs no change here,
one that fires adds one line under the scenarios it fires on. After a deliberate change, regenerate the file
and review its diff: `make regen` (engine/authoring/regen.py writes it with summarise() and expectations_text(),
the functions this test compares with).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from nsys_diagnose.authoring.regen import EXPECTATIONS_HEADER, expectations_text, summarise
from nsys_diagnose.fixtures.generator import SCENARIOS

from conftest import scenario_analysis, slow_but

EXPECTED = Path(__file__).parent / "expected" / "scenarios.yaml"
REL_TOL = 1e-3  # a float is recorded to 4 significant digits: rounding alone moves it by at most 5e-4
HINT = "if the change is intended, regenerate the file and review its diff: make regen"


# ------------------------------------------------------------------------------------------------------------
# the readable diff
# ------------------------------------------------------------------------------------------------------------
def _show(value: Any) -> str:
    return "none" if value is None else str(value)


def _finding_name(f: dict[str, Any]) -> str:
    return f"{f['rule']} ({f['subject']})" if f.get("subject") else f["rule"]


def _same(expected: Any, got: Any) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected == got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if isinstance(expected, float) or isinstance(got, float):
            return math.isclose(expected, got, rel_tol=REL_TOL, abs_tol=1e-12)
    return expected == got


def differences(name: str, expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """One readable line per change between the recorded summary of scenario `name` and the current one."""
    lines: list[str] = []
    want_verdict, got_verdict = expected.get("verdict") or {}, got["verdict"]
    for key in ("primary", "rule", "subject"):
        if want_verdict.get(key) != got_verdict.get(key):
            lines.append(f"{name}: verdict {key} {_show(want_verdict.get(key))} → {_show(got_verdict.get(key))}")

    def keyed(findings):
        return {(f["rule"], f.get("subject")): f for f in findings or []}

    want_findings, got_findings = keyed(expected.get("findings")), keyed(got["findings"])
    for key, f in want_findings.items():
        if key not in got_findings:
            lines.append(f"{name}: rule {_finding_name(f)} no longer fires (was {f['severity']})")
        elif got_findings[key]["severity"] != f["severity"]:
            lines.append(f"{name}: rule {_finding_name(f)} severity {f['severity']} → {got_findings[key]['severity']}")
    for key, f in got_findings.items():
        if key not in want_findings:
            lines.append(f"{name}: rule {_finding_name(f)} now fires ({f['severity']})")

    want_metrics, got_metrics = expected.get("metrics") or {}, got["metrics"]
    for key, value in want_metrics.items():
        if key not in got_metrics:
            lines.append(f"{name}: metric {key} is gone (was {_show(value)})")
        elif not _same(value, got_metrics[key]):
            lines.append(f"{name}: {key} {_show(value)} → {_show(got_metrics[key])}")
    for key, value in got_metrics.items():
        if key not in want_metrics:
            lines.append(f"{name}: new metric {key} = {_show(value)}")
    return lines


# ------------------------------------------------------------------------------------------------------------
# the data file
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def expected() -> dict[str, dict[str, Any]]:
    assert EXPECTED.is_file(), f"{EXPECTED} is missing; {HINT}"
    return yaml.safe_load(EXPECTED.read_text(encoding="utf-8")) or {}


@pytest.mark.parametrize("name", slow_but(sorted(SCENARIOS), "eager_decode", "memory_bound_metrics"))
def test_scenario_diagnosis_is_as_recorded(expected, name):
    got = summarise(scenario_analysis(name)[1])
    if name not in expected:
        pytest.fail(f"{name}: not recorded in {EXPECTED.name} yet; {HINT}")
    lines = differences(name, expected[name], got)
    if lines:
        pytest.fail("the diagnosis of a generated scenario changed:\n  " + "\n  ".join(lines) + f"\n{HINT}",
                    pytrace=False)


def test_every_recorded_scenario_still_exists(expected):
    stale = sorted(set(expected) - set(SCENARIOS))
    assert not stale, f"recorded in {EXPECTED.name} but no longer generated: {', '.join(stale)}; {HINT}"


def test_the_data_file_is_written_as_regeneration_would_write_it(expected):
    """The recorded file round-trips: regenerating without a change gives a byte-identical file, so a diff
    of scenarios.yaml shows only what changed."""
    assert expectations_text(expected) == EXPECTED.read_text(encoding="utf-8"), \
        f"{EXPECTED.name} was edited by hand; {HINT}"
    assert EXPECTED.read_text(encoding="utf-8").startswith(EXPECTATIONS_HEADER)


def test_differences_read_as_sentences():
    before = {"verdict": {"primary": "launch-bound", "rule": "launch-bound", "subject": "GPU 0"},
              "findings": [{"rule": "launch-bound", "severity": "warning", "subject": "GPU 0"},
                           {"rule": "low-utilization", "severity": "warning", "subject": "GPU 0"}],
              "metrics": {"gpu_utilization": 0.41, "kernel_count": 7325, "mean_gap_ns": None, "old": 1}}
    after = {"verdict": {"primary": None, "rule": None, "subject": None},
             "findings": [{"rule": "low-utilization", "severity": "info", "subject": "GPU 0"},
                          {"rule": "new-rule", "severity": "warning", "subject": None}],
             "metrics": {"gpu_utilization": 0.39, "kernel_count": 7325, "mean_gap_ns": None, "new": 2.5}}
    assert differences("eager_decode", before, after) == [
        "eager_decode: verdict primary launch-bound → none",
        "eager_decode: verdict rule launch-bound → none",
        "eager_decode: verdict subject GPU 0 → none",
        "eager_decode: rule launch-bound (GPU 0) no longer fires (was warning)",
        "eager_decode: rule low-utilization (GPU 0) severity warning → info",
        "eager_decode: rule new-rule now fires (warning)",
        "eager_decode: gpu_utilization 0.41 → 0.39",
        "eager_decode: metric old is gone (was 1)",
        "eager_decode: new metric new = 2.5",
    ]
    # within the tolerance of 4 significant digits: no change
    assert differences("x", before, {**before, "metrics": {**before["metrics"], "gpu_utilization": 0.41012}}) == []
