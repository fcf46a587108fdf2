"""Which facts one diagnosis computes: those its report reads, and the facts they need.

Every reader of facts declares what it reads: a rule its fact and the FACT.COLUMN operands, evidence and
templates of its YAML (rule_reads); the report model the facts below (MODEL_READS, the key metrics); each format
the facts of its views (FACTS_READ at the top of engine/reports/charts.py, timeline.py, steps.py, textviews.py,
and sections.yaml). JSON dumps every reported fact. tests/test_fact_selection.py renders the scenarios with only
the selected facts and proves each format's report byte-identical to the one from every fact.

A fact wrongly left out drops evidence silently, so whatever this module cannot vouch for is computed: every
team fact, every fact when no format is named (compare, batch, multi-rank runs, the library's default).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from ..diagnosis.rule_spec import Rule
from ..facts.catalog import Fact, reported_facts, with_needs
from ..facts.scopes import from_run
from ..reports import metrics

# The facts building any Report reads, whatever its format, and the modules that read them.
MODEL_READS = (
    "summary", "steps", "gpu_utilization", "operation_classes",  # runs/api.py build_report
    "software_stack",  # diagnosis/stacks.py
    "startup",  # diagnosis/startup.py
    "phases", "kernel_occupancy",  # diagnosis/phase_verdict.py
    "capture_health", "kernel_summary", "server_idle",  # diagnosis/verdict.py
    "whatif_replay",  # diagnosis/whatif.py
    "whatif_sample",  # diagnosis/whatif_notes.py (a name the pack lacks is ignored)
)

FORMATS = ("terminal", "md", "html", "json")


def format_reads(fmt: str, facts: dict[str, Fact]) -> set[str]:
    """The facts the `fmt` report reads beyond the model's."""
    if fmt == "json":  # the model dump holds every reported fact, and the per-phase rows of those reported so
        return {f.name for f in reported_facts(facts)}
    # Imported here: a diagnosis imports the views of the formats it renders, when it renders them.
    from ..reports import charts, sections, steps, textviews, timeline

    read = set(steps.FACTS_READ)
    if fmt == "terminal":
        return read | set(textviews.FACTS_READ)
    if fmt == "md":
        return read | sections.facts_read("md") | set(timeline.FACTS_READ)
    if fmt == "html":
        return read | sections.facts_read("html") | set(timeline.FACTS_READ) | set(charts.FACTS_READ)
    raise ValueError(f"unknown format {fmt!r}")


_WORD = re.compile(r"\w+")


def rule_reads(rule: Rule, facts: Collection[str]) -> set[str]:
    """The facts `rule` reads: its fact, and any fact its conditions, evidence, remediation or templates name (a
    name that is a word of the rule's YAML: a word that only looks like a fact computes one fact too many)."""
    words = set(_WORD.findall(rule.spec.model_dump_json()))
    return {rule.spec.fact} | (words & set(facts))


def facts_to_compute(facts: dict[str, Fact], rules: Iterable[Rule], formats: Collection[str] | None
                     ) -> dict[str, Fact]:
    """The facts of `facts` a diagnosis judged by `rules` (the enabled ones) and rendered in `formats` computes:
    what they read, the facts those need, and what the phases read from the whole run. `formats` None: all."""
    if formats is None:
        return facts
    roots = set(MODEL_READS) | metrics.facts_read()
    roots |= {f.name for f in facts.values() if f.team}  # team facts are reported, and a team rule may read any
    for rule in rules:
        roots |= rule_reads(rule, facts)
    for fmt in formats:
        roots |= format_reads(fmt, facts)
    wanted = with_needs(facts, roots)
    if "phases" in wanted:  # the per-phase facts are computed only when the phases' whole-run facts were
        wanted |= with_needs(facts, from_run(facts))
    return {name: fact for name, fact in facts.items() if name in wanted}


def skipped(facts: dict[str, Fact], selected: Collection[str]) -> list[str]:
    """The facts left out, by name."""
    return sorted(name for name in facts if name not in selected)
