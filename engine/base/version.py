"""The installed tool's version, for reports and cache stamps."""

from __future__ import annotations

import importlib.metadata


def tool_version() -> str:
    try:
        return importlib.metadata.version("nsys-diagnose")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
