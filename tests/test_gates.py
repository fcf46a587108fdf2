"""`diagnose compare --fail-on-regression` gates: each form (percentage points, percent, absolute, time units,
optional) fires past its threshold, passes within it, and refuses what could never fire or cannot be evaluated.

Most tests evaluate gates on hand-written before/after values (check_gates); the profile-level ones reuse the
session's cached scenario reports, and the CLI runs in-process on those reports (no diagnosis, no subprocess).
"""

from __future__ import annotations

import json

import pytest
from conftest import scenario_analysis
from nsys_diagnose.cli import compare as comparecli, main as cli
from nsys_diagnose.runs.compare import compare
from nsys_diagnose.runs.gates import GateError, check_gates, known_metrics, parse_gate
from nsys_diagnose.reports.render import render


def gate(spec: str, before: float | None, after: float | None):
    """The outcome of one gate on one metric's before and after values."""
    g = parse_gate(spec, known_metrics())
    return check_gates([g], {g.metric: before}, {g.metric: after})[0]


def refused(spec: str) -> str:
    with pytest.raises(GateError) as caught:
        parse_gate(spec, known_metrics())
    return str(caught.value)


# ---------------------------------------------------------------------------------------------------------------
# Percentage points: a 0-1 metric's change × 100
# ---------------------------------------------------------------------------------------------------------------
def test_points_gate_fires_when_utilisation_falls_more_points_than_allowed():
    g = gate("gpu_utilization:-5pt", 0.80, 0.72)
    assert (g.unit, g.threshold, g.relative) == ("points", 5.0, False)
    assert g.crossed and g.observed == pytest.approx(-8.0)
    assert g.message == "gpu_utilization fell 8 pt (80.0 % → 72.0 %), beyond the allowed -5 pt"


def test_points_gate_passes_at_exactly_its_threshold_despite_float_rounding():
    g = gate("gpu_utilization:-5pt", 0.65, 0.60)  # 0.65 - 0.60 is 0.05000000000000004
    assert not g.crossed and g.message.endswith("within the allowed -5 pt")
    assert gate("overhead_ratio:+5pt", 0.10, 0.14).crossed is False  # 4 pt up on a 0-1 ratio


def test_points_on_a_metric_that_is_not_0_to_1_is_a_usage_error():
    message = refused("kernel_count:+5pt")
    assert "'pt' (percentage points) applies only to 0-1 metrics" in message
    assert "kernel_count:+5% (relative) or kernel_count:+5 (absolute, a count)" in message


# ---------------------------------------------------------------------------------------------------------------
# Percent of the before value
# ---------------------------------------------------------------------------------------------------------------
def test_percent_gate_fires_relative_to_the_before_value():
    g = gate("gpu_utilization:-5%", 0.80, 0.72)  # 8 pt is 10 % of 0.80
    assert (g.unit, g.relative) == ("percent", True)
    assert g.crossed and g.observed == pytest.approx(-10.0)
    assert g.message == "gpu_utilization fell 10 % (80.0 % → 72.0 %), beyond the allowed -5 %"


def test_percent_gate_passes_within_its_share_of_the_before_value():
    g = gate("gpu_utilization:-5%", 0.80, 0.78)
    assert not g.crossed and g.observed == pytest.approx(-2.5)
    assert not gate("launch_calls:+5%", 1000, 900).crossed  # moved the good way


def test_percent_gate_on_a_before_value_of_0_is_an_error_unless_optional():
    with pytest.raises(GateError, match=r"'sync_calls:\+5%': the before value of sync_calls is 0, so a change in % "
                                        r"of it is undefined; use an absolute gate such as sync_calls:\+N"):
        gate("sync_calls:+5%", 0, 3)
    g = gate("sync_calls?:+5%", 0, 3)
    assert g.optional and not g.crossed and g.observed is None
    assert "not evaluated (optional), the before value of sync_calls is 0" in g.message


# ---------------------------------------------------------------------------------------------------------------
# Absolute, in the metric's own unit
# ---------------------------------------------------------------------------------------------------------------
def test_absolute_gate_fires_on_a_change_in_the_metrics_own_unit():
    g = gate("overhead_ratio:+0.05", 0.10, 0.20)
    assert (g.unit, g.threshold) == ("absolute", 0.05)
    assert g.crossed and g.message == "overhead_ratio rose 0.1 (0.10 → 0.20), beyond the allowed +0.05"
    assert gate("launch_calls:+100", 1000, 1250).message == \
        "launch_calls rose 250 (1,000 → 1,250), beyond the allowed +100"


def test_absolute_gate_passes_within_its_threshold():
    assert not gate("overhead_ratio:+0.05", 0.10, 0.14).crossed
    assert gate("gpu_utilization:-0.05", 0.70, 0.70).message == \
        "gpu_utilization did not change (70.0 % → 70.0 %), within the allowed -0.05"


def test_a_bare_number_of_1_or_more_on_a_0_to_1_metric_is_a_usage_error():
    assert refused("gpu_utilization:-5") == ("--fail-on-regression 'gpu_utilization:-5': gpu_utilization is a 0-1 "
                                             "share, so it can never move by 5; did you mean gpu_utilization:-5pt "
                                             "or gpu_utilization:-5%?")
    assert "did you mean overhead_ratio:+1pt or overhead_ratio:+1%?" in refused("overhead_ratio:1")  # bad direction


# ---------------------------------------------------------------------------------------------------------------
# Time units for *_ns metrics; a bare number is nanoseconds
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, after_ns, crossed, message", [
    ("step_time_ns:+5us", 4_007_200, True, "step_time_ns rose 7.2 µs (4.0 ms → 4.0 ms), beyond the allowed +5 µs"),
    ("step_time_ns:+5µs", 4_004_000, False, "step_time_ns rose 4 µs (4.0 ms → 4.0 ms), within the allowed +5 µs"),
    ("step_time_ns:+2ms", 6_500_000, True, "step_time_ns rose 2.5 ms (4.0 ms → 6.5 ms), beyond the allowed +2 ms"),
    ("step_time_ns:+1.5s", 1_504_000_000, False, "step_time_ns rose 1.5 s (4.0 ms → 1.50 s), within the allowed "
                                                 "+1.5 s"),
    ("step_time_ns:+1.5s", 1_504_000_001, True, "step_time_ns rose 1.5 s (4.0 ms → 1.50 s), beyond the allowed +1.5 s"),
    ("step_time_ns:+300ns", 4_000_301, True, "step_time_ns rose 301 ns (4.0 ms → 4.0 ms), beyond the allowed +300 ns"),
    ("step_time_ns:+300", 4_000_300, False, "step_time_ns rose 300 ns (4.0 ms → 4.0 ms), within the allowed +300 ns"),
    ("step_time_ns:+300", 4_000_301, True, "step_time_ns rose 301 ns (4.0 ms → 4.0 ms), beyond the allowed +300 ns"),
])
def test_time_gates_compare_in_their_own_unit(spec, after_ns, crossed, message):
    g = gate(spec, 4_000_000, after_ns)
    assert (g.crossed, g.message) == (crossed, message)


def test_time_gate_records_its_unit_and_a_bare_number_stays_nanoseconds():
    units = {spec: parse_gate(spec, known_metrics()).unit
             for spec in ("step_time_ns:+5us", "mean_gap_ns:+5µs", "phase_decode_ns:+2ms", "duration_ns:+1.5s",
                          "launch_mean_ns:+300ns", "step_time_ns:+300")}
    assert list(units.values()) == ["us", "us", "ms", "s", "ns", "absolute"]
    assert gate("step_time_ns:2ms", 4e6, 5e6).direction == "+"  # its bad direction, in ms


def test_a_time_unit_on_a_metric_that_is_not_a_time_is_a_usage_error():
    assert "the time unit 'ms' applies only to time metrics (the *_ns ones), and kernel_count is a count" in \
        refused("kernel_count:+2ms")
    assert "write gpu_utilization:-5pt, gpu_utilization:-5% or gpu_utilization:-0.05" in refused("gpu_utilization:-5us")
    assert "unknown unit 'sec'" in refused("step_time_ns:+5sec")


# ---------------------------------------------------------------------------------------------------------------
# Missing metrics and optional gates
# ---------------------------------------------------------------------------------------------------------------
def test_optional_gate_passes_not_evaluated_when_its_metric_is_missing():
    g = gate("phase_decode_ns?:+5%", None, 1.6e8)
    assert (g.metric, g.optional, g.crossed, g.observed) == ("phase_decode_ns", True, False, None)
    assert g.message == ("phase_decode_ns?:+5%: not evaluated (optional), phase_decode_ns is missing in the "
                         "before profile")


def test_optional_gate_fires_like_any_other_when_its_metric_is_there():
    g = gate("phase_decode_ns?:+5%", 1.6e8, 1.8e8)
    assert g.crossed and g.message.endswith("beyond the allowed +5 %")


def test_a_gate_on_a_missing_metric_names_the_metric_and_the_profile_and_offers_the_optional_form():
    with pytest.raises(GateError) as caught:
        gate("phase_decode_ns:+5%", 1.6e8, None)
    assert str(caught.value) == ("--fail-on-regression 'phase_decode_ns:+5%': phase_decode_ns is missing in the "
                                 "after profile; mark the gate optional as 'phase_decode_ns?:+5%' to let it pass "
                                 "when the metric is missing")


def test_every_unevaluable_gate_is_one_sentence_and_evaluable_ones_do_not_hide_them():
    gates = [parse_gate(s, known_metrics()) for s in ("tokens_per_s:-5%", "gpu_utilization:-5pt", "sync_calls:+5%")]
    with pytest.raises(GateError) as caught:
        check_gates(gates, {"gpu_utilization": 0.9, "sync_calls": 0}, {"gpu_utilization": 0.1, "sync_calls": 4})
    assert [p.split(":", 1)[0] for p in caught.value.problems] == ["--fail-on-regression 'tokens_per_s",
                                                                   "--fail-on-regression 'sync_calls"]
    assert "tokens_per_s is missing in both profiles; mark the gate optional" in caught.value.problems[0]


# ---------------------------------------------------------------------------------------------------------------
# On diagnosed profiles: why a metric is missing, the JSON and the reports
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nvtx_then_eager():
    """Before: prefill/decode NVTX ranges (phases, decode steps); after: eager decode without NVTX."""
    return scenario_analysis("prefill_decode_nvtx")[1], scenario_analysis("eager_decode")[1]


@pytest.mark.parametrize("spec, why", [
    ("phase_decode_ns:+5%", "phase_decode_ns is missing in the after profile (eager_decode.sqlite; no NVTX phase "
                            "'decode', only other); mark the gate optional as 'phase_decode_ns?:+5%'"),
    ("step_time_ns:+5us", "step_time_ns is missing in the after profile (eager_decode.sqlite; no --tokens N given)"),
    ("tokens_per_s:-5%", "tokens_per_s is missing in both profiles (prefill_decode_nvtx.sqlite, eager_decode.sqlite; "
                         "no --tokens N given)"),
])
def test_a_missing_metric_says_why_the_profile_lacks_it(nvtx_then_eager, spec, why):
    with pytest.raises(GateError, match="^--fail-on-regression") as caught:
        compare(*nvtx_then_eager, gates=[spec])
    assert why in str(caught.value)


def test_gate_form_is_in_the_json_and_optional_gates_show_as_not_evaluated(nvtx_then_eager):
    c = compare(*nvtx_then_eager, gates=["gpu_utilization:-5pt", "phase_decode_ns?:+5%", "step_time_ns?:+2ms"])
    data = json.loads(render(c, "json"))
    assert data["schema_version"] == "1.3" and c.gate_crossed
    assert [(g["unit"], g["optional"], g["crossed"]) for g in data["gates"]] == [
        ("points", False, True), ("percent", True, False), ("ms", True, False)]
    assert data["gates"][0]["observed"] == pytest.approx(-18.1, abs=0.1)
    assert data["gates"][0]["message"] == ("gpu_utilization fell 18.1 pt (55.4 % → 37.3 %), beyond the allowed "
                                           "-5 pt")
    assert data["gates"][1]["message"] == ("phase_decode_ns?:+5%: not evaluated (optional), phase_decode_ns is "
                                           "missing in the after profile (eager_decode.sqlite; no NVTX phase "
                                           "'decode', only other)")
    assert "| `phase_decode_ns?:+5%` | ➖ not evaluated |" in render(c, "md")
    assert "skip  step_time_ns?:+2ms: not evaluated (optional)" in render(c, "terminal")


# ---------------------------------------------------------------------------------------------------------------
# The command: exit 2 before anything is written, never mistaken for a crossed gate (exit 1)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture
def cached_diagnosis(nvtx_then_eager, monkeypatch):
    """`diagnose compare` in-process on the cached reports: (before path, after path)."""
    by_path = {r.profile.path: r for r in nvtx_then_eager}
    monkeypatch.setattr(comparecli, "diagnose", lambda path, *args, **kwargs: by_path[str(path)])
    return [r.profile.path for r in nvtx_then_eager]


def test_cli_missing_metric_exits_2_before_writing_even_when_another_gate_crossed(cached_diagnosis, tmp_path,
                                                                                   capsys):
    out = tmp_path / "compare.md"
    code = cli.main(["compare", *cached_diagnosis, "--no-cache", "-f", "md", "-o", str(out),
                     "--fail-on-regression", "gpu_utilization:-5pt", "--fail-on-regression", "phase_decode_ns:+5%"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and err.startswith("diagnose compare: error: --fail-on-regression "
                                                   "'phase_decode_ns:+5%': phase_decode_ns is missing in the after")
    assert "crossed" not in err


def test_cli_optional_missing_metric_lets_the_crossed_gate_exit_1(cached_diagnosis, tmp_path, capsys):
    out = tmp_path / "compare.md"
    code = cli.main(["compare", *cached_diagnosis, "--no-cache", "-f", "md", "-o", str(out),
                     "--fail-on-regression", "gpu_utilization:-5pt", "--fail-on-regression", "phase_decode_ns?:+5%"])
    assert code == 1 and "❌ crossed" in out.read_text() and "not evaluated (optional)" in out.read_text()
    assert capsys.readouterr().err == ("diagnose compare: regression gate crossed: gpu_utilization fell 18.1 pt "
                                       "(55.4 % → 37.3 %), beyond the allowed -5 pt\n")


def test_cli_refuses_a_gate_that_could_never_fire_before_diagnosing(monkeypatch, capsys):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the diagnosis started although the gate was a usage error")

    monkeypatch.setattr(comparecli, "diagnose", must_not_run)
    assert cli.main(["compare", "a.sqlite", "b.sqlite", "--fail-on-regression", "gpu_utilization:-5"]) == 2
    assert "did you mean gpu_utilization:-5pt or gpu_utilization:-5%?" in capsys.readouterr().err


def test_help_documents_the_gate_forms():
    text = " ".join(comparecli.parser().format_help().split())
    for form in ("METRIC[?]:[+|-]N[UNIT]", "gpu_utilization:-5pt", "gpu_utilization:-5%", "step_time_ns:+2ms",
                 "overhead_ratio:+0.05", "ns for times", "phase_decode_ns?:+5%", "exits 2"):
        assert form in text, form


def test_an_unknown_metric_gets_the_closest_name_or_the_list_of_metrics():
    assert refused("gpu_utilisation:-5pt") == ("unknown metric 'gpu_utilisation' in --fail-on-regression; did you "
                                               "mean 'gpu_utilization'?")
    assert refused("zzz:-5pt") == (f"unknown metric 'zzz' in --fail-on-regression; known metrics are "
                                   f"{', '.join(known_metrics())}")
