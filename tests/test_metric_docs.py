"""docs/measures.md and docs/batch.md list the key metrics in parts generated from their definitions
(engine/authoring/metric_docs.py, `make docs`): a metric added to rules/vocabulary/metrics.yaml, or a changed
label, source or threshold, cannot leave either page behind. The rest of docs/batch.md's column list is prose; it
must still name every column `diagnose batch` writes."""

from __future__ import annotations

import dataclasses
import re

import pytest

from nsys_diagnose.authoring import docs, metric_docs
from nsys_diagnose.diagnosis.rules import load_rules
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.reports.metrics import BY_KEY, METRICS
from nsys_diagnose.runs.batch_table import COLUMNS, METRIC_COLUMNS

from conftest import REPO

DOCS = REPO / "docs"


@pytest.fixture(scope="module")
def facts():
    return load_facts()


@pytest.fixture(scope="module")
def rules(facts):
    return {r.id: r for r in load_rules(facts, scope=None).values()}


def _pages(facts, rules) -> dict[str, str]:
    return metric_docs.pages(DOCS, docs._environment(), facts, rules)


def test_the_generated_metric_lists_are_current(facts, rules):
    for name, text in _pages(facts, rules).items():
        committed = (DOCS / name).read_text(encoding="utf-8").splitlines()
        for number, (want, have) in enumerate(zip(text.splitlines(), committed), 1):
            assert want == have, (f"docs/{name}:{number} is stale; it should read\n{want}\n"
                                  f"Regenerate it with: {docs.FIX_COMMAND}")
        assert len(text.splitlines()) == len(committed), f"docs/{name} is stale: {docs.FIX_COMMAND}"


def test_every_metric_has_a_row_with_its_source_definition_and_threshold(facts, rules):
    table = _pages(facts, rules)["measures.md"]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| [^|]+ \| `(\w+)` \|.*$", table, re.M)}
    assert list(rows) == [m.key for m in METRICS]
    assert "| [`summary.overhead_ratio`](facts.md#summary) | Gap time / (kernel busy time + gap time)" \
           in rows["overhead_ratio"]
    assert "[`launch-bound.max_overhead_ratio`](rules/launch-bound.md) (default 0.3)" in rows["overhead_ratio"]
    # a column doc that reads on from the one before it gets that one too
    assert "Peer copies between GPUs (PtoP). Bytes in those copies." in rows["peer_bytes"]
    batch = _pages(facts, rules)["batch.md"]
    assert re.findall(r"^  \| `(\w+)` \|", batch, re.M) == [m.key for m in METRIC_COLUMNS]


def test_a_new_metric_gets_its_rows_without_a_hand_edit(facts, rules, monkeypatch):
    new = dataclasses.replace(BY_KEY["launch_calls"], key="sync_rate", label="Synchronisations per second",
                              unit="rate", source="sync_overview.calls_per_s")
    monkeypatch.setattr(metric_docs, "METRICS", (*METRICS, new))
    monkeypatch.setitem(metric_docs.COLUMNS, "sync_rate", "DOUBLE")
    pages = _pages(facts, rules)
    assert "| Synchronisations per second | `sync_rate` | [`sync_overview.calls_per_s`](facts.md#sync_overview) | " \
           "Blocking calls per second of active work: sync_calls / active_ns. |" in pages["measures.md"]
    assert "  | `sync_rate` | DOUBLE | Synchronisations per second |" in pages["batch.md"]


def test_the_batch_page_names_every_other_column_in_order():
    text = (DOCS / "batch.md").read_text(encoding="utf-8")
    bullet = text[text.index("- **Columns**"):text.index(metric_docs.PARTS[1].begin)]
    named = list(dict.fromkeys(re.findall(r"`(\w+)`", bullet)))  # the first mention of each
    metric_keys = {m.key for m in METRIC_COLUMNS}
    missing = [c for c in COLUMNS if c not in metric_keys and c not in named]
    assert not missing, f"docs/batch.md's Columns paragraph does not name the batch column(s) {missing}"
    others = [c for c in named if c in COLUMNS and c not in metric_keys]
    assert others == [c for c in COLUMNS if c not in metric_keys], "docs/batch.md lists the columns out of order"
