"""The settings in force: a non-default rule or fact parameter and where it was set."""

from __future__ import annotations

from typing import Any

from .document import Model


class ParamOverride(Model):
    """A non-default setting in force."""

    target: str
    """'rule-id.param', 'rule-id.severity', 'rule-id.enabled' or 'facts.param'."""
    value: Any
    """The value in force."""
    default: Any
    """The default it replaces."""
    origin: str
    """'command line' or the configuration file's path."""
