"""Promises the repository makes to its users: the README's commands, CI, documented facts, packaging."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nsys_diagnose.reading.canonical import VIEWS
from nsys_diagnose.facts.loading import load_facts

REPO = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.S)[:2]


def test_readme_starts_with_the_demo_and_the_test_command():
    demo, tests = _readme_commands()
    assert "pip install ." in demo and "diagnose fixtures/examples/eager_decode.sqlite" in demo
    assert (REPO / "fixtures/examples/eager_decode.sqlite").is_file()
    assert tests.strip().endswith("-m pytest --all -n auto")  # the whole suite: both tiers, one worker per core


def test_ci_runs_exactly_the_readme_test_command():
    _, tests = _readme_commands()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1].strip() == tests.strip()


def test_readme_names_the_fast_tier_the_slow_tier_and_what_the_slow_tier_holds():
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())  # as read, across line breaks
    assert "`make test` runs the fast tier on every core (`pytest -n auto`" in text
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"\ntest:\n\t(PYTHONDONTWRITEBYTECODE= )?\$\(PYTEST\) -n auto( --dist worksteal)?\n", makefile)
    assert "`.venv/bin/python -m pytest -m slow`" in text
    for part in ("hypothesis", "benchmark", "Chromium", "real exports"):
        assert part in text
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "-m 'not slow'" in pyproject and '"slow:' in pyproject  # the default run is the fast tier


def test_every_fact_and_column_is_documented():
    for fact in load_facts().values():
        assert fact.columns, fact.path
        assert all(c.doc for c in fact.columns), fact.path
        if not fact.is_helper:
            assert len(fact.doc) > 40, fact.path


def test_every_canonical_column_is_documented_with_a_unit_suffix_where_it_has_one():
    for view in VIEWS.values():
        for col in view.columns:
            assert col.doc
            if "(ns)" in col.doc:
                assert col.name.endswith("_ns"), (view.name, col.name)


def test_pyproject_pins_duckdb_and_its_scanner_together():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    duck = re.search(r'"duckdb==([\d.]+)"', text).group(1)
    scanner = re.search(r'"duckdb-extension-sqlite-scanner==([\d.]+)"', text).group(1)
    assert duck == scanner


def test_installed_wheel_ships_rules_templates_and_facts_under_one_import_name():
    import importlib.metadata

    import nsys_diagnose

    site = Path(nsys_diagnose.__file__).resolve().parents[1]
    if site.name not in ("site-packages", "dist-packages"):
        pytest.skip("editable install: the wheel layout is checked by CI's regular install")
    dists = [d for d in importlib.metadata.distributions(path=[str(site)]) if d.metadata["Name"] == "nsys-diagnose"]
    assert len(dists) == 1
    files = [str(f) for f in dists[0].files or []]
    top_level = {f.split("/")[0] for f in files
                 if not f.startswith("..") and not f.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"nsys_diagnose"}  # no generic `rules`, `engine` or `reports` in site-packages
    assert any(f.startswith("nsys_diagnose/bundled_rules/launch-bound/launch-bound.yaml") for f in files)
    assert any(f.startswith("nsys_diagnose/bundled_rules/capture/presets/vllm.yaml") for f in files)
    assert any(f.startswith("nsys_diagnose/capture/run.py") for f in files)
    assert any(f.startswith("nsys_diagnose/bundled_rules/facts/summary.sql") for f in files)  # the pack's facts
    assert any(f.startswith("nsys_diagnose/bundled_rules/facts/cross_rank/rank_balance.sql") for f in files)
    assert any(f.startswith("nsys_diagnose/bundled_rules/facts/gpu_metric_names.csv") for f in files)
    assert {f"nsys_diagnose/bundled_rules/vocabulary/{name}.yaml" for name in (
        "categories", "headlines", "operation_classes", "stacks", "api_names", "metrics")} <= set(files)
    assert any(f.startswith("nsys_diagnose/templates/report.md.j2") for f in files)
    assert any(f.startswith("nsys_diagnose/fixtures/examples/") for f in files)
    assert any(f.startswith("nsys_diagnose/fixtures/scenarios/eager_decode.py") for f in files)  # one per scenario


@pytest.mark.real_exports
def test_facts_survive_repeated_runs_without_duckdb_internal_errors():
    # DuckDB 1.5.5 intermittently failed an internal assertion (and invalidated the database) on
    # OVER () windows over small aggregates; the facts avoid them. Repeat to catch a regression.
    from nsys_diagnose.facts.compute import compute_facts
    from nsys_diagnose.reading.export import open_export

    from conftest import REAL_DIR

    path = REAL_DIR / "MohanadOdema__DLProf__w_Relu_nsys_profile__2022.1.3_RTX2070S_pytorch-cnn-dlprof.sqlite"
    if not path.exists():
        pytest.skip("real exports not available")
    with open_export(path) as export:
        for _ in range(12):
            assert compute_facts(export).first("summary")["kernel_count"] == 59
    for fact in load_facts().values():
        assert "OVER ()" not in fact.sql.replace("OVER () windows", ""), fact.path
