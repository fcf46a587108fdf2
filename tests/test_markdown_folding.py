"""A PR comment shows the finding the verdict names in full and folds the others, so it stays short."""

from __future__ import annotations

import pytest

from conftest import scenario_analysis
from nsys_diagnose.reports.render import render


def test_the_primary_finding_is_open_and_the_others_are_folded():
    _, report = scenario_analysis("reference_batch1_decode")
    assert report.verdict.rule == "launch-bound" and len(report.findings) >= 2
    md = render(report, "md")
    findings = md[md.index("### Findings"):md.index("### Per GPU")]
    primary = findings.index("GPU starved by kernel-launch overhead")
    folded = findings.index("<details><summary>1 more finding: small-grids (GPU 0)</summary>")
    assert primary < folded < findings.index("Kernel grids too small") < findings.index("</details>")


@pytest.mark.slow
def test_without_a_primary_finding_nothing_is_folded():
    _, report = scenario_analysis("busy_gpu_sync_overhead")
    assert report.verdict.rule is None and report.findings
    md = render(report, "md")
    findings = md[md.index("### Findings"):md.index("### Per GPU")]
    assert "<details>" not in findings
    assert findings.count("#### ") == len(report.findings)


def test_the_primary_comes_first_even_when_a_louder_finding_is_listed_before_it():
    _, report = scenario_analysis("reference_batch1_decode")
    louder = report.findings[1].model_copy(update={"severity": "error"})
    reordered = report.model_copy(update={"findings": [louder, *report.findings]})
    md = render(reordered, "md")
    findings = md[md.index("### Findings"):md.index("### Per GPU")]
    assert findings.index("GPU starved by kernel-launch overhead") < findings.index("<details>")
    assert findings.index("<details><summary>2 more findings") < findings.index("Error: Kernel grids too small")
