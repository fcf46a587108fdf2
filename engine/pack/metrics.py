"""The key metrics are data: rules/vocabulary/metrics.yaml, one entry per metric in the order the reports show them
(the file's header lists the fields). Each metric's source is checked at load against what the sources hold: a
fact column must be a documented `-- @column` of a fact marked `-- @report`, so a metric can never render "n/a"
because it names a fact the reports do not carry. The caller says what exists (the fact catalog is a layer above
this one): `Sources`."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from .layout import VOCABULARY_DIR, bundled
from ..base.errors import PackError
from ..base.text import did_you_mean
from .yamlfile import Positions, read_pack_yaml, safe_compose

METRICS_FILE = "metrics.yaml"

Unit = Literal["ratio", "share", "percent", "ns", "count", "bytes", "rate"]
Better = Literal["higher", "lower"] | None
UNITS: tuple[str, ...] = get_args(Unit)
_BETTER = ("higher", "lower", None)
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_THRESHOLD = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\.[a-z_][a-z0-9_]*$")
_TEXT_FIELDS = ("label", "short_label", "doc", "group", "missing")
_FLAGS = {"report": True, "compare": True, "headline": False, "optional": False}
_FIELDS = {"label", "short_label", "unit", "better", "source", "doc", "group", "threshold", "versus", "missing",
           *_FLAGS}


class MetricError(PackError):
    """metrics.yaml is broken; the message starts with FILE:LINE:COL and says what to change."""


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: Unit               # ratio: 0-1 shown as 0.00; share: 0-1 shown as %; rate: per second
    better: Better           # "higher", "lower" or None: reported, never judged
    source: str | tuple[str, ...]  # several: the first non-zero value wins
    doc: str = ""
    short_label: str = ""    # terminal label, when the label is too long for its grid
    group: str | None = None  # adjacent metrics of one group share a row labelled with it
    threshold: str | None = None  # RULE.PARAM: the rule that judges the same number
    versus: str | None = None     # or another metric: past when this one is worse than it
    missing: str = "n/a"     # shown when the profile has no value
    report: bool = True      # a row of the single-profile report's key metrics
    compare: bool = True     # compared (and gated) by `diagnose compare`
    headline: bool = False   # decides the comparison's verdict before the other metrics
    optional: bool = False   # a report row only when the profile has a value (e.g. GPU metrics were captured)
    line: int = 0            # of its key in metrics.yaml (0: not from a file)

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,) if isinstance(self.source, str) else self.source

    @property
    def is_throughput(self) -> bool:
        """Computed from the profile's duration, --tokens and the decode steps (report.throughput)."""
        return any(s.startswith("throughput.") for s in self.sources)


@dataclass(frozen=True)
class Sources:
    """What a metric's source may name."""

    reported: Mapping[str, Collection[str]]
    """Each fact marked `-- @report` -> its documented columns."""
    other_facts: Collection[str] = ()
    """The facts that exist but are not reported (named apart in the error)."""
    computed: Mapping[str, Collection[str]] = field(default_factory=dict)
    """Sources the engine computes, not a fact: 'throughput' and 'profile' -> their fields."""


def _problem(source: str, sources: Sources | None) -> str | None:
    where, dot, column = source.partition(".")
    if not dot or not where or not column:
        return f"source {source!r} must be FACT.COLUMN, throughput.FIELD or profile.FIELD"
    if sources is None:
        return None
    if where in sources.computed:
        fields = sources.computed[where]
        if column not in fields:
            return f"source {source!r}: {where} has no field {column!r}{did_you_mean(column, fields)}"
        return None
    if where in sources.reported:
        columns = sources.reported[where]
        if column not in columns:
            return (f"source {source!r}: {column!r} is not a documented `-- @column` of fact {where!r}"
                    f"{did_you_mean(column, columns)}")
        return None
    if where in sources.other_facts:
        return (f"source {source!r}: fact {where!r} is not marked `-- @report`, so no report carries its rows; "
                f"add `-- @report` to its header or name a reported fact")
    return f"source {source!r}: there is no fact {where!r}{did_you_mean(where, sources.reported)}"


def _text(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MetricError(f"{where}: {name} must be text")
    return value


def _metric(key: Any, spec: Any, path: Path, at: Positions, sources: Sources | None) -> Metric:
    where = f"{path}:{at.of(key)}"
    if not isinstance(key, str) or not _KEY.match(key):
        raise MetricError(f"{where}: the metric key {key!r} must be a lower-case name such as 'mean_gap_ns'")
    if not isinstance(spec, dict):
        raise MetricError(f"{where}: metric {key!r} must be a mapping with label, unit, better and source")
    for name in spec:
        if name not in _FIELDS:
            raise MetricError(f"{path}:{at.of(key, name)}: metric {key!r}: unknown field {name!r}"
                              f"{did_you_mean(str(name), _FIELDS)}")
    for name in ("label", "unit", "better", "source"):
        if name not in spec:
            raise MetricError(f"{where}: metric {key!r} lacks {name}: (label, unit, better and source are required)")

    def at_field(name: str) -> str:
        return f"{path}:{at.of(key, name)}: metric {key!r}"

    texts = {name: _text(spec[name], name, at_field(name)) for name in _TEXT_FIELDS if name in spec}
    if spec["unit"] not in UNITS:
        raise MetricError(f"{at_field('unit')}: unit must be one of {', '.join(UNITS)}, not {spec['unit']!r}")
    if spec["better"] not in _BETTER:
        raise MetricError(f"{at_field('better')}: better must be higher, lower or null, not {spec['better']!r}")
    source = spec["source"]
    listed = [source] if isinstance(source, str) else source
    if not isinstance(listed, list) or not listed or not all(isinstance(s, str) for s in listed):
        raise MetricError(f"{at_field('source')}: source must be FACT.COLUMN or a list of them")
    for s in listed:
        problem = _problem(s, sources)
        if problem is not None:
            raise MetricError(f"{at_field('source')}: {problem}")
    threshold = spec.get("threshold")
    if threshold is not None and (not isinstance(threshold, str) or not _THRESHOLD.match(threshold)):
        raise MetricError(f"{at_field('threshold')}: threshold must be RULE.PARAM, e.g. "
                          f"launch-bound.max_overhead_ratio, not {threshold!r}")
    flags = {name: spec.get(name, default) for name, default in _FLAGS.items()}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise MetricError(f"{at_field(name)}: {name} must be true or false")
    line = int(at.of(key).split(":")[0])
    return Metric(key, texts["label"], spec["unit"], spec["better"], source if isinstance(source, str) else
                  tuple(source), doc=texts.get("doc", ""), short_label=texts.get("short_label", ""),
                  group=texts.get("group"), threshold=threshold, versus=spec.get("versus"),
                  missing=texts.get("missing", "n/a"), line=line, **flags)


def _duplicate_key(text: str) -> tuple[str, int] | None:
    """The first metric key written twice (YAML would keep the last one silently), with its line."""
    try:
        node = safe_compose(text)
    except yaml.YAMLError:
        return None
    if not isinstance(node, yaml.MappingNode):
        return None
    seen = set()
    for key, _ in node.value:
        if key.value in seen:
            return str(key.value), key.start_mark.line + 1
        seen.add(key.value)
    return None


def read_metrics(path: Path, sources: Sources | None = None) -> tuple[Metric, ...]:
    """The metrics of `path`, each source checked against `sources` (not checked when None)."""
    data, text = read_pack_yaml(path, MetricError, "the key metrics")
    if not isinstance(data, dict) or not data:
        raise MetricError(f"{path}:1:1: the key metrics must be a mapping of metric key to its definition, e.g. "
                          f"gpu_utilization: {{label: GPU utilisation, unit: share, better: higher, "
                          f"source: summary.gpu_utilization}}")
    twice = _duplicate_key(text)
    if twice:
        raise MetricError(f"{path}:{twice[1]}:1: the metric {twice[0]!r} is defined twice")
    at = Positions(text)
    metrics = tuple(_metric(key, spec, path, at, sources) for key, spec in data.items())
    keys = {m.key for m in metrics}
    groups: dict[str, int] = {}
    for i, m in enumerate(metrics):
        if m.group is not None and groups.setdefault(m.group, i) != i and metrics[i - 1].group != m.group:
            raise MetricError(f"{path}:{at.of(m.key, 'group')}: metric {m.key!r}: the metrics of group {m.group!r} "
                              f"share one row, so they must be next to each other in the file")
    for m in metrics:
        if m.versus is not None and (m.versus not in keys or m.versus == m.key):
            raise MetricError(f"{path}:{at.of(m.key, 'versus')}: metric {m.key!r}: versus names another metric, "
                              f"and there is no {m.versus!r}{did_you_mean(str(m.versus), keys)}")
    return metrics


def bundled_metrics_file() -> Path:
    return bundled(VOCABULARY_DIR, METRICS_FILE)


def load_metrics(sources: Sources | None = None) -> tuple[Metric, ...]:
    """The bundled key metrics, checked against `sources`. A team pack adds no key metric: a team fact is never
    `-- @report`, and `diagnose batch` needs the same columns in every shard."""
    return read_metrics(bundled_metrics_file(), sources)
