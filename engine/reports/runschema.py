"""The JSON Schema (draft 2020-12) of `diagnose RANK0 RANK1 ... --format json`, the multi-rank run report.

Built from the RunReport model (engine/reports/runmodel.py), with every per-rank and run-wide column described by the
header of the `rank_balance` cross-rank fact. The shipped file `reports/templates/run.schema.json` (installed as
`nsys_diagnose/templates/run.schema.json`) is this function's output; tests/test_multirank.py fails when the two
differ. Regenerate after changing the model or the fact:

    python -m nsys_diagnose.reports.runschema > reports/templates/run.schema.json
"""

from __future__ import annotations

import importlib.resources
import json
from typing import Any

from ..facts.cross_rank import load_run_facts
from .runmodel import RUN_SCHEMA_VERSION, RunReport

SCHEMA_FILE = "run.schema.json"


def run_report_schema() -> dict[str, Any]:
    schema = RunReport.model_json_schema(mode="serialization")
    docs = {c.name: c.doc for c in load_run_facts()["rank_balance"].columns}
    for model in ("RankRow", "RunBalance"):
        for name, spec in schema["$defs"][model]["properties"].items():
            if name in docs and "description" not in spec:
                spec["description"] = docs[name]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:nsys-diagnose:run-report-schema:{RUN_SCHEMA_VERSION}",
        "title": "nsys-diagnose multi-rank run report",
        "description": "Output of `diagnose RANK0 RANK1 ... --format json` (or `diagnose RUN_DIR`). schema_version "
                       "is MAJOR.MINOR: a minor version adds fields, a major one renames or removes them. Per-rank "
                       "and run-wide numbers are the columns of the `rank_balance` fact "
                       "(engine/facts/cross_rank/rank_balance.sql).",
        **{k: v for k, v in schema.items() if k not in ("title", "description")},
    }


def schema_text() -> str:
    return json.dumps(run_report_schema(), indent=2, ensure_ascii=False) + "\n"


def shipped_schema() -> dict[str, Any]:
    """The schema file installed with the package."""
    return json.loads(importlib.resources.files("nsys_diagnose.templates").joinpath(SCHEMA_FILE)
                      .read_text(encoding="utf-8"))


if __name__ == "__main__":
    import sys

    sys.stdout.write(schema_text())
