"""The base of every document model: the strict pydantic Model and the Document header every report written by
nsys-diagnose starts with, and the value types they share."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Number = int | float  # integer nanoseconds and counts stay integers in the JSON; means may be fractional
Better = Literal["higher", "lower"] | None


class Model(BaseModel):
    """Unknown fields are refused, and the JSON Schema lists every field as required: the JSON always has them."""

    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True,
                              use_attribute_docstrings=True)


class Document(Model):
    """What every report written by nsys-diagnose starts with."""

    schema_version: str
    """MAJOR.MINOR: a minor version adds fields, a major one renames or removes them."""
    tool: Literal["nsys-diagnose"] = "nsys-diagnose"
    tool_version: str
