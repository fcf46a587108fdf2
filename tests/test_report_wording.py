"""What the reports say and how they look: names that stay distinct when shortened, rank labels, the multi-rank
table, chart labels clear of the lines drawn over them, a utilisation chart that shows a nearly idle GPU,
counts with the right noun form, and evidence rows in words with value and threshold in one unit.

Everything here renders reports the session has already diagnosed (tests/conftest.py scenario_analysis) or
builds small models by hand: no diagnosis of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import scenario_analysis, slow_but
from nsys_diagnose.diagnosis import templating
from nsys_diagnose.diagnosis.evaluate import _compared_units, evaluate
from nsys_diagnose.runs.multirank import run_verdict
from nsys_diagnose.diagnosis.rules import load_rules
from nsys_diagnose.diagnosis.ruleset import RuleSet
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.cross_rank import compute_run_facts, load_run_facts
from nsys_diagnose.reports import charts
from nsys_diagnose.model.findings import Evidence, Finding
from nsys_diagnose.model.verdict import Verdict
from nsys_diagnose.reports.render import render
from nsys_diagnose.model.runmodel import RankRow, RunBalance, RunReport
from nsys_diagnose.base.text import column_label, distinct_short_names, distinguishing_parts, plural, shorten

REPO = Path(__file__).resolve().parents[1]

# Real-looking kernel names from PyTorch, CUTLASS and FlashAttention exports: each pair shortens to one text.
FILL = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<{}>, "
        "at::detail::Array<char *, (int)1>, at::native::memory::LoadWithoutCast>(int, at::native::FillFunctor<{}>, "
        "at::detail::Array<char *, (int)1>)")
CUTLASS = ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_{}_32x3_nn_align8>"
           "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_{}_32x3_nn_align8::Params)")
FLASH = ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, "
         "(bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, "
         "cutlass::bfloat16_t>>, (bool)1, (bool)0, (bool)0, (bool){}, (bool)1, (bool)0, (bool)0, (bool)0>"
         "(Flash_fwd_params)")
COLLIDING = [FILL.format("float", "float"), FILL.format("c10::Half", "c10::Half"),
             CUTLASS.format("64x64", "64x64"), CUTLASS.format("128x64", "128x64"),
             FLASH.format(0), FLASH.format(1)]


# ------------------------------------------------------------------------------------------------------------
# 1. Shortened names never collide
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("limit", [60, 80, 90])
def test_kernels_that_shorten_alike_keep_the_argument_that_tells_them_apart(limit):
    assert len({shorten(n, limit) for n in COLLIDING}) < len(COLLIDING)  # the plain shortening collides
    shown = distinct_short_names(COLLIDING, limit)
    assert len(set(shown.values())) == len(COLLIDING)
    assert all(len(label) <= limit + 4 for label in shown.values())
    assert not any("#" in label for label in shown.values())  # numbering is only the last resort
    assert "c10::Half" in shown[COLLIDING[1]] and "float" in shown[COLLIDING[0]]
    assert "128x64" in shown[COLLIDING[3]] and "64x64" in shown[COLLIDING[2]]


def test_names_that_do_not_collide_are_shortened_as_before_and_repeats_share_a_label():
    names = ["void vllm::rms_norm_kernel<c10::BFloat16>(T1 *, const T1 *, const T1 *, float, int, int)",
             "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", COLLIDING[0], COLLIDING[0]]
    shown = distinct_short_names(names, 60)
    assert len(shown) == 3
    assert all(shown[n] == shorten(n, 60) for n in names)


def test_names_that_still_coincide_are_numbered():
    # Two names that differ only in a space before a template argument: the argument that tells them apart
    # reads the same in both, so the second one is numbered.
    head = "void kernel<" + "x" * 80 + ","
    names = [head + " long>(" + "y" * 40 + ")", head + "long>(" + "y" * 40 + ")"]
    shown = distinct_short_names(names, 60)
    assert shown[names[1]] == shown[names[0]] + " #2"
    assert "…long…" in shown[names[0]]


def _with_top_kernels(names: list[str]):
    _, report = scenario_analysis("eager_decode")
    rows = [dict(report.facts["kernel_summary"][0], name=n, short_name=n.split("<")[0]) for n in names]
    return report.model_copy(update={"facts": {**report.facts, "kernel_summary": rows}})


def test_top_kernel_tables_show_colliding_kernels_apart():
    report = _with_top_kernels(COLLIDING)
    html, md = render(report, "html"), render(report, "md")
    table = html.split('id="kernels"')[1].split("</table>")[0]
    cells = re.findall(r'<td class="name" title="[^"]*">([^<]*)</td>', table)
    assert len(cells) == len(COLLIDING) and len(set(cells)) == len(COLLIDING)
    top = md.split("### Top kernels")[1].split("\n\n")[1]
    md_cells = [line.split(" | ")[0] for line in top.splitlines()[2:]]
    assert len(md_cells) == len(COLLIDING) and len(set(md_cells)) == len(COLLIDING)


def test_finding_subjects_and_evidence_values_shown_together_stay_apart():
    _, report = scenario_analysis("eager_decode")
    base = report.findings[0]
    findings = [base.model_copy(update={"subject": name, "also_on": [], "evidence": [
        Evidence(label="Kernel", column="name", value=name, display=name) for name in COLLIDING]})
        for name in COLLIDING[:2]]
    doc = report.model_copy(update={"findings": findings})
    html, md = render(doc, "html"), render(doc, "md")
    subjects = re.findall(r'</span>[^<]* · ([^<]*)</h3>', html)
    assert len(subjects) == 2 and subjects[0] != subjects[1]
    evidence = re.findall(r'<td>Kernel</td><td class="n">([^<]*)</td>', html)
    assert len(evidence) == 2 * len(COLLIDING) and len(set(evidence)) == len(COLLIDING)
    headings = [line for line in md.splitlines() if line.startswith("#### ")]
    assert len(headings) == 2 and headings[0].split(" · ")[-1] != headings[1].split(" · ")[-1]


# ------------------------------------------------------------------------------------------------------------
# 2, 3. Rank labels and the multi-rank table
# ------------------------------------------------------------------------------------------------------------
GINDA = ["GindaChen__nsys-ai__h100_2gpu_1s__2026.2.1_2xH100_sp2-fa3__DERIVED-window.sqlite",
         "GindaChen__nsys-ai__mfu_2gpu_before__2026.2.1_2xH100_torchrun-fa-nccl__DERIVED-window.sqlite"]


@pytest.mark.parametrize("files, labels", [
    (["job42_rank0.nsys-rep.sqlite", "job42_rank1.nsys-rep.sqlite"], ["rank0", "rank1"]),
    (["rank0.sqlite", "rank1.sqlite", "rank10.sqlite"], ["rank0", "rank1", "rank10"]),
    (["run_10.sqlite", "run_11.sqlite"], ["10", "11"]),
    (GINDA, ["h100_2gpu_1s__2026.2.1_2xH100_sp2-fa3", "mfu_2gpu_before__2026.2.1_2xH100_torchrun-fa-nccl"]),
    (["a.sqlite", "a.sqlite"], ["a.sqlite", "a.sqlite"]),  # nothing tells them apart: the names stay
])
def test_rank_labels_are_the_part_of_the_file_names_that_differs(files, labels):
    assert distinguishing_parts(files) == labels


def _run(files: list[str], gpu: str = "NVIDIA H100 80GB HBM3") -> RunReport:
    ranks = [RankRow(rank=i, path=f"/data/runs/{f}", file=f, gpu_name=gpu, window_ns=1_000_000_000,
                     utilization=0.9, compute_ns=900_000_000 - i, comm_ns=10_000_000, exposed_comm_ns=5_000_000,
                     comm_kernel_count=120, behind_ns=i, wait_fraction=0.0, is_straggler=i == 0,
                     verdict=Verdict(primary="communication-bound", headline="Rank verdict."), findings=[])
             for i, f in enumerate(files)]
    return RunReport(tool_version="test", source="/data/runs", rank_numbering="sorted order", workers=2,
                     verdict=Verdict(headline="Run verdict."), balance=RunBalance(rank_count=len(files)),
                     ranks=ranks, findings=[], passed=[], skipped=[], overrides=[])


def test_multi_rank_tables_label_ranks_by_what_differs_and_keep_the_verdict_in_view():
    run = _run(GINDA)
    html, md, text = render(run, "html"), render(run, "md"), render(run, "terminal")
    rows = html.split('<table class="ranks">')[1].split("</table>")[0]
    assert '<div class="scroll">\n<table class="ranks">' in html  # scrolls inside the page, not past it
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", rows)
    assert headers.index("Verdict") < headers.index("Busy")  # before the numbers: visible on a narrow window
    assert "h100_2gpu_1s__2026.2.1_2xH100_sp2-fa3</td>" in rows
    assert f'title="/data/runs/{GINDA[0]}"' in rows  # the whole path on hover
    shown = re.sub(r' title="[^"]*"', "", rows)
    for out in (shown, md.split("### Ranks")[1].split("###")[0], text.split("RANKS")[1].split("CROSS-RANK")[0]):
        assert "GindaChe" not in out
    assert "h100_2gp" in text and "mfu_2gpu" in text
    assert "(h100\\_2gpu\\_1s\\_\\_2026.2.1\\_2xH100\\_sp2-fa3, 0 findings)" in md


# ------------------------------------------------------------------------------------------------------------
# 4, 5. Chart geometry
# ------------------------------------------------------------------------------------------------------------
def _crossed(bar: dict, line_x: float) -> bool:
    left, right, _, _ = charts.text_box(bar["text_x"], bar["text_y"], bar["share_text"], bar["text_anchor"])
    return left <= line_x <= right


@pytest.mark.parametrize("bucket", [2, 3, 4])
def test_the_mean_kernel_line_never_runs_through_a_bar_label(bucket):
    _, report = scenario_analysis("eager_decode")
    rows = report.facts["gap_histogram"]
    # Put the mean kernel in the middle of a labelled bar (log scale inside the bucket), where the line would
    # cross its share label.
    lower, upper = rows[bucket]["lower_ns"], rows[bucket]["upper_ns"]
    mean = (lower * upper) ** 0.5
    gpus = [dict(g, mean_kernel_ns=mean) for g in report.facts["gpu_utilization"]]
    doc = report.model_copy(update={"facts": {**report.facts, "gpu_utilization": gpus}})
    [hist] = charts.gap_histogram(doc)
    line = hist["marker"]["x"]
    bar = hist["bars"][bucket]
    assert bar["share_text"] and abs(bar["cx"] - line) < 1  # the case that used to overlap
    labelled = [b for b in hist["bars"] if b["share_text"]]
    assert not any(_crossed(b, line) for b in labelled)
    assert abs(bar["text_x"] - line) <= charts.MARKER_CLEARANCE  # moved beside the line, not away from its bar
    html = render(doc, "html")
    assert f'text-anchor="{bar["text_anchor"]}">{bar["share_text"]}</text>' in html


def test_a_nearly_idle_gpu_gets_a_y_axis_scaled_to_its_busiest_bin():
    _, report = scenario_analysis("pageable_copies")  # copies hold the GPU; kernels keep it busy ~3 % per bin
    chart = charts.timeline(report)["charts"][0]
    peak = max(b["busy_fraction"] for b in report.facts["utilization_timeline"])
    assert peak < charts.LOW_UTILISATION
    assert chart["scaled"] and peak <= chart["top"] < 2.5 * peak
    height = charts.timeline(report)["height"]
    assert max(b["h"] for b in chart["bars"]) >= 0.4 * height  # visible, not a flat line at the bottom
    assert [t["label"] for t in chart["yticks"]][-1] == f"{chart['top'] * 100:g} %"
    assert chart["mean_y"] < height
    html = render(report, "html")
    assert f"y axis 0–{chart['top'] * 100:g} %</strong>, not 100 %" in html


def test_a_busy_gpu_keeps_the_full_scale():
    _, report = scenario_analysis("eager_decode")
    chart = charts.timeline(report)["charts"][0]
    assert not chart["scaled"] and [t["label"] for t in chart["yticks"]] == ["0 %", "50 %", "100 %"]
    assert charts.utilisation_top(0.0) == 1.0 and charts.utilisation_top(0.012) == 0.02


# ------------------------------------------------------------------------------------------------------------
# 6. Counts with nouns
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count, noun, plural_form, expected", [
    (1, "gap", None, "1 gap"), (2, "gap", None, "2 gaps"), (1200, "kernel", None, "1,200 kernels"),
    (1, "host-device copy", None, "1 host-device copy"), (3, "host-device copy", None, "3 host-device copies"),
    (1, "stretch", None, "1 stretch"), (2, "stretch", None, "2 stretches"), (0, "finding", None, "0 findings"),
    (2, "index", "indices", "2 indices"), (1.0, "rank", None, "1 rank"),
])
def test_plural(count, noun, plural_form, expected):
    assert plural(count, noun, plural_form) == expected


@pytest.mark.parametrize("count, expected", [(1, "in 1 host-device copy from"), (2, "in 2 host-device copies from")])
def test_rule_messages_agree_with_their_counts(count, expected):
    rules = load_rules(load_facts())
    rule = rules["pageable-memory-copies"]
    _, report = scenario_analysis("pageable_copies")
    row = dict(next(f.row for f in report.findings if f.rule == rule.id), pageable_count=count)
    message = templating.render(rule.spec.message, {"row": row, "params": {}, "impact": None})
    assert expected in message


_COUNTED_NOUN = re.compile(r"\|\s*num\s*\}\}\s+(kernels|gaps|copies|calls|ranks|GPUs|findings|samples|replays|"
                           r"stretches|ranges|operations|events|CTAs|SMs|bins|tokens)\b")


def test_no_template_or_rule_message_prints_a_count_with_a_fixed_plural():
    files = [*sorted((REPO / "reports" / "templates").glob("*.j2")), *sorted((REPO / "rules").rglob("*.yaml"))]
    offenders = [f"{p.name}: {m.group()}" for p in files for m in _COUNTED_NOUN.finditer(p.read_text("utf-8"))]
    assert offenders == []


# ------------------------------------------------------------------------------------------------------------
# 7. Evidence in words, value and threshold in one unit
# ------------------------------------------------------------------------------------------------------------
EVIDENCE_SCENARIOS = ("eager_decode", "multi_gpu_straggler", "pageable_copies", "empty_capture",
                      "metrics_coarse_decode", "small_grid_decode")


def _check_evidence(findings: list[Finding]) -> int:
    rows = 0
    for f in findings:
        for e in f.evidence:
            rows += 1
            where = f"{f.rule}: {e.column}"
            assert e.label.lower() != e.column.replace("_", " ").lower(), where
            assert "==" not in e.label and "_" not in e.label, where
            if (e.threshold_display or "").endswith("%"):
                assert e.display.endswith("%"), f"{where}: {e.display} beside {e.threshold_display}"
    return rows


@pytest.mark.parametrize("scenario", slow_but(EVIDENCE_SCENARIOS, "eager_decode", "multi_gpu_straggler"))
def test_evidence_rows_are_in_words_with_value_and_threshold_in_one_unit(scenario):
    _, report = scenario_analysis(scenario)
    assert _check_evidence(report.findings) > 0


def test_a_yes_no_condition_reads_as_a_word():
    _, report = scenario_analysis("multi_gpu_straggler")
    [row] = [e for f in report.findings if f.rule == "multi-gpu-imbalance" for e in f.evidence
             if e.column == "is_straggler"]
    assert (row.label, row.display, row.threshold_display) == ("Straggler", "yes", None)
    assert (row.op, row.threshold) == ("==", True)  # the comparison stays in the JSON
    html = render(report, "html")
    assert "<td>Straggler</td><td class=\"n\">yes</td><td></td>" in html


def test_cross_rank_evidence_is_in_words_too():
    rows = [dict(rank=i, path=f"r{i}.sqlite", file=f"r{i}.sqlite", device_id=0, gpus_used=1, window_ns=100_000_000,
                 utilization=0.9, kernel_time_ns=90_000_000, compute_ns=60_000_000 + (30_000_000 if i == 2 else 0),
                 comm_ns=20_000_000, exposed_comm_ns=10_000_000, comm_kernel_count=40) for i in range(4)]
    facts = compute_run_facts(rows)
    run_rules = load_rules(load_facts(), [], scope="run")
    findings = evaluate(RuleSet.resolve(run_rules), facts).findings
    assert any(f.rule == "rank-straggler" for f in findings)
    assert _check_evidence(findings) > 0


@pytest.mark.parametrize("column, doc, label", [
    ("overhead_ratio", "total_gap_ns / (compute busy time + total_gap_ns).",
     "Total gap / (compute busy time + total gap)"),
    ("utilization", "compute_busy_ns / window_ns: share of the window with a kernel or graph replay running (0-1).",
     "Share of the window with a kernel or graph replay running"),
    ("p50_ns", "Median call duration (ns).", "Median call duration"),
    ("pageable_bytes", "Bytes in those copies.", "Pageable volume"),
    ("event_count", "All of them.", "Number of events"),
    ("is_straggler", "True for the straggler rank.", "Straggler"),
    ("long_copy_count", None, "Number of long copies"),
    ("imbalance", "(max_compute_ns - min_compute_ns) / max_compute_ns over the ranks (0-1).", "Compute imbalance"),
])
def test_column_labels_come_from_the_column_docs(column, doc, label):
    assert column_label(column, doc) == label


def test_every_condition_column_of_the_bundled_rules_gets_a_label_in_words():
    facts = {**load_facts(), **load_run_facts()}
    rules = {**load_rules(load_facts()), **load_rules(load_facts(), [], scope="run")}
    for rule in rules.values():
        docs = {c.name: c.doc for c in facts[rule.spec.fact].columns}
        labelled = {ev.column for ev in rule.spec.evidence}
        for cond in rule.conditions + rule.any_conditions:
            for side in (cond.left, cond.right):
                if side.kind == "column" and side.value not in labelled:
                    label = column_label(side.value, docs.get(side.value))
                    assert label.lower() != side.value.replace("_", " ").lower() and "_" not in label, label


@pytest.mark.parametrize("column, param_unit, units", [
    ("utilization", "ratio", ("ratio", "ratio")),      # 0-1 share against a share: both in %
    ("speedup", "ratio", ("ratio", None)),             # no unit suffix, judged against a share: shown as a share
    ("sm_issue_pct", "percent", ("percent", "percent")),
    ("overhead_ratio", "ratio", ("plain", "plain")),   # a ratio stays 0.63 beside 0.30
    ("median_gap_ns", "us", ("ns", None)),
])
def test_value_and_threshold_share_a_unit(column, param_unit, units):
    assert _compared_units(column, param_unit) == units


def test_a_run_with_one_rank_of_kernels_says_rank_not_ranks():
    run = _run(GINDA)
    balance = RunBalance(rank_count=1, comm_rank_count=1, imbalance=0.0)
    assert "across the 1 rank with kernels" in run_verdict([], run.ranks, balance).headline
