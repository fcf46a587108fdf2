"""The section registry (reports/templates/sections.yaml): each report table is drawn from its entry, and the
entries agree with the fact headers, so a renamed column or an unreported fact fails here, not in a user's report."""

from __future__ import annotations

import pytest

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.catalog import reported_facts
from nsys_diagnose.reports import sections
from nsys_diagnose.reports.render import render

from conftest import scenario_analysis

FACTS = load_facts()
REPORTED = {f.name: f for f in reported_facts(FACTS)}


@pytest.mark.parametrize("fmt", sections.FORMATS)
def test_every_section_shows_declared_columns_of_a_reported_fact(fmt):
    for key, entry in sections.registry(fmt).items():
        assert entry["fact"] in REPORTED, f"{key}: {entry['fact']} has no -- @report header"
        fact = REPORTED[entry["fact"]]
        declared = fact.column_names
        for column in entry["columns"]:
            assert column["value"] in declared, f"{key}: {column['title']!r} shows {column['value']!r}, no column"
            if column["label_of"]:
                assert column["label_of"] in declared
        if entry["shown_when"]:
            assert entry["shown_when"] in declared
        if entry["per_phase"]:
            assert fact.report_per_phase, f"{key}: per_phase, but {fact.name} reports no per-phase rows"


def test_a_column_can_belong_to_one_format():
    md = [c["title"] for c in sections.registry("md")["kernels"]["columns"]]
    html = [c["title"] for c in sections.registry("html")["kernels"]["columns"]]
    assert "Share" in md and "Share" not in html and "Share of kernel time" in html


def test_a_wrong_entry_names_the_section_and_the_formats():
    with pytest.raises(sections.SectionError, match=r"section 'x', column 'T': needs title, value and a format of "
                                                    r"num, dur"):
        sections._section("x", {"fact": "f", "columns": [{"title": "T", "value": "v", "format": "money"}]}, "md")
    with pytest.raises(sections.SectionError, match=r"section 'x' needs fact and columns; unknown keys: \['rowz'\]"):
        sections._section("x", {"fact": "f", "rowz": 3, "columns": [{"title": "T", "value": "v", "format": "num"}]},
                          "md")


@pytest.mark.parametrize("fmt", sections.FORMATS)
def test_the_report_draws_each_table_from_its_entry(fmt, monkeypatch):
    """A title or column title changed in the registry changes the rendered table: the templates spell none."""
    _, report = scenario_analysis("prefill_heavy_eager_decode")
    original = sections.registry(fmt)
    changed = {key: {**entry, "title": f"Retitled {key}",
                     "columns": [{**c, "title": f"{c['title']}*"} for c in entry["columns"]]}
               for key, entry in original.items()}
    monkeypatch.setattr(sections, "registry", lambda f: changed if f == fmt else original)
    text = render(report, fmt)
    drawn = [key for key, rows in sections.tables(report.facts, fmt).items() if rows]
    assert {"kernels", "gpus", "phases"} <= set(drawn)
    for key in drawn:
        assert f"Retitled {key}" in text
        missing = [c["title"] for c in changed[key]["columns"] if c["title"] not in text]
        assert not missing, f"{key}: {missing}"


@pytest.mark.parametrize("fmt", sections.FORMATS)
def test_a_new_entry_is_drawn_without_a_template_line(fmt, monkeypatch):
    """An entry the templates do not place comes after the other fact tables: adding a table is the entry alone."""
    _, report = scenario_analysis("prefill_heavy_eager_decode")
    assert report.facts["launch_api"]
    original = sections.registry(fmt)
    entry = sections._section("launch-calls", {"fact": "launch_api", "title": "Launch calls", "columns": [
        {"title": "Launch API", "value": "name", "format": "text", "width": 40}]}, fmt)
    monkeypatch.setattr(sections, "registry", lambda f: {**original, "launch-calls": entry} if f == fmt else original)
    text = render(report, fmt)
    heading = "### Launch calls" if fmt == "md" else '<section id="launch-calls">\n<h2>Launch calls</h2>'
    assert heading in text and text.index(heading) > text.index("Top kernels")
