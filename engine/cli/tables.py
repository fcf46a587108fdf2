"""Rows of data as text: an aligned table for the terminal, CSV, JSON. Text from the export (kernel names,
NVTX labels) is made inert as in the reports: control characters and bidi overrides never reach a terminal."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

from ..base.text import strip_controls, term

ROW_FORMATS = ("terminal", "json", "csv")
_CELL_WIDTH = 60  # longer text (templated C++ kernel names) is shortened in the middle


def aligned(head: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> list[str]:
    """Lines of a table: columns two spaces apart, padded to their widest cell (`right`: right-aligned), the
    last column unpadded."""
    right = right or [False] * len(head)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        padded = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)]
        return "  ".join(padded).rstrip()

    return [line(head), *(line(r) for r in rows)]


def _number(value: float) -> str:
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.1f}" if abs(value) >= 1e5 else f"{value:.6g}"


def cell(value: Any) -> str:
    """One value for the terminal table."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value) if math.isfinite(value) else "NULL"
    if isinstance(value, (list, dict)):
        value = json.dumps(value, ensure_ascii=False)
    return term(value, _CELL_WIDTH)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def terminal_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    right = [any(_is_number(row.get(c)) for row in rows) for c in columns]
    return "\n".join(aligned([term(c) for c in columns], cells, right)) + "\n"


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, dict)):
        value = json.dumps(value, ensure_ascii=False)
    return strip_controls(value) if isinstance(value, str) else value


def csv_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([strip_controls(c) for c in columns])
    writer.writerows([[_csv_value(row.get(c)) for c in columns] for row in rows])
    return out.getvalue()


def json_document(data: Any) -> str:
    """JSON with every non-ASCII character escaped: the values stay exact, and no control or bidi character
    reaches a terminal raw."""
    return json.dumps(data, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
