"""Render any report: render(doc, fmt, colour=...) for a single-profile Report, a multi-rank RunReport or a
Comparison, as terminal text, GitHub Markdown, self-contained HTML or JSON.

Each kind of report has one template per format, reports/templates/{report,run,compare}.{txt,md,html}.j2, built
from the shared parts in _parts.{txt,md,html}.j2 and _charts.html.j2. JSON is the model dump (schemas: schema.py).

What the templates show is decided here, before they run, by the views step: views.py (severity styles, the
tables with explicit missing cells, the finding the verdict leads with, the profile's header, a comparison's
gates), textviews.py (the terminal's composed lines for one plan) and svgviews.py (where the charts' text and
axes go). The templates loop over those values and print them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import charts, sections, steps, svgviews, textviews, timeline, views
from ..model.comparemodel import Comparison
from .environment import TERMINAL_WIDTH, environment, painter
from ..model.document import Document
from ..model.report import Report
from ..model.runmodel import RunReport

FORMATS = ("terminal", "md", "html", "json")
GITHUB_COMMENT_LIMIT = 65_536
TERMINAL_LINES = 48  # a single profile's terminal summary fits one screen: TERMINAL_LINES x TERMINAL_WIDTH
_EXTENSIONS = {"terminal": "txt", "md": "md", "html": "html"}
_TRUNCATED = "\n\n_Report truncated to fit GitHub's comment limit; see the JSON or HTML report for everything._\n"
_CUT_TO_SCREEN = "  … cut to fit the screen: --format md or html shows everything."

Context = Callable[[Any, str, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class _Kind:
    """How one kind of report is rendered: its templates, the extra values they need, and successively shorter
    plans tried until the terminal text fits one screen (`screen`) or the Markdown fits a GitHub comment."""

    template: str
    context: Context
    terminal_plans: tuple[dict[str, Any], ...] = ({},)
    markdown_plans: tuple[dict[str, Any], ...] = ({},)
    screen: bool = False


def _report_context(report: Report, fmt: str, plan: dict[str, Any]) -> dict[str, Any]:
    context = {**steps.as_context(report), **views.report_view(report)}
    if fmt == "terminal":
        return {**context, **textviews.report_lines(report, context["step_rows"], context["no_steps"], plan)}
    if fmt in sections.FORMATS:
        context.update(sections=sections.registry(fmt), tables=sections.tables(report.facts, fmt))
    if fmt == "html":
        kineto = report.profile.source_format == "kineto"
        context.update(ch=svgviews.report_charts(charts.charts(report)),
                       excerpt=svgviews.excerpt(timeline.excerpt(report), kineto))
    if fmt == "md":
        context.update(strip=svgviews.text_strip(timeline.text_strip(report)))
    return context


def _run_context(run: RunReport, fmt: str, plan: dict[str, Any]) -> dict[str, Any]:
    context = views.run_view(run)
    if fmt == "terminal":
        context.update(overrides_line=textviews.overrides_line(run.overrides),
                       listed_findings=[textviews.finding_lines(f) for f in run.findings])
    if fmt == "html":
        context.update(bars=svgviews.rank_bars(charts.rank_bars(run)))
    return context


def _compare_context(comparison: Comparison, fmt: str, plan: dict[str, Any]) -> dict[str, Any]:
    context = views.comparison_view(comparison)
    if fmt == "html":
        context.update(chart=svgviews.compare_timeline(charts.compare_timeline(comparison.timeline)))
    return context


_KINDS: dict[type, _Kind] = {
    Report: _Kind(
        "report", _report_context,
        # `phases`: which NVTX texts each phase matched, kept longer than the window breakdown: it says whether the
        # per-phase numbers (decode steps, step time, per-phase findings) count the right ranges at all.
        # `phase_lines`: lines for each phase's verdict line (Verdict.phases). When space runs short the window
        # breakdown goes first, then the reasons of skipped rules and a fourth finding, then the batch projection
        # (the line under the verdict: what a larger batch would buy), then the step statistics (`steps`: how each
        # phase's steps run, and whether the phases were inferred), then the class breakdown (`operations`: one
        # line per phase), then the key metrics.
        terminal_plans=(dict(full=3, listed=6, msg_lines=4, step_lines=3, skipped=3, metrics=True, window=True,
                             phases=True, steps=True, operations=True, batch_what_if=True, phase_lines=2),
                        dict(full=2, listed=5, msg_lines=3, step_lines=2, skipped=2, metrics=True, window=True,
                             phases=True, steps=True, operations=True, batch_what_if=True, phase_lines=2),
                        dict(full=1, listed=4, msg_lines=2, step_lines=1, skipped=1, metrics=True, window=True,
                             phases=True, steps=True, operations=True, batch_what_if=True),
                        dict(full=1, listed=4, msg_lines=2, step_lines=1, skipped=1, metrics=True, window=False,
                             phases=True, steps=True, operations=True, batch_what_if=True),
                        dict(full=1, listed=3, msg_lines=2, step_lines=1, skipped=0, metrics=True, window=False,
                             phases=True, steps=True, operations=True, batch_what_if=True),
                        dict(full=1, listed=3, msg_lines=2, step_lines=1, skipped=0, metrics=True, window=False,
                             phases=True, steps=True, operations=True, batch_what_if=False),
                        dict(full=1, listed=3, msg_lines=2, step_lines=1, skipped=0, metrics=True, window=False,
                             phases=True, steps=False, operations=True, batch_what_if=False),
                        dict(full=1, listed=3, msg_lines=2, step_lines=1, skipped=0, metrics=True, window=False,
                             phases=True, steps=False, operations=False, batch_what_if=False),
                        dict(full=1, listed=3, msg_lines=2, step_lines=1, skipped=0, metrics=False, window=False,
                             phases=False, steps=False, operations=False, batch_what_if=False)),
        markdown_plans=(dict(top_kernels=15, details=True), dict(top_kernels=8, details=True),
                        dict(top_kernels=5, details=False), dict(top_kernels=3, details=False)),
        screen=True),
    # The per-rank finding lists go first when the comment is too long.
    RunReport: _Kind("run", _run_context, markdown_plans=(dict(rank_findings=True), dict(rank_findings=False))),
    Comparison: _Kind("compare", _compare_context),
}


def _kind(doc: Document) -> _Kind:
    for cls, kind in _KINDS.items():
        if isinstance(doc, cls):
            return kind
    raise TypeError(f"cannot render a {type(doc).__name__}")


def _render(doc: Document, kind: _Kind, fmt: str, plan: dict[str, Any], **extra: Any) -> str:
    env = environment(autoescape=fmt == "html")
    template = env.get_template(f"{kind.template}.{_EXTENSIONS[fmt]}.j2")
    return template.render(r=doc, severities=views.SEVERITIES, assessments=views.SHOWN_ASSESSMENTS,
                           **kind.context(doc, fmt, plan), **plan, **extra)


def _terminal(doc: Document, kind: _Kind, colour: bool) -> str:
    paint = painter(colour)
    text = ""
    for plan in kind.terminal_plans:
        text = _render(doc, kind, "terminal", plan, paint=paint)
        if not kind.screen or len(text.splitlines()) <= TERMINAL_LINES:
            return text
    lines = text.splitlines()[: TERMINAL_LINES - 1]
    return "\n".join(lines + [_CUT_TO_SCREEN]) + "\n"


def _markdown(doc: Document, kind: _Kind, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """The first plan whose comment fits GitHub's limit; the report says what was cut."""
    text = ""
    for i, plan in enumerate(kind.markdown_plans):
        text = _render(doc, kind, "md", plan, cut=i > 0)
        if len(text) <= limit:
            return text
    return text[: limit - len(_TRUNCATED)] + _TRUNCATED


# Characters json.dumps(ensure_ascii=False) would write raw although a terminal or editor acts on them: DEL and
# C1 controls (0x9b is CSI), bidi overrides/isolates/marks and line/paragraph separators. They can only occur
# inside JSON strings, so writing them as \uXXXX escapes keeps the document's value identical.
_JSON_INERT = re.compile("[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _json(doc: Document) -> str:
    text = json.dumps(doc.model_dump(mode="json"), indent=2, ensure_ascii=False, allow_nan=False)
    return _JSON_INERT.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


def render(doc: Document, fmt: str, *, colour: bool = False) -> str:
    """`doc` (Report, RunReport or Comparison) in `fmt` (one of FORMATS); `colour`: ANSI colours in the
    terminal text."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    if fmt == "json":
        return _json(doc)
    kind = _kind(doc)
    if fmt == "terminal":
        return _terminal(doc, kind, colour)
    if fmt == "md":
        return _markdown(doc, kind)
    return _render(doc, kind, "html", {})


__all__ = ["FORMATS", "GITHUB_COMMENT_LIMIT", "TERMINAL_LINES", "TERMINAL_WIDTH", "render"]
