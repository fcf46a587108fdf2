"""The section registry (reports/templates/sections.yaml): the fact tables of the single-profile reports as data,
resolved for one format. The `section` macro of _parts.md.j2 and _parts.html.j2 draws each entry; which rows and
where is the report template's."""

from __future__ import annotations

import functools
import importlib.resources
from typing import Any

import yaml

FORMATS = ("md", "html")
# The cell macros of _parts.{md,html}.j2 (`cell`); those whose cells are right-aligned in HTML unless told.
CELL_FORMATS = ("num", "dur", "pct", "percent", "fixed2", "plain", "text", "short_name", "labelled", "at_seconds",
                "phase", "matched_texts", "gpu_scope", "samples", "launch_config", "where", "detail", "share_bar")
_NUMERIC = {"num", "dur", "pct", "percent", "fixed2", "at_seconds", "samples", "launch_config"}
_SECTION_KEYS = {"fact", "placed", "title", "rows", "shown_when", "per_phase", "intro", "note", "columns"}
_COLUMN_KEYS = {"title", "value", "format", "width", "none", "numeric", "name", "tooltip", "tip", "only", "label_of",
                "labels"}


class SectionError(ValueError):
    """sections.yaml does not say what the section macros need (a bundled file: a test keeps it right)."""


def _for(value: Any, fmt: str) -> Any:
    """A value that may differ by format ({md: ..., html: ...}) as it is in `fmt` (None when only the other has it)."""
    if isinstance(value, dict) and value.keys() <= set(FORMATS):
        return value.get(fmt)
    return value


def _column(key: str, spec: dict[str, Any], fmt: str) -> dict[str, Any] | None:
    unknown = set(spec) - _COLUMN_KEYS
    if unknown or spec.get("format") not in CELL_FORMATS or not spec.get("title") or not spec.get("value"):
        raise SectionError(f"sections.yaml: section {key!r}, column {spec.get('title')!r}: needs title, value and a "
                           f"format of {', '.join(CELL_FORMATS)}; unknown keys: {sorted(unknown) or 'none'}")
    if spec.get("only", fmt) != fmt:
        return None
    col = {k: _for(v, fmt) for k, v in spec.items() if k not in ("only", "labels")}
    col["labels"] = spec.get("labels") or {}
    col.setdefault("numeric", spec["format"] in _NUMERIC)
    for optional in ("width", "none", "tip", "label_of"):
        col.setdefault(optional, None)
    col.setdefault("name", False)
    col.setdefault("tooltip", False)
    return col


def _section(key: str, spec: dict[str, Any], fmt: str) -> dict[str, Any]:
    unknown = set(spec) - _SECTION_KEYS
    if unknown or not spec.get("fact") or not spec.get("columns"):
        raise SectionError(f"sections.yaml: section {key!r} needs fact and columns; unknown keys: "
                           f"{sorted(unknown) or 'none'}")
    columns = [c for c in (_column(key, col, fmt) for col in spec["columns"]) if c is not None]
    return {"id": key, "fact": spec["fact"], "title": _for(spec.get("title", ""), fmt),
            "rows": _for(spec.get("rows"), fmt),
            "shown_when": spec.get("shown_when"), "per_phase": bool(spec.get("per_phase")),
            "placed": bool(spec.get("placed")),
            "intro": _for(spec.get("intro"), fmt), "note": _for(spec.get("note"), fmt), "columns": columns}


@functools.cache
def raw_registry() -> dict[str, dict[str, Any]]:
    """sections.yaml as written."""
    text = importlib.resources.files("nsys_diagnose.templates").joinpath("sections.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise SectionError("sections.yaml: a mapping of section name -> section")
    return data


@functools.cache
def registry(fmt: str) -> dict[str, dict[str, Any]]:
    """Each section as the `fmt` (md or html) section macro draws it."""
    return {key: _section(key, spec, fmt) for key, spec in raw_registry().items()}


def tables(facts: dict[str, list[dict[str, Any]]], fmt: str) -> dict[str, list[dict[str, Any]]]:
    """Each section's rows in a report's `facts`: none when its fact has none, or when no row has a value in its
    `shown_when` column (the macro cuts them to the entry's `rows`)."""
    out = {}
    for key, entry in registry(fmt).items():
        rows = facts.get(entry["fact"]) or []
        shown = not entry["shown_when"] or any(row.get(entry["shown_when"]) for row in rows)
        out[key] = rows if shown else []
    return out


def facts_read(fmt: str) -> set[str]:
    """The reported facts the `fmt` (md or html) section tables read, per phase too (sections.yaml `fact`)."""
    return {entry["fact"] for entry in registry(fmt).values()}
