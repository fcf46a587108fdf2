"""Every format renders every shape of a report (engine/reports/views.py feeds them all): reports varied from the
bundled example's by phases, GPUs, operation classes a phase or GPU lacks, findings of every severity, and blocks
left empty render in the terminal, Markdown, HTML and JSON; the Markdown tables keep one column count per row;
every finding can be found in every format (its title, or in the terminal summary, which names no titles, its
rule or the line that sends the reader to the other formats); a key metric without a value says why.

The test drives hypothesis from inside a plain test with a few examples, so it stays in the fast tier (a @given
test is fuzzing, slow by kind: tests/conftest.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import markupsafe
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import analysis
from nsys_diagnose.base.vocabulary import Severity
from nsys_diagnose.model.measures import OperationBreakdown
from nsys_diagnose.model.report import Report
from nsys_diagnose.reports.render import FORMATS, render

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "examples"
PHASE_SETS = ([None], ["prefill"], ["prefill", "decode"])
DEVICE_SETS = ([0], [0, 1], [0, 2, 3])
# Report fields a report may lack entirely: each is a block some format draws.
UNMEASURED = "n/a: not traced in this capture"  # a key metric's reason for having no value
EMPTIED = ("findings", "key_metrics", "window", "operations", "also_checked", "passed", "skipped", "overrides",
           "facts", "phase_facts")


@pytest.fixture(scope="module")
def examples() -> tuple[Report, Report]:
    """The healthy example (no finding) to vary, and the eager example whose finding gives the findings' shape."""
    return analysis(EXAMPLES / "healthy_prefill.sqlite")[1], analysis(EXAMPLES / "eager_decode.sqlite")[1]


def _operations(draw, base: list[OperationBreakdown], phases, devices) -> list[OperationBreakdown]:
    """A breakdown per phase and GPU, each with some of the example's classes: the others are missing cells."""
    classes = [c for b in base for c in b.classes]
    out = []
    for phase in phases:
        for device in devices:
            kept = draw(st.lists(st.sampled_from(classes), max_size=len(classes), unique_by=lambda c: c.op_class))
            out.append(base[0].model_copy(update={"phase": phase, "device_id": device, "classes": kept}))
    return out


@st.composite
def reports(draw, healthy: Report, eager: Report) -> Report:
    phases = draw(st.sampled_from(PHASE_SETS))
    devices = draw(st.sampled_from(DEVICE_SETS))
    template = eager.findings[0]
    findings = [template.model_copy(update={
        "title": f"{template.title} #{i} <{severity}> | *{phase or 'run'}*",
        "severity": severity, "phase": phase,
        "subject": draw(st.sampled_from([None, "", f"GPU {device}", "aten::mm|bmm <fused>"])),
    }) for i, (severity, phase, device) in enumerate(draw(st.lists(
        st.tuples(st.sampled_from(list(Severity)), st.sampled_from(phases), st.sampled_from(devices)), max_size=5)))]
    window = [healthy.window[0].model_copy(update={"device_id": d, "parts": draw(st.sampled_from(
        [healthy.window[0].parts, healthy.window[0].parts[:-1]]))}) for d in devices] if healthy.window else []
    metrics = list(healthy.key_metrics)
    if metrics and draw(st.booleans()):
        at = draw(st.integers(0, len(metrics) - 1))
        metrics[at] = metrics[at].model_copy(update={"value": None, "past": None, "display": UNMEASURED})
    report = healthy.model_copy(update={
        "findings": findings, "window": window, "key_metrics": metrics,
        "operations": _operations(draw, healthy.operations, phases, devices) if healthy.operations else [],
    })
    emptied = draw(st.sets(st.sampled_from(EMPTIED), max_size=4))
    return report.model_copy(update={field: type(getattr(report, field))() for field in emptied})


def _md_cells(row: str) -> list[str]:
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return re.split(r"(?<!\\)\|", row)


def _md_table_widths(md: str) -> list[list[int]]:
    """The column count of each row, per table (a table: a header row, a ---| rule, its rows)."""
    tables, lines, i = [], md.splitlines(), 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            rows = [lines[i], lines[i + 1]]
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            tables.append([len(_md_cells(r)) for r in rows])
        else:
            i += 1
    return tables


def _check(report: Report) -> None:
    text = {fmt: render(report, fmt) for fmt in FORMATS}
    text["colour"] = render(report, "terminal", colour=True)
    tables = _md_table_widths(text["md"])
    assert all(len(set(widths)) == 1 for widths in tables), tables
    if report.operations:
        assert "### Where the GPU time goes by operation" in text["md"]
    dumped = json.loads(text["json"])
    assert [f["title"] for f in dumped["findings"]] == [f.title for f in report.findings]
    if any(m.value is None for m in report.key_metrics):
        assert UNMEASURED in text["md"] and UNMEASURED in text["html"]
    for f in report.findings:
        assert f.title in text["md"]
        assert str(markupsafe.escape(f.title)) in text["html"]
        for terminal in (text["terminal"], text["colour"]):
            assert f.rule in terminal or "more in the Markdown, HTML or JSON report" in terminal


def test_every_format_renders_every_shape_of_report(examples):
    healthy, eager = examples
    assert eager.findings, "the eager example lost its finding: the varied reports would have none"

    @settings(max_examples=25, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(reports(healthy, eager))
    def renders(report: Report) -> None:
        _check(report)

    renders()


def test_a_ragged_markdown_table_is_caught():
    """The table check itself: a row with a cell too many is told apart from a well-formed table."""
    good = "| Class | Run |\n|---|---|\n| gemm | 50 % |\n"
    assert _md_table_widths(good) == [[2, 2, 2]]
    assert _md_table_widths(good + "| attention | 20 % | 1 ms |\n") == [[2, 2, 2, 3]]
