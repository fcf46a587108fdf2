"""A diagnosis computes only the facts its rules and report formats read (engine/runs/selection.py). Each reader
declares what it reads; these tests prove the declarations complete: every scenario (and real exports) rendered in
each format from the selected facts alone is byte-identical to the report rendered from every fact. A pack author
whose new section, chart or rule reads an undeclared fact sees the format and the scenario that lost it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import REAL_EXPORTS, analysis, scenario_analysis, scenario_path, slow_but
from nsys_diagnose.base.timings import Timings, render_timings
from nsys_diagnose.facts.compute import FactSet, compute_facts
from nsys_diagnose.fixtures.generator import SCENARIOS
from nsys_diagnose.reading.export import open_export
from nsys_diagnose.reports.render import FORMATS, render
from nsys_diagnose.runs.api import Pack, build_report, diagnose, load_pack
from nsys_diagnose.runs.selection import facts_to_compute

_PACK: list[Pack] = []


def _pack() -> Pack:
    if not _PACK:
        _PACK.append(load_pack())
    return _PACK[0]


def _selected(pack: Pack, formats: set[str]) -> set[str]:
    enabled = [r for r in pack.rules.values() if r.id not in pack.ruleset.disabled]
    return set(facts_to_compute(pack.facts, enabled, formats))


def _only(facts: FactSet, names: set[str]) -> FactSet:
    """`facts` as if only `names` had been computed (the phases' facts too)."""
    return FactSet({n: r for n, r in facts.results.items() if n in names},
                   {phase: _only(scoped, names) for phase, scoped in facts.phases.items()}, facts.stacks)


def _assert_same_reports(path: Path, facts: FactSet, **options: Any) -> None:
    """`options`: build_report's (tokens, what_if_batch)."""
    pack = _pack()
    with open_export(path, cache=False) as export:
        for fmt in FORMATS:
            names = _selected(pack, {fmt})
            full = render(build_report(export, facts, pack, **options), fmt)
            chosen = render(build_report(export, _only(facts, names), pack, **options), fmt)
            if chosen != full:
                def with_it(name: str) -> str:
                    return render(build_report(export, _only(facts, names | {name}), pack, **options), fmt)

                culprits = [name for name in sorted(set(facts.results) - names) if with_it(name) == full]
                pytest.fail(f"the {fmt} report of {path.name} changes when only the selected facts are computed: a "
                            f"reader of that format reads a fact it does not declare (FACTS_READ in "
                            f"engine/reports/*.py, MODEL_READS in engine/runs/selection.py): "
                            f"{', '.join(culprits) or 'several facts together'}")


@pytest.mark.parametrize("name", slow_but(sorted(SCENARIOS), "eager_decode", "prefill_decode_nvtx"))
def test_each_format_reads_only_the_facts_it_declares(name):
    facts, _ = scenario_analysis(name)
    _assert_same_reports(scenario_path(name), facts)


@pytest.mark.real_exports
@pytest.mark.parametrize("path", REAL_EXPORTS[:4], ids=lambda p: p.name[:40])
def test_real_exports_read_only_the_declared_facts(path):
    facts, _ = analysis(path)
    _assert_same_reports(path, facts)


def test_tokens_and_the_batch_projection_read_only_the_declared_facts():
    facts, _ = scenario_analysis("eager_decode")
    _assert_same_reports(scenario_path("eager_decode"), facts, tokens=4096, what_if_batch=8)


def test_the_selected_facts_compute_the_same_rows_as_all_facts():
    """Computing a subset gives each of its facts (and each phase's) the rows it has among every fact."""
    path = scenario_path("prefill_decode_nvtx")
    full, _ = scenario_analysis("prefill_decode_nvtx")
    pack = _pack()
    names = _selected(pack, {"md"})
    with open_export(path, cache=False) as export:
        subset = compute_facts(export, facts={n: f for n, f in pack.facts.items() if n in names})
    assert {n: r.rows for n, r in subset.results.items()} == \
        {n: r.rows for n, r in full.results.items() if n in subset.results}
    assert set(subset.phases) == set(full.phases) and full.phases
    for phase, scoped in subset.phases.items():
        assert {n: r.rows for n, r in scoped.results.items()} == \
            {n: r.rows for n, r in full.phases[phase].results.items() if n in names}


def test_markdown_skips_the_chart_facts_and_json_keeps_every_reported_fact():
    pack = _pack()
    md, html, json = _selected(pack, {"md"}), _selected(pack, {"html"}), _selected(pack, {"json"})
    assert "utilization_timeline" not in md and "utilization_timeline" in html
    assert {f.name for f in pack.facts.values() if f.reported} <= json
    assert _selected(pack, {"md", "html"}) == md | html


def test_a_disabled_rule_does_not_compute_the_fact_only_it_reads():
    from nsys_diagnose.diagnosis.config import Config, Setting

    pack = _pack()
    rules = list(pack.rules.values())
    readers = {f: [r for r in rules if r.spec.fact == f] for f in {r.spec.fact for r in rules}}
    always = _selected(pack, {"terminal"}) - {r.spec.fact for r in rules}
    rule = next(r for f, rs in sorted(readers.items()) if len(rs) == 1 and f not in always
                and not any(f in str(o.spec.model_dump()) for o in rules if o is not rs[0]) for r in rs)
    assert rule.spec.fact in _selected(pack, {"terminal"})
    off = load_pack(Config(disabled={rule.id: Setting(False, "test")}))
    enabled = [r for r in off.rules.values() if r.id not in off.ruleset.disabled]
    assert rule.spec.fact not in facts_to_compute(off.facts, enabled, {"terminal"})


def test_timings_name_the_skipped_facts():
    timings = Timings()
    report = diagnose(scenario_path("eager_decode"), cache=False, timings=timings, formats={"md"})
    assert report.findings
    table = render_timings(timings)
    assert "skipped (not needed by the rules or the requested formats): " in table
    assert "utilization_timeline" in timings.skipped
    assert "utilization_timeline" not in [t.name for t in timings.entries]


def test_reports_of_another_format_reuse_the_cached_facts(tmp_path):
    """The facts kept beside the cache serve every format that reads no more than they hold; a format that reads
    more computes them again, and keeps the union."""
    path = scenario_path("eager_decode")

    def run(fmt: str) -> Timings:
        timings = Timings()
        diagnose(path, cache_dir=tmp_path, timings=timings, formats={fmt})
        return timings

    def computed(timings: Timings) -> set[str]:
        return {t.name for t in timings.entries if t.scope == "run"}

    assert "utilization_timeline" not in computed(run("md"))
    assert not computed(run("terminal"))  # reads less than md: reused
    assert "utilization_timeline" in computed(run("html"))  # reads more: computed again
    assert not computed(run("md"))
