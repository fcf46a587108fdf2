"""The generated reference of the canonical tables in engine/reading/nsys-schema.md (between its markers), and the
command that prints or rewrites it (`python -m nsys_diagnose.reading.canonical_doc`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .canonical import SIDE_TABLES, STORED, VIEWS, Column


BEGIN_MARKER = "<!-- BEGIN canonical-tables: generated from engine/reading/canonical.py, do not edit by hand -->"
END_MARKER = "<!-- END canonical-tables -->"
UPDATE_COMMAND = "python -m nsys_diagnose.reading.canonical_doc --update engine/reading/nsys-schema.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _columns_table(columns: tuple[Column, ...]) -> list[str]:
    lines = ["| Column | Type | Unit | Description |", "|---|---|---|---|"]
    lines += [f"| `{c.name}` | {c.type} | {_cell(c.unit) or '–'} | {_cell(c.doc)} |" for c in columns]
    return lines


def markdown() -> str:
    """The reference of every canonical view and stored table, between the markers."""
    lines = [BEGIN_MARKER, ""]
    for view in VIEWS.values():
        lines += [f"#### `{view.name}`", "", _cell(view.doc), "", *_columns_table(view.columns), ""]
        stored = STORED.get(view.name)
        if stored is not None:
            derived = ", ".join(f"`{name}`" for name in stored.derived)
            extra = ", ".join(f"`{c.name}` {c.type}" for c in stored.extra)
            lines += [f"Stored without {derived}, which the view computes; stored with {extra} instead.", ""]
    lines += ["#### Stored side tables", "", "| Table | Columns | Holds |", "|---|---|---|"]
    lines += [f"| `{t.name}` | {', '.join(f'`{c.name}` {c.type}' for c in t.columns)} | {_cell(t.doc)} |"
              for t in SIDE_TABLES.values()]
    lines += ["", END_MARKER]
    return "\n".join(lines) + "\n"


def replace_section(text: str, section: str) -> str:
    """`text` with the part from BEGIN_MARKER to END_MARKER (and its line end) replaced by `section`."""
    start, end = text.index(BEGIN_MARKER), text.index(END_MARKER)
    return text[:start] + section + text[end + len(END_MARKER):].removeprefix("\n")


def committed_section(text: str) -> str:
    start, end = text.index(BEGIN_MARKER), text.index(END_MARKER)
    return text[start:end + len(END_MARKER)] + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nsys_diagnose.reading.canonical_doc",
                                     description="Print or update the generated reference of the canonical tables.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print the generated section")
    what.add_argument("--update", metavar="FILE", type=Path, help="rewrite the generated section of FILE in place")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
        return 0
    text = args.update.read_text(encoding="utf-8")
    args.update.write_text(replace_section(text, markdown()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
