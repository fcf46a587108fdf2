"""Reading the YAML of rule, rule-test, category and configuration files: the safe loader and where a syntax error
is, for `FILE:LINE:COL:` messages."""

from __future__ import annotations

import yaml

# The C loader when PyYAML was built with it; both construct plain data only (no Python objects).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def error_position(exc: yaml.YAMLError) -> tuple[int, int] | None:
    """(line, column), 1-based, of a YAML syntax error; None when PyYAML gives no position."""
    mark = getattr(exc, "problem_mark", None)
    return (mark.line + 1, mark.column + 1) if mark else None


def error_problem(exc: yaml.YAMLError) -> str:
    """What is wrong, in PyYAML's words, without its multi-line context."""
    return getattr(exc, "problem", None) or str(exc).splitlines()[0]
