"""The JSON Schema (draft 2020-12) of `diagnose --format json`, built from the report model and the fact headers.

The shipped file `reports/templates/report.schema.json` (installed as `nsys_diagnose/templates/report.schema.json`)
is this function's output; tests/test_reports.py fails when the two differ and validates real reports against
it. Regenerate after changing the model or a reported fact:

    python -m nsys_diagnose.reports.schema > reports/templates/report.schema.json
"""

from __future__ import annotations

import importlib.resources
import json
from typing import Any

from ..api import REPORTED_FACTS
from ..facts import load_facts
from .model import REPORT_SCHEMA_VERSION, Throughput
from ..units import column_unit

SCHEMA_FILE = "report.schema.json"

_NUMBER = {"type": ["number", "null"]}
_INTEGER = {"type": ["integer", "null"]}
_STRING = {"type": ["string", "null"]}
_UNIT_TYPES = {"ns": _NUMBER, "bytes": _NUMBER, "ratio": _NUMBER, "percent": _NUMBER, "gbps": _NUMBER,
               "per_s": _NUMBER, "count": _INTEGER, "id": _INTEGER}
_UNIT_WORDS = {"ns": "nanoseconds", "bytes": "bytes", "ratio": "ratio, 0-1", "percent": "percent, 0-100",
               "gbps": "GB/s", "per_s": "per second", "count": "count"}


def _obj(properties: dict[str, Any], description: str, required: list[str] | None = None,
         additional: Any = False) -> dict[str, Any]:
    return {"type": "object", "description": description, "properties": properties,
            "required": list(properties) if required is None else required, "additionalProperties": additional}


def _column(name: str, doc: str) -> dict[str, Any]:
    unit = column_unit(name)
    spec: dict[str, Any] = {"description": doc + (f" [{_UNIT_WORDS[unit]}]" if unit in _UNIT_WORDS else "")}
    spec.update(_UNIT_TYPES.get(unit, {}))
    return spec


def report_schema() -> dict[str, Any]:
    facts = load_facts()
    fact_defs: dict[str, Any] = {}
    for name in REPORTED_FACTS:
        fact = facts[name]
        row = _obj({c.name: _column(c.name, c.doc) for c in fact.columns}, f"One row of the `{name}` fact.")
        fact_defs[f"fact_{name}"] = {"type": "array", "description": f"{fact.doc} (engine/facts/{name}.sql)",
                                     "items": row}
    summary_columns = {c.name: _column(c.name, c.doc) for c in facts["summary"].columns}

    nullable_str = _STRING
    defs: dict[str, Any] = {
        "evidence": _obj({
            "label": {"type": "string", "description": "What was measured, in words."},
            "column": {"type": "string", "description": "Fact column the value comes from."},
            "value": {"description": "The observed value in the column's unit (number, string, boolean or null)."},
            "display": {"type": "string", "description": "The value formatted for people, e.g. '9.6 µs'."},
            "op": {**nullable_str, "description": "Comparison that held, e.g. '>'; null for context-only evidence."},
            "threshold": {**_NUMBER, "description": "Threshold in the param's own unit; null for context."},
            "threshold_display": {**nullable_str, "description": "The threshold formatted for people."},
            "param": {**nullable_str, "description": "Rule param holding the threshold (settable with --set)."},
        }, "One number that made the rule fire (with its threshold) or that gives context (op null)."),
        "finding": _obj({
            "rule": {"type": "string", "description": "Rule id, e.g. 'launch-bound' (team rules: 'namespace/id')."},
            "title": {"type": "string"},
            "category": {"type": "string", "description": "Bottleneck category, e.g. 'launch-bound', 'capture'."},
            "kind": {"enum": ["cause", "symptom", "capture"]},
            "severity": {"enum": ["info", "warning", "error"]},
            "subject": {**nullable_str, "description": "Which GPU / API / phase the finding is about."},
            "message": {"type": "string", "description": "One paragraph with the numbers."},
            "impact": {**_NUMBER, "minimum": 0,
                       "description": "Estimated share (0-1) of GPU time this costs; null when not estimated."},
            "evidence": {"type": "array", "items": {"$ref": "#/$defs/evidence"}},
            "remediation": {"type": "array", "items": {"type": "string"}, "description": "Steps, most effective first."},
            "references": {"type": "array", "items": {"type": "string"}},
            "row": {"type": "object", "description": "The fact row the rule fired on (its columns)."},
        }, "A rule that fired. Findings are ordered by severity, then kind (cause, capture, symptom), then impact."),
        "rule_outcome": _obj({
            "rule": {"type": "string"},
            "title": {"type": "string"},
            "category": {"type": "string"},
            "reason": {**nullable_str, "description": "Why the rule was skipped (null for passed rules)."},
        }, "A rule that passed or was skipped."),
        "override": _obj({
            "target": {"type": "string", "description": "'rule-id.param', 'rule-id.severity', 'rule-id.enabled' "
                                                        "or 'facts.param'."},
            "value": {"description": "The value in force."},
            "default": {"description": "The default it replaces."},
            "origin": {"type": "string", "description": "'command line' or the configuration file's path."},
        }, "A non-default setting in force."),
        "device": _obj({
            "device_id": {"type": "integer"},
            "name": nullable_str,
            "used": {"type": "boolean", "description": "The GPU ran at least one operation."},
            "sm_count": _INTEGER,
            "memory_bandwidth_bytes_per_s": _NUMBER,
        }, "A GPU of the profiled machine."),
        "profile": _obj({
            "path": {"type": "string", "description": "The export as given on the command line."},
            "nsys_version": nullable_str,
            "schema_version": {**nullable_str, "description": "The export's own schema version."},
            "export_time_utc": nullable_str,
            "graph_trace_mode": {**nullable_str, "description": "'graph' or 'node' when CUDA graphs were traced."},
            "duration_ns": {**_INTEGER, "description": "Capture duration [nanoseconds]."},
            "devices": {"type": "array", "items": {"$ref": "#/$defs/device"}},
            "views": {"type": "object", "description": "Row count of every canonical view, and why it is empty "
                                                       "when the export lacks its table.",
                      "additionalProperties": _obj({"rows": {"type": "integer", "minimum": 0}, "reason": nullable_str},
                                                   "A canonical view.")},
        }, "The export that was read."),
        "verdict": _obj({
            "primary": {**nullable_str, "description": "Category of the primary bottleneck, or null when none."},
            "rule": {**nullable_str, "description": "Rule behind the verdict."},
            "subject": nullable_str,
            "impact": _NUMBER,
            "headline": {"type": "string", "description": "One sentence for people."},
        }, "The primary bottleneck."),
        **fact_defs,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:nsys-diagnose:report-schema:{REPORT_SCHEMA_VERSION}",
        "title": "nsys-diagnose report",
        "description": "Output of `diagnose PROFILE --format json`. schema_version is MAJOR.MINOR: a minor version "
                       "adds fields, a major one renames or removes them.",
        "type": "object",
        "properties": {
            "schema_version": {"const": REPORT_SCHEMA_VERSION},
            "tool": {"const": "nsys-diagnose"},
            "tool_version": {"type": "string"},
            "profile": {"$ref": "#/$defs/profile"},
            "verdict": {"$ref": "#/$defs/verdict"},
            "metrics": _obj(summary_columns, "The headline metrics: the row of the `summary` fact (empty when "
                                             "the export has nothing to summarise).", required=[]),
            "findings": {"type": "array", "items": {"$ref": "#/$defs/finding"}},
            "passed": {"type": "array", "items": {"$ref": "#/$defs/rule_outcome"}},
            "skipped": {"type": "array", "items": {"$ref": "#/$defs/rule_outcome"}},
            "overrides": {"type": "array", "items": {"$ref": "#/$defs/override"}},
            "throughput": {"anyOf": [{"type": "null"}, _obj(
                {name: {"type": ["integer" if name in ("tokens", "decode_steps") else "number", "null"],
                        "description": field.description} for name, field in Throughput.model_fields.items()},
                "Tokens/s and time per output token (with --tokens N) and NVTX decode steps; null when neither.")]},
            "facts": {
                "type": "object",
                "description": "Rows of each reported fact (long tables cut: kernel_summary and api_summary to 50 "
                               "rows, kernel_gaps to 200); team facts (--rule-dir) appear under their own names.",
                "properties": {name: {"$ref": f"#/$defs/fact_{name}"} for name in REPORTED_FACTS},
                "additionalProperties": {"type": "array", "items": {"type": "object"}},
            },
        },
        "required": ["schema_version", "tool", "tool_version", "profile", "verdict", "metrics", "findings",
                     "passed", "skipped", "overrides", "facts", "throughput"],
        "additionalProperties": False,
        "$defs": defs,
    }


def schema_text() -> str:
    return json.dumps(report_schema(), indent=2, ensure_ascii=False) + "\n"


def shipped_schema() -> dict[str, Any]:
    """The schema file installed with the package."""
    return json.loads(importlib.resources.files("nsys_diagnose.templates").joinpath(SCHEMA_FILE)
                      .read_text(encoding="utf-8"))


if __name__ == "__main__":
    import sys

    sys.stdout.write(schema_text())
