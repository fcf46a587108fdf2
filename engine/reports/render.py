"""Render a Report with the Jinja templates: terminal text, GitHub Markdown, self-contained HTML, JSON."""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import sys
import textwrap
from itertools import groupby
from pathlib import Path

import jinja2
import markupsafe

from . import charts
from .model import Report
from ..cli.output import is_stdout
from ..text import md_inline, shorten, strip_controls, term
from ..vocabulary import Severity
from ..units import column_unit, fmt_bytes, fmt_duration, fmt_number, fmt_ratio, fmt_value

GITHUB_COMMENT_LIMIT = 65_536
TERMINAL_LINES = 40    # the terminal summary fits one screen: at most this many lines ...
TERMINAL_WIDTH = 100   # ... of at most this many columns
FORMATS = ("terminal", "md", "html", "json")

_ANSI = {"red": "\x1b[31m", "yellow": "\x1b[33m", "green": "\x1b[32m", "cyan": "\x1b[36m", "bold": "\x1b[1m",
         "dim": "\x1b[2m", "reset": "\x1b[0m"}
SEVERITY_COLOUR = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _templates_dir() -> str:
    return str(importlib.resources.files("nsys_diagnose.templates"))


def _inert(value: object) -> object:
    """Every `{{ }}` of the HTML template: control characters, ANSI escapes and bidi overrides of untrusted
    text (kernel names, NVTX labels) become U+FFFD before autoescaping; markup made by filters is kept."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return strip_controls(value)
    return value


def _environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_templates_dir()), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, finalize=_inert if autoescape else None)
    env.filters.update(dur=fmt_duration, pct=fmt_ratio, bytes=fmt_bytes, num=fmt_number, md=md_inline,
                       term=term, shorten=shorten, value=lambda v, col: fmt_value(v, column_unit(col)))
    return env


def para(text: object, indent: int = 2, max_lines: int | None = None, hang: int = 0,
         width: int = TERMINAL_WIDTH) -> str:
    """`text` (made inert) wrapped to `width` columns, first line indented by `indent`, the others by
    indent + hang, cut to `max_lines` with an ellipsis."""
    lines = textwrap.wrap(term(text), width=width, initial_indent=" " * indent,
                          subsequent_indent=" " * (indent + hang), break_on_hyphens=False) or [" " * indent]
    if max_lines and len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: width - 1].rstrip() + "…"
    return "\n".join(lines)


# Successively shorter terminal summaries; the first that fits TERMINAL_LINES is printed.
_TERMINAL_PLANS = (
    dict(full=3, listed=6, msg_lines=4, step_lines=3, skipped=3, metrics=True),
    dict(full=2, listed=5, msg_lines=3, step_lines=2, skipped=2, metrics=True),
    dict(full=1, listed=4, msg_lines=2, step_lines=1, skipped=1, metrics=True),
    dict(full=1, listed=3, msg_lines=2, step_lines=1, skipped=0, metrics=False),
)


def render_terminal(report: Report, colour: bool = False) -> str:
    """A summary that fits one screen (TERMINAL_LINES x TERMINAL_WIDTH, colour codes aside)."""
    def c(text: str, style: str) -> str:
        return f"{_ANSI[style]}{text}{_ANSI['reset']}" if colour else text

    env = _environment(autoescape=False)
    env.filters["para"] = para
    template = env.get_template("terminal.txt.j2")
    # Skipped rules grouped by reason: several rules usually miss the same table.
    skipped = [(reason, [s.rule for s in group])
               for reason, group in groupby(sorted(report.skipped, key=lambda s: (s.reason or "", s.rule)),
                                            key=lambda s: s.reason or "")]
    text = ""
    for plan in _TERMINAL_PLANS:
        text = template.render(r=report, c=c, sev_colour=SEVERITY_COLOUR, skipped_groups=skipped, **plan)
        if len(text.splitlines()) <= TERMINAL_LINES:
            return text
    lines = text.splitlines()[: TERMINAL_LINES - 1]
    return "\n".join(lines + ["  … cut to fit the screen: --format md or html shows everything."]) + "\n"


def render_markdown(report: Report, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    env = _environment(autoescape=False)
    template = env.get_template("report.md.j2")
    # Cut the longest optional sections until the comment fits GitHub's limit, and say what was cut.
    plans = [dict(top_kernels=15, details=True), dict(top_kernels=8, details=True),
             dict(top_kernels=5, details=False), dict(top_kernels=3, details=False)]
    text = ""
    for i, plan in enumerate(plans):
        text = template.render(r=report, cut=i > 0, **plan)
        if len(text) <= limit:
            return text
    note = "\n\n_Report truncated to fit GitHub's comment limit; see the JSON or HTML report for everything._\n"
    return text[: limit - len(note)] + note


def render_html(report: Report) -> str:
    """One self-contained page: inline CSS and SVG, no script, a CSP that forbids every network load."""
    env = _environment(autoescape=True)
    return env.get_template("report.html.j2").render(r=report, ch=charts.charts(report))


# Characters json.dumps(ensure_ascii=False) would write raw although a terminal or editor acts on them: DEL and
# C1 controls (0x9b is CSI), bidi overrides/isolates/marks and line/paragraph separators. They can only occur
# inside JSON strings, so writing them as \uXXXX escapes keeps the document's value identical.
_JSON_INERT = re.compile("[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def render_json(report: Report) -> str:
    text = json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False, allow_nan=False)
    return _JSON_INERT.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


def render(report: Report, fmt: str, *, colour: bool = False) -> str:
    if fmt == "terminal":
        return render_terminal(report, colour)
    if fmt == "md":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report)
    if fmt == "json":
        return render_json(report)
    raise ValueError(f"unknown format {fmt!r}")


def wants_colour(choice: str, output: Path | None) -> bool:
    """--color auto|always|never: auto means colour only on a terminal, and never when NO_COLOR is set."""
    if choice == "always":
        return True
    return choice == "auto" and is_stdout(output) and sys.stdout.isatty() and "NO_COLOR" not in os.environ
