"""Render a multi-rank RunReport: terminal, GitHub Markdown, self-contained HTML (reports/templates/run.*.j2)
or JSON (the model dump, described by reports/templates/run.schema.json)."""

from __future__ import annotations

from . import charts
from .render import _ANSI, GITHUB_COMMENT_LIMIT, SEVERITY_COLOUR, _environment, para, render_json
from .runmodel import RunReport

FORMATS = ("terminal", "md", "html", "json")


def render_run_terminal(run: RunReport, colour: bool = False) -> str:
    def c(text: str, style: str) -> str:
        return f"{_ANSI[style]}{text}{_ANSI['reset']}" if colour else text

    env = _environment(autoescape=False)
    env.filters["para"] = para
    versions = sorted({r.nsys_version for r in run.ranks if r.nsys_version})
    return env.get_template("run.txt.j2").render(r=run, c=c, sev_colour=SEVERITY_COLOUR, versions=versions)


def render_run_markdown(run: RunReport, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    env = _environment(autoescape=False)
    template = env.get_template("run.md.j2")
    text = ""
    for rank_findings in (True, False):  # drop the per-rank finding lists first when the comment is too long
        text = template.render(r=run, rank_findings=rank_findings)
        if len(text) <= limit:
            return text
    note = "\n\n_Report truncated to fit GitHub's comment limit; see the JSON or HTML report for everything._\n"
    return text[: limit - len(note)] + note


def render_run_html(run: RunReport) -> str:
    env = _environment(autoescape=True)
    return env.get_template("run.html.j2").render(r=run, bars=charts.rank_bars(run))


def render_run(run: RunReport, fmt: str, *, colour: bool = False) -> str:
    if fmt == "terminal":
        return render_run_terminal(run, colour)
    if fmt == "md":
        return render_run_markdown(run)
    if fmt == "html":
        return render_run_html(run)
    if fmt == "json":
        return render_json(run)  # the same inert-JSON writer as the single-profile report
    raise ValueError(f"unknown format {fmt!r}")
