"""Render a Report with the Jinja templates: terminal text, GitHub Markdown, JSON."""

from __future__ import annotations

import importlib.resources
import json
import os
import tempfile
from pathlib import Path

import jinja2

from .model import Report
from .text import md_inline, shorten, term
from .units import column_unit, fmt_bytes, fmt_duration, fmt_number, fmt_ratio, fmt_value

GITHUB_COMMENT_LIMIT = 65_536
FORMATS = ("terminal", "md", "json")

_ANSI = {"red": "\x1b[31m", "yellow": "\x1b[33m", "green": "\x1b[32m", "cyan": "\x1b[36m", "bold": "\x1b[1m",
         "dim": "\x1b[2m", "reset": "\x1b[0m"}
SEVERITY_COLOUR = {"error": "red", "warning": "yellow", "info": "cyan"}


def _templates_dir() -> str:
    return str(importlib.resources.files("nsys_diagnose.templates"))


def _environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_templates_dir()), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(dur=fmt_duration, pct=fmt_ratio, bytes=fmt_bytes, num=fmt_number, md=md_inline,
                       term=term, shorten=shorten, value=lambda v, col: fmt_value(v, column_unit(col)))
    return env


def render_terminal(report: Report, colour: bool = False) -> str:
    def c(text: str, style: str) -> str:
        return f"{_ANSI[style]}{text}{_ANSI['reset']}" if colour else text

    env = _environment(autoescape=False)
    return env.get_template("terminal.txt.j2").render(r=report, c=c, sev_colour=SEVERITY_COLOUR)


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


def render_json(report: Report) -> str:
    return json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render(report: Report, fmt: str, *, colour: bool = False) -> str:
    if fmt == "terminal":
        return render_terminal(report, colour)
    if fmt == "md":
        return render_markdown(report)
    if fmt == "json":
        return render_json(report)
    raise ValueError(f"unknown format {fmt!r}")


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and rename: never a half-written report."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
