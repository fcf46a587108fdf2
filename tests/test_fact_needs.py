"""`-- @needs` says what a fact's SQL reads: checked on DuckDB's parse and by binding the query with only its
declared needs present (engine/facts/needs.py), over the bundled facts here and team facts in `rules check`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nsys_diagnose.cli.main import main
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.needs import bind_problems, needs_problems

FACTS = load_facts()


def test_every_bundled_fact_declares_exactly_the_facts_it_reads():
    problems = needs_problems(FACTS)
    assert not problems, "\n".join(problems)


def test_a_read_left_out_of_needs_fails_the_bind_where_only_the_declared_needs_exist():
    reader = FACTS["kernel_summary"]
    assert reader.needs == ["_kernel_classes"]
    facts = {**FACTS, reader.name: dataclasses.replace(reader, needs=[])}
    assert bind_problems(facts, [reader.name]) == [
        f"{reader.path}:{reader.line}:1: fact 'kernel_summary' reads '_kernel_classes' but does not declare "
        f"-- @needs _kernel_classes"]


def _team_fact(tmp_path: Path, needs: str, reads: str) -> Path:
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "acme_kernels.sql").write_text(
        "-- @fact acme_kernels\n-- @doc Kernel names per device.\n-- @column kernels Kernel names.\n"
        f"-- @needs {needs}\nSELECT count(*) AS kernels\nFROM {reads}\n", encoding="utf-8")
    return pack


def test_rules_check_names_the_line_of_a_team_fact_reading_an_undeclared_fact(tmp_path, capsys):
    pack = _team_fact(tmp_path, "_api_names", "kernel_summary")
    assert main(["rules", "check", str(pack)]) == 2
    out = capsys.readouterr().out
    fact_file = pack / "acme_kernels.sql"
    assert f"{fact_file}:6:6: fact 'acme_kernels' reads 'kernel_summary' but does not declare -- @needs " \
           f"kernel_summary" in out
    assert f"{fact_file}:4:1: fact 'acme_kernels' declares -- @needs _api_names but its query never reads " \
           f"'_api_names'" in out


def test_rules_check_accepts_a_team_fact_whose_needs_are_what_it_reads(tmp_path, capsys):
    pack = _team_fact(tmp_path, "kernel_summary", "kernel_summary")
    assert main(["rules", "check", str(pack)]) == 0, capsys.readouterr().out


def test_a_diagnosis_with_a_team_fact_reading_an_undeclared_fact_stops_before_reading_the_export(tmp_path, capsys):
    """The run order would hide the missing `-- @needs` (the other fact happens to run first): `diagnose` and
    `rules test` refuse the pack as `rules check` does, with the read's line and column, and exit 2."""
    pack = _team_fact(tmp_path, "_api_names", "kernel_summary")
    example = Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "eager_decode.sqlite"
    assert main([str(example), "--rule-dir", str(pack), "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{pack / 'acme_kernels.sql'}:6:6: fact 'acme_kernels' reads 'kernel_summary' but does not declare" in err
