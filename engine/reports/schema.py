"""The JSON Schemas (draft 2020-12) of every JSON report, generated from the pydantic report models:

    report   `diagnose PROFILE --format json`              Report (engine/model)
    run      `diagnose RANK0 RANK1 ... --format json`       RunReport (engine/model/runmodel.py)
    compare  `diagnose compare BEFORE AFTER --format json`  Comparison (engine/model/comparemodel.py)

Fact columns are described by the fact headers (`-- @column`): the report's `metrics` and `facts` are typed by
pydantic models made from the reported facts (`-- @report`), the run's rows by the `rank_balance` cross-rank fact.
The shipped copies, reports/templates/{report,run,compare}.schema.json (installed under nsys_diagnose/templates/),
are this module's output; tests/test_reports.py fails when they differ. Regenerate after changing a model or a fact:

    python -m nsys_diagnose.reports.schema --write      # all three, into reports/templates/
    python -m nsys_diagnose.reports.schema [report|run|compare]   # print one
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..model.comparemodel import COMPARISON_SCHEMA_VERSION, Comparison
from ..facts.catalog import Fact, reported_facts
from ..facts.loading import load_facts
from ..facts.cross_rank import load_run_facts
from ..model.report import REPORT_SCHEMA_VERSION, Report
from ..model.runmodel import RUN_SCHEMA_VERSION, RunReport
from ..base.units import column_unit

SCHEMAS = ("report", "run", "compare")
_UNIT_TYPES: dict[str, Any] = {"ns": float, "bytes": float, "ratio": float, "percent": float, "gbps": float,
                               "per_s": float, "count": int, "id": int}
_UNIT_WORDS = {"ns": "nanoseconds", "bytes": "bytes", "ratio": "ratio, 0-1", "percent": "percent, 0-100",
               "gbps": "GB/s", "per_s": "per second", "count": "count"}


def _column_field(name: str, doc: str, required: bool) -> tuple[Any, Any]:
    """A fact column as a pydantic field: typed by its unit suffix, described by its `-- @column` line."""
    unit = column_unit(name)
    described = doc + (f" [{_UNIT_WORDS[unit]}]" if unit in _UNIT_WORDS else "")
    kind = _UNIT_TYPES[unit] | None if unit in _UNIT_TYPES else Any
    return kind, Field(... if required else None, description=described)


def _row_model(fact: Fact, name: str = "", *, required: bool = True) -> type[BaseModel]:
    columns: dict[str, Any] = {c.name: _column_field(c.name, c.doc, required) for c in fact.columns}
    return create_model(name or f"fact_{fact.name}", __config__=ConfigDict(extra="forbid"),
                        __doc__=f"One row of the `{fact.name}` fact.", **columns)


def _facts_model(facts: dict[str, Fact]) -> type[BaseModel]:
    """The report's `facts`: each reported fact's rows, team facts under their own names."""
    fields: dict[str, Any] = {
        name: (list[_row_model(facts[name])],  # type: ignore[misc]
               Field(default_factory=list, description=f"{facts[name].doc} (engine/facts/{name}.sql)"))
        for name in (f.name for f in reported_facts(facts))}
    return create_model("ReportFacts", __base__=_TeamFacts, __doc__=_TeamFacts.__doc__, **fields)


class _TeamFacts(BaseModel):
    """Rows of each reported fact; team facts (--rule-dir) appear under their own names."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, list[dict[str, Any]]]


def _one_line(node: Any) -> Any:
    """Descriptions from attribute docstrings on one line."""
    if isinstance(node, dict):
        return {k: " ".join(v.split()) if k == "description" and isinstance(v, str) else _one_line(v)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_one_line(v) for v in node]
    return node


def _document(model: type[BaseModel], kind: str, version: str, title: str) -> dict[str, Any]:
    schema = _one_line(model.model_json_schema(mode="serialization"))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:nsys-diagnose:{kind}-schema:{version}",
        "title": title,
        "description": schema.pop("description", "") + " schema_version is MAJOR.MINOR: a minor version adds "
                                                         "fields, a major one renames or removes them.",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def report_schema() -> dict[str, Any]:
    facts = load_facts()
    summary = _row_model(facts["summary"], "summary_metrics", required=False)
    document = create_model(
        "Report", __base__=Report, __doc__=Report.__doc__,
        metrics=(summary, Field(description=Report.model_fields["metrics"].description)),
        facts=(_facts_model(facts), Field(description=Report.model_fields["facts"].description)))
    return _document(document, "report", REPORT_SCHEMA_VERSION, "nsys-diagnose report")


def run_schema() -> dict[str, Any]:
    schema = _document(RunReport, "run-report", RUN_SCHEMA_VERSION, "nsys-diagnose multi-rank run report")
    docs = {c.name: c.doc for c in load_run_facts()["rank_balance"].columns}
    for model in ("RankRow", "RunBalance"):
        for name, spec in schema["$defs"][model]["properties"].items():
            if name in docs and "description" not in spec:
                spec["description"] = docs[name]
    return schema


def compare_schema() -> dict[str, Any]:
    return _document(Comparison, "comparison", COMPARISON_SCHEMA_VERSION, "nsys-diagnose comparison")


_BUILDERS = {"report": report_schema, "run": run_schema, "compare": compare_schema}


def schema_file(kind: str) -> str:
    return f"{kind}.schema.json"


def schema_text(kind: str = "report") -> str:
    return json.dumps(_BUILDERS[kind](), indent=2, ensure_ascii=False) + "\n"


def shipped_schema(kind: str = "report") -> dict[str, Any]:
    """The schema file installed with the package."""
    return json.loads(importlib.resources.files("nsys_diagnose.templates").joinpath(schema_file(kind))
                      .read_text(encoding="utf-8"))


def write_all(directory: Path) -> list[Path]:
    written = []
    for kind in SCHEMAS:
        path = directory / schema_file(kind)
        path.write_text(schema_text(kind), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nsys_diagnose.reports.schema",
                                description="Print a report JSON Schema, or write all of them.")
    p.add_argument("kind", nargs="?", choices=SCHEMAS, default="report", help="the schema to print")
    p.add_argument("--write", nargs="?", const=Path(str(importlib.resources.files("nsys_diagnose.templates"))),
                   type=Path, metavar="DIR", help="write all three schemas into DIR (default: the templates "
                                                  "directory the package reads them from)")
    args = p.parse_args(argv)
    if args.write is not None:
        for path in write_all(args.write):
            print(path)
        return 0
    sys.stdout.write(schema_text(args.kind))
    return 0


if __name__ == "__main__":
    sys.exit(main())
