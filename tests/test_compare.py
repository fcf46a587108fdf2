"""`diagnose compare BEFORE AFTER`: metric deltas, finding changes, verdict, gates and the four formats.

Each fixture is generated and diagnosed once per module; the CLI runs as a subprocess only for exit codes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.fixtures.generator import generate
from nsys_diagnose.runs.compare import compare
from nsys_diagnose.runs.gates import GateError, known_metrics, parse_gate
from nsys_diagnose.model.comparemodel import Comparison
from nsys_diagnose.reports.metrics import METRICS
from nsys_diagnose.reports.render import render
from nsys_diagnose.reports.schema import shipped_schema

from cli_in_process import run_cli


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("compare")
    paths = {"eager": d / "eager.sqlite", "graphs": d / "graphs.sqlite"}
    generate("eager_decode", paths["eager"])
    generate("graph_decode_node", paths["graphs"])
    return paths


@pytest.fixture(scope="module")
def reports(exports):
    return {name: diagnose(path) for name, path in exports.items()}


@pytest.fixture(scope="module")
def improved(reports) -> Comparison:
    return compare(reports["eager"], reports["graphs"])


@pytest.fixture(scope="module")
def regressed(reports) -> Comparison:
    return compare(reports["graphs"], reports["eager"], gates=["overhead_ratio:+0.05", "gpu_utilization:-5%"])


@pytest.fixture(scope="module")
def across(exports, reports) -> tuple[Path, Comparison]:
    """The eager decode as an nsys export before and as the PyTorch profiler's trace after (fixtures/_kineto.py)."""
    trace = exports["eager"].with_name("eager.pt.trace.json.gz")
    generate("eager_decode", trace, fmt="kineto")
    return trace, compare(reports["eager"], diagnose(trace))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", "compare", *args], check=False,
                          capture_output=True,
                          text=True, timeout=120)


def metric(c: Comparison, key: str):
    return next(d for d in c.metrics if d.key == key)


def test_eager_to_graphs_is_improved_with_overhead_down_and_utilisation_up(improved):
    o, u = metric(improved, "overhead_ratio"), metric(improved, "gpu_utilization")
    assert o.before > 0.3 and o.after < 0.1 and o.assessment == "improved"
    assert u.after > u.before and u.assessment == "improved"
    assert improved.verdict == "improved" and "GPU utilisation" in improved.reason
    assert not improved.gate_crossed
    assert {(f.rule, f.change) for f in improved.findings} >= {("launch-bound", "disappeared")}
    for key in ("mean_gap_ns", "median_gap_ns", "kernel_count", "launch_calls", "mean_kernel_ns",
                "launch_mean_ns", "sync_calls", "pcie_ns", "phase_other_ns"):
        d = metric(improved, key)
        assert d.before is not None and d.after is not None and d.change == pytest.approx(d.after - d.before)


def test_terminal_output(improved):
    text = render(improved, "terminal")
    assert "VERDICT  improved" in text
    assert re.search(r"Launch overhead ratio\s+0\.63\s+0\.07", text)
    assert re.search(r"disappeared\s+launch-bound · GPU 0", text)
    assert max(len(line) for line in text.splitlines()) <= 100


def test_swapped_is_regressed_and_gates_cross(regressed):
    assert regressed.verdict == "regressed"
    assert [g.crossed for g in regressed.gates] == [True, True]
    assert regressed.gate_crossed
    assert {(f.rule, f.change) for f in regressed.findings} >= {("launch-bound", "appeared")}
    assert "overhead_ratio" in render(regressed, "md")


def test_gate_within_threshold_passes(reports):
    c = compare(reports["graphs"], reports["eager"], gates=["overhead_ratio:+0.6", "kernel_count:+50%"])
    assert not c.gate_crossed and all(g.observed is not None for g in c.gates)
    assert c.gates[0].message.startswith("overhead_ratio rose 0.561 (0.07 → 0.63), within the allowed +0.6")


def test_gate_parsing():
    g = parse_gate("gpu_utilization:-5%", known_metrics())
    assert (g.metric, g.direction, g.threshold, g.relative, g.unit) == ("gpu_utilization", "-", 5.0, True, "percent")
    assert parse_gate("overhead_ratio:0.05", known_metrics()).direction == "+"  # its bad direction
    with pytest.raises(GateError, match="did you mean 'gpu_utilization'"):
        parse_gate("gpu_utilisation:-5%", known_metrics())
    with pytest.raises(GateError, match="not METRIC"):
        parse_gate("overhead_ratio=0.05", known_metrics())
    with pytest.raises(GateError, match="no good direction"):
        parse_gate("kernel_count:10", known_metrics())


def test_tokens_add_throughput(reports):
    c = compare(reports["eager"], reports["graphs"], tokens=1000)
    tps, tpot = metric(c, "tokens_per_s"), metric(c, "time_per_token_ns")
    assert tps.before == pytest.approx(1000 / reports["eager"].profile.duration_ns * 1e9)
    # per request, as TPOT is: the median decode step (the run's alike steps are decode steps with --tokens)
    steps = reports["eager"].facts["steps"][0]
    assert tpot.before == pytest.approx(steps["median_step_ns"])
    assert "Output tokens per second" in render(c, "terminal")


def test_json_has_verdict_and_deltas(improved):
    data = json.loads(render(improved, "json"))
    assert data["verdict"] == "improved" and data["reason"]
    by_key = {m["key"]: m for m in data["metrics"]}
    assert by_key["overhead_ratio"]["change"] < 0 and by_key["overhead_ratio"]["relative"] < 0
    assert by_key["gpu_utilization"]["change"] > 0
    assert Comparison.model_validate(data) == improved


def test_markdown_tables_are_well_formed(regressed):
    text = render(regressed, "md")
    lines = text.splitlines()
    tables: list[list[str]] = []
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            assert i == 0 or lines[i - 1] == "", f"no blank line before table at line {i + 1}"
            tables.append([])
        if line.startswith("|"):
            tables[-1].append(line)
    assert len(tables) == 3  # gates, metrics, findings
    for table in tables:
        cells = [len(re.findall(r"(?<!\\)\|", row)) for row in table]
        assert len(set(cells)) == 1, table
        assert re.fullmatch(r"\|(\s*-+:?\s*\|)+", table[1].replace("---:", "---"))


def test_html_is_self_contained_with_one_combined_chart(improved):
    html = render(improved, "html")
    assert html.count("<svg") == 1 and html.count("<polyline") == 2
    assert "before" in html and "after" in html and "Content-Security-Policy" in html
    assert "<script" not in html and "http://" not in html and "https://" not in html


def test_html_escapes_untrusted_text(improved):
    evil = improved.model_copy(update={"reason": "<script>alert(1)</script>"})
    html = render(evil, "html")
    assert "<script>" not in html and "&lt;script&gt;" in html


@pytest.mark.slow
def test_cli_exit_codes(exports, tmp_path):
    eager, graphs = str(exports["eager"]), str(exports["graphs"])
    bad = cli(graphs, eager, "--fail-on-regression", "overhead_ratio:+0.05", "-f", "md",
              "-o", str(tmp_path / "c.md"))
    assert bad.returncode == 1, bad.stderr
    assert "overhead_ratio" in bad.stderr and "regressed" in (tmp_path / "c.md").read_text()
    assert "crossed" in (tmp_path / "c.md").read_text()
    ok = cli(eager, graphs, "--fail-on-regression", "overhead_ratio:+0.05")
    assert ok.returncode == 0, ok.stderr
    assert "improved" in ok.stdout and "Launch overhead ratio" in ok.stdout
    unknown = cli(eager, graphs, "--fail-on-regression", "overhead:+0.05")
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "did you mean 'overhead_ratio'" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    absent = cli(graphs, eager, "--fail-on-regression", "overhead_ratio:+0.05", "--fail-on-regression",
                 "step_time_ns:+5us", "-f", "md", "-o", str(tmp_path / "absent.md"))
    assert absent.returncode == 2 and not (tmp_path / "absent.md").exists()  # not 1: a gate that cannot run
    assert absent.stderr.count("\n") == 1 and "step_time_ns is missing in both profiles" in absent.stderr
    missing = cli(eager, str(tmp_path / "nope.sqlite"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_markdown_tables_parse_as_github_tables(regressed):
    cmarkgfm = pytest.importorskip("cmarkgfm")
    html = cmarkgfm.github_flavored_markdown_to_html(render(regressed, "md"))
    assert html.count("<table>") == 3
    rows = len([m for m in regressed.metrics]) + len(regressed.gates) + len(regressed.findings)
    assert html.count("<tr>") == rows + 3  # plus one header row per table


def test_metrics_and_gates_come_from_the_key_metric_definition(improved):
    compared = [m for m in METRICS if m.compare]
    assert known_metrics() == sorted(m.key for m in compared)
    assert {"gpu_utilization", "overhead_ratio", "tokens_per_s", "phase_other_ns"} <= \
        set(known_metrics()) | {d.key for d in improved.metrics}
    by_key = {m.key: m for m in METRICS}
    rows = [d for d in improved.metrics if d.key in by_key]
    assert [d.key for d in rows] == [m.key for m in compared if m.key in {d.key for d in rows}]  # definition order
    assert all((d.label, d.unit, d.better) == (by_key[d.key].label, by_key[d.key].unit, by_key[d.key].better)
               for d in rows)
    assert [d.key for d in improved.metrics if d.key not in by_key] == ["phase_other_ns"]  # phases come last


# --- an nsys export against a PyTorch-profiler trace ----------------------------------------------------------------
def test_an_export_and_a_trace_of_one_run_compare_with_what_each_profiler_records_unjudged(across, reports):
    _, c = across
    assert c.verdict == "unchanged"  # the same run: every judged metric agrees
    for key in ("cpu_api_ns", "sync_calls"):
        d = metric(c, key)
        assert d.note.startswith("not judged across profilers: it ") and d.assessment not in ("improved", "regressed")
    assert all(metric(c, k).note is None for k in ("gpu_utilization", "overhead_ratio", "launch_calls"))
    same = compare(reports["eager"], reports["eager"])
    assert metric(same, "cpu_api_ns").note is None  # one kind of profile: judged as ever
    with pytest.raises(GateError, match=r"sync_calls cannot be compared: it counts the synchronising calls each "
                                        r"profiler records.*; compare two profiles recorded by the same profiler, "
                                        r"or mark the gate optional as 'sync_calls\?:\+5%'"):
        compare(reports["eager"], reports["eager"].model_copy(
            update={"profile": reports["eager"].profile.model_copy(update={"source_format": "kineto"})}),
            gates=["sync_calls:+5%"])


def test_a_metric_only_one_profiler_gave_says_which(across, reports, exports):
    trace, _ = across
    after = diagnose(trace)
    c = compare(reports["eager"], after.model_copy(update={"facts": {**after.facts, "phases": []}}))
    d = metric(c, "phase_other_ns")
    assert d.assessment == "n/a" and d.note == ("only the before profile (an nsys export) has it; the other was "
                                                "recorded by another profiler, which may not record it")


@pytest.mark.slow
def test_compare_on_the_command_line_notes_two_kinds_of_profile(across, exports):
    trace, _ = across
    p = run_cli("compare", exports["eager"], trace, "--no-cache")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ("diagnose compare: note: before is an nsys export and after a PyTorch-profiler trace: the "
                        "metrics that depend on what each profiler records (cpu_api_ns, sync_calls) are shown but "
                        "not judged.\n")
    assert "not judged across profilers" in p.stdout


def test_json_validates_against_the_shipped_compare_schema(regressed):
    import jsonschema

    schema = shipped_schema("compare")
    jsonschema.Draft202012Validator.check_schema(schema)
    data = json.loads(render(regressed, "json"))
    jsonschema.Draft202012Validator(schema).validate(data)
    data["verdict"] = "better"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def test_untrusted_text_is_inert_in_every_format(improved):
    evil = improved.model_copy(update={
        "before": improved.before.model_copy(update={"path": "a\x1b[31m|`x`<b>\u202e.sqlite"}),
        "findings": [f.model_copy(update={"subject": "GPU 0 | <b>\x1b[2J"}) for f in improved.findings]})
    for fmt in ("terminal", "md", "html"):
        text = render(evil, fmt)
        assert "\x1b" not in text and "\u202e" not in text, fmt
        assert fmt == "terminal" or "<b>" not in text, fmt
    assert "\\|\\`x\\`&lt;b&gt;" in render(evil, "md")


def test_a_per_call_latency_is_judged_with_the_calls_it_multiplies(improved, regressed):
    """CUDA graphs: one graph launch for hundreds of kernel launches, each launch longer. The mean launch latency
    rose, but the calls fell by far more, so the launch time in all fell: no regression, and the change says why.
    The synchronisations grew with the steps captured, not per second of work: not a regression either."""
    launch = metric(improved, "launch_mean_ns")
    calls = metric(improved, "launch_calls")
    assert launch.after > launch.before and calls.after * launch.after < calls.before * launch.before
    assert launch.assessment == "improved"
    assert re.fullmatch(r"per call, but \d+× fewer calls: total -\d+ %", launch.note or "")
    syncs = metric(improved, "sync_calls")
    assert syncs.after > syncs.before and syncs.assessment != "regressed"
    assert "per second of work" in (syncs.note or "")
    for fmt in ("terminal", "md", "html"):
        assert "fewer calls: total" in render(improved, fmt)
    # the other way round, the total rose: a regression, with the same reasoning
    back = metric(regressed, "launch_mean_ns")
    assert back.assessment == "regressed" and "more calls: total +" in (back.note or "")


def test_one_token_count_for_captures_of_different_steps_is_not_judged(reports):
    # 25 and 28 decode steps cannot both have generated 4,096 tokens at one batch: tokens/s would compare the
    # captures' lengths, so it is shown unjudged, out of the verdict, and a gate on it cannot run (exit 2)
    c = compare(reports["eager"], reports["graphs"], tokens=4096)
    tps = metric(c, "tokens_per_s")
    assert tps.assessment == "changed" and "25 and 28 decode steps" in (tps.note or "")
    assert "--tokens BEFORE,AFTER" in (tps.note or "") and "tokens" not in c.reason
    with pytest.raises(GateError, match="cannot be compared"):
        compare(reports["eager"], reports["graphs"], tokens=4096, gates=["tokens_per_s:-5%"])
    optional = compare(reports["eager"], reports["graphs"], tokens=4096, gates=["tokens_per_s?:-5%"])
    assert not optional.gate_crossed and "not evaluated" in optional.gates[0].message
    # each run's own tokens: judged (8x the sequences per step in the after run)
    per_run = compare(reports["eager"], reports["graphs"], tokens=(4096, 8 * 4096 * 28 // 25),
                      gates=["tokens_per_s:-5%"])
    assert metric(per_run, "tokens_per_s").assessment == "improved" and not per_run.gate_crossed
    assert per_run.tokens == 4096 and per_run.tokens_after == 8 * 4096 * 28 // 25


def test_cli_takes_tokens_per_run(exports):
    eager, graphs = str(exports["eager"]), str(exports["graphs"])
    ok = cli(eager, graphs, "--tokens", "4096,36700", "--fail-on-regression", "tokens_per_s:-5%")
    assert ok.returncode == 0, ok.stderr
    refused = cli(eager, graphs, "--tokens", "4096", "--fail-on-regression", "tokens_per_s:-5%")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "BEFORE,AFTER" in refused.stderr


def test_copy_time_is_judged_per_unit_of_work(improved):
    # +12.7 µs of copies in a 117 ms capture of 28 steps against 25 is no regression
    pcie = metric(improved, "pcie_ns")
    assert pcie.change and pcie.change > 0 and pcie.assessment == "unchanged" and pcie.note


def test_projection_is_not_checked_against_another_workload(improved):
    # the after run does 2.5x the GPU work per step (a larger batch): its step cannot test the projection
    check = next(p for p in improved.projections if p.rule == "launch-bound")
    assert check.error is None and "GPU work per step" in check.line and "+118" not in check.line
