"""The key metrics as the reports show them (defined by engine/reports/metrics.py): what a metric is, and its row
with the rule threshold it is judged against."""

from __future__ import annotations

from .document import Better, Model, Number


class MetricInfo(Model):
    """A key metric as engine/reports/metrics.py defines it."""

    key: str
    """Metric id, e.g. 'overhead_ratio'; `diagnose compare --fail-on-regression` gates use it."""
    label: str
    unit: str
    """How the value reads: ratio (0-1 as 0.00), share (0-1 as %), ns, count, bytes or rate (per second)."""
    better: Better
    """Which way is an improvement; null when neither is."""


class MetricRow(MetricInfo):
    """One key metric of the profile, with the rule threshold it is judged against."""

    short_label: str
    """The label in the terminal summary."""
    group: str | None
    """Adjacent rows with the same group are shown as one, labelled with it (e.g. 'Gap mean / median')."""
    doc: str
    """What the number is, in words."""
    value: Number | None
    """In the unit of its source column (ns, bytes, 0-1 ratio, count, per second)."""
    display: str
    """The value formatted for people."""
    threshold: float | None = None
    """Where the metric turns bad, in the value's unit: a rule param's effective value (after diagnose.yaml and
    --set) or another metric's value; null when nothing judges it."""
    threshold_display: str | None = None
    op: str | None = None
    """The bad side of the threshold, e.g. '>' (the comparison of the rule the threshold belongs to)."""
    param: str | None = None
    """The rule param holding the threshold, RULE.PARAM (settable with --set)."""
    past: bool | None = None
    """The value is on the bad side of the threshold; null without a threshold or a value."""
