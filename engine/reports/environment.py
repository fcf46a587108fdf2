"""The Jinja environment of the report templates (reports/templates/): loader, filters, and what makes untrusted
text (kernel names, NVTX labels, file names) inert in each format: HTML is autoescaped and every `{{ }}` loses its
control characters; the terminal and Markdown templates run each name through `term` or `md`."""

from __future__ import annotations

import functools
import importlib.resources
import re
import textwrap
from collections.abc import Callable, Sequence

import jinja2
import markupsafe

from ..model.metrics import MetricRow
from .views import metric_cells, matched_texts, section_view
from ..base.text import distinct_short_names, md_inline, plural, shorten, strip_controls, term
from ..base.units import column_unit, fmt_bytes, fmt_duration, fmt_number, fmt_ratio, fmt_value

TERMINAL_WIDTH = 100  # columns of the terminal summary
ANSI = {"red": "\x1b[31m", "yellow": "\x1b[33m", "green": "\x1b[32m", "cyan": "\x1b[36m", "bold": "\x1b[1m",
        "dim": "\x1b[2m", "reset": "\x1b[0m"}
Paint = Callable[[str, str], str]


def painter(colour: bool) -> Paint:
    """paint(text, style): the text in an ANSI style when colour is on, else unchanged."""
    def paint(text: str, style: str) -> str:
        return f"{ANSI[style]}{text}{ANSI['reset']}" if colour and style else text

    return paint


_CODE_SPAN = re.compile(r"`([^`]+)`")


def code_spans(text: object) -> markupsafe.Markup:
    """Text whose `backticked` parts (commands, flags, table names in skip reasons) become <code>: escaped
    first, so nothing of the text itself can become markup."""
    escaped = str(markupsafe.escape(strip_controls(text)))
    return markupsafe.Markup(_CODE_SPAN.sub(r"<code>\1</code>", escaped))


def _inert(value: object) -> object:
    """Every `{{ }}` of an HTML template: control characters, ANSI escapes and bidi overrides of untrusted text
    become U+FFFD before autoescaping; markup made by filters is kept."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return strip_controls(value)
    return value


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


def metric_grid(rows: Sequence[MetricRow], paint: Paint, columns: int = 2, indent: int = 2) -> str:
    """The key metrics as aligned 'label  value' cells, `columns` to a line; a line that would be wider than the
    terminal gets one cell per line. Values past their threshold are red when colour is on."""
    cells = metric_cells(rows)
    labels = [term(c.short_label) for c in cells]
    values = [term(c.display) for c in cells]
    label_w = [max((len(labels[i]) for i in range(k, len(cells), columns)), default=0) for k in range(columns)]
    value_w = [max((len(values[i]) for i in range(k, len(cells), columns)), default=0) for k in range(columns)]

    def line(members: list[int], colour: bool) -> str:
        parts = []
        for k, i in enumerate(members):
            pad = "" if i == members[-1] else " " * (value_w[k] - len(values[i]))
            shown = paint(values[i], "red" if cells[i].past else "") if colour else values[i]
            parts.append(f"{labels[i].ljust(label_w[k])}  {shown}{pad}")
        return " " * indent + "    ".join(parts)

    out = []
    for start in range(0, len(cells), columns):
        members = list(range(start, min(start + columns, len(cells))))
        if len(line(members, colour=False)) <= TERMINAL_WIDTH:
            out.append(line(members, colour=True))
        else:
            out += [line([i], colour=True) for i in members]
    return "\n".join(out)


def bar_width(share: float | None, width: float) -> float:
    """The length of a share's bar `width` long, to a tenth."""
    return round((share or 0) * width, 1)


def templates_dir() -> str:
    return str(importlib.resources.files("nsys_diagnose.templates"))


# One environment per process and kind: Jinja keeps the templates it compiled (the costly part of rendering)
# and recompiles one only when its file changes.
@functools.lru_cache(maxsize=None)
def environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir()), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, finalize=_inert if autoescape else None)
    env.filters.update(dur=fmt_duration, pct=fmt_ratio, bytes=fmt_bytes, num=fmt_number, md=md_inline,
                       term=term, shorten=shorten, para=para,
                       percent=lambda v: "n/a" if v is None else f"{float(v):.1f} %", code_spans=code_spans,
                       value=lambda v, col: fmt_value(v, column_unit(col)), plural=plural,
                       distinct_names=distinct_short_names, bar_width=bar_width)
    env.globals.update(metric_cells=metric_cells, metric_grid=metric_grid, matched_texts_of=matched_texts,
                       section_view=section_view)
    return env
