"""Every report renders in every format, whatever its shape: 1-8 GPUs, no, one or several phases, operation
classes that only some blocks (phase or GPU) have, no findings, information only, a capture verdict, a start-up
or none, what-ifs or none. The shapes are built from one diagnosed scenario by changing the report model, so a
template that assumes a shape the scenarios happen to share fails here (a Markdown operations table once did,
on any run whose phases ran different classes)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from conftest import scenario_analysis
from nsys_diagnose.model.measures import ClassShare, GpuWindow, OperationBreakdown, StartUp
from nsys_diagnose.model.report import Report
from nsys_diagnose.model.verdict import Verdict
from nsys_diagnose.reports.render import FORMATS, render
from nsys_diagnose.base.vocabulary import Kind, Severity


def _base() -> Report:
    return scenario_analysis("prefill_decode_nvtx")[1].model_copy(deep=True)


def _blocks(report: Report, gpus: int, phases: tuple[str | None, ...]) -> list[OperationBreakdown]:
    """One operations block per phase and GPU; each block after the first lacks one more class than the last, so
    every class is missing from some block."""
    classes = report.operations[0].classes
    blocks = []
    for i, (phase, device) in enumerate((p, d) for p in phases for d in range(gpus)):
        kept = classes[: max(1, len(classes) - i)] if i % 2 == 0 else classes[i % len(classes):] or classes[:1]
        blocks.append(OperationBreakdown(phase=phase, device_id=device, total_ns=sum(c.total_ns for c in kept),
                                         classes=[ClassShare(**c.model_dump()) for c in kept],
                                         line=f"{phase or 'run'} GPU {device}: …"))
    return blocks


def _gpus(n: int, phases: tuple[str | None, ...] = (None,)) -> Callable[[Report], None]:
    def shape(report: Report) -> None:
        report.operations = _blocks(report, n, phases)
        window = report.window[0]
        report.window = [GpuWindow(device_id=d, window_ns=window.window_ns, parts=window.parts) for d in range(n)]
        report.profile.devices = [{**report.profile.devices[0], "device_id": d} for d in range(n)]
        if not any(phases):
            report.verdict.phases = []
            report.phase_facts = {}
    return shape


def _no_findings(report: Report) -> None:
    report.findings = []
    report.verdict = Verdict(headline="No bottleneck: the GPU is busy.")
    report.batch_what_if = None


def _info_only(report: Report) -> None:
    report.findings = [f.model_copy(update={"severity": Severity.INFO, "what_if": None}) for f in report.findings]
    report.verdict = Verdict(headline="No bottleneck costs 5 % or more.")
    report.batch_what_if = None


def _capture_verdict(report: Report) -> None:
    capture = report.findings[0].model_copy(update={
        "rule": "capture-too-short", "title": "Capture too short", "category": "capture", "kind": Kind.CAPTURE,
        "impact": None, "run_impact": None, "what_if": None, "phase": None, "subject": None})
    report.findings = [capture]
    report.verdict = Verdict(primary="capture", rule="capture-too-short", headline="The capture is too short.")
    report.operations, report.window, report.key_metrics = [], [], []
    report.throughput = report.batch_what_if = report.startup = None
    report.facts = {}


def _startup(report: Report) -> None:
    report.startup = StartUp(found_by="shape", startup_ns=5_000_000, startup_fraction=0.2, load_ns=4_000_000,
                             load_bytes=512 << 20, load_copy_count=40, load_gbps=12.5, pageable_share=1.0,
                             alloc_count=3, warmup_ns=0, warmup_kernel_count=0, graph_capture_count=0,
                             steady_ns=20_000_000, judged_after=True,
                             line="Start-up 5.0 ms: 512 MiB copied in; the verdict judges the 20.0 ms after it.")


def _no_what_ifs(report: Report) -> None:
    for f in report.findings:
        f.what_if = None
    report.batch_what_if = None


SHAPES: dict[str, Callable[[Report], None]] = {
    "as diagnosed": lambda r: None,
    "1 GPU, no phase": _gpus(1),
    "2 GPUs, no phase": _gpus(2),
    "8 GPUs, no phase": _gpus(8),
    "1 GPU, one phase": _gpus(1, ("decode",)),
    "2 GPUs, two phases": _gpus(2, ("prefill", "decode")),
    "4 GPUs, three phases": _gpus(4, ("prefill", "decode", "other")),
    "no findings": _no_findings,
    "information only": _info_only,
    "capture verdict": _capture_verdict,
    "start-up reported apart": _startup,
    "no what-if": _no_what_ifs,
    "start-up and 8 GPUs": lambda r: (_startup(r), _gpus(8, ("prefill", "decode"))(r)),
}

# What each format must show of any report: its verdict, and its findings when it has any.
MARKERS = {"terminal": ("VERDICT",), "md": ("> ",), "html": ("<html", "</html>"), "json": ('"verdict"',)}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_renders_in_every_format_with_its_sections(shape, fmt):
    report = _base()
    SHAPES[shape](report)
    text = render(report, fmt, colour=False)
    for marker in MARKERS[fmt]:
        assert marker in text, f"{shape}: the {fmt} report lacks {marker!r}"
    for f in report.findings:
        if fmt != "json" and f.severity.at_least(Severity.WARNING):
            assert f.title in text or f.rule in text, f"{shape}: the {fmt} report does not show {f.rule}"
    if fmt == "json":
        assert Report.model_validate(json.loads(text)).verdict.headline == report.verdict.headline
    classes = [{c.op_class for c in b.classes} for b in report.operations]
    if fmt == "md" and classes and set.union(*classes) != set.intersection(*classes):
        # the operations table has a column per block and a dash where a block lacks the class
        assert " – |" in text, f"{shape}: no empty cell in the Markdown operations table"
