"""Several reports from one diagnosis: `diagnose PROFILE -o r.md -o r.html -o r.json` diagnoses once and writes
each file in the format its extension names (what CI jobs and the GitHub Action want: three formats for the
price of one run). With one -o and no -f the extension chooses too; -f still forces a format for one file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO
from nsys_diagnose.cli import main as cli
from nsys_diagnose.reports.render import render
from nsys_diagnose.model.report import Report

EXAMPLE = REPO / "fixtures" / "examples" / "healthy_prefill.sqlite"


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("outputs")
    files = {"md": out / "r.md", "html": out / "r.HTML", "json": out / "r.json", "text": out / "r.txt"}
    args = [str(EXAMPLE), "-q", "--no-cache"]
    for f in files.values():
        args += ["-o", str(f)]
    assert cli.main(args) == 0
    return files


def test_one_diagnosis_writes_every_format_its_extensions_name(written, capsys) -> None:
    report = Report.model_validate(json.loads(written["json"].read_text(encoding="utf-8")))
    assert written["md"].read_text(encoding="utf-8") == render(report, "md")
    assert written["html"].read_text(encoding="utf-8") == render(report, "html")  # the suffix in any case
    assert written["text"].read_text(encoding="utf-8") == render(report, "terminal")  # plain, no colour
    assert "\x1b[" not in written["text"].read_text(encoding="utf-8")
    assert capsys.readouterr().out == ""  # everything went to the files


@pytest.mark.slow
def test_one_output_without_format_follows_its_extension(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    assert cli.main([str(EXAMPLE), "-q", "--no-cache", "-o", str(target)]) == 0
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    forced = tmp_path / "report.html.txt"
    assert cli.main([str(EXAMPLE), "-q", "--no-cache", "-f", "json", "-o", str(forced)]) == 0
    assert json.loads(forced.read_text(encoding="utf-8"))["tool"] == "nsys-diagnose"


@pytest.mark.parametrize("extra, words", [
    (["-f", "md", "-o", "a.md", "-o", "b.html"], "with several -o, each file's extension chooses its format"),
    (["-o", "same.md", "-o", "same.md"], "the same -o file is given twice"),
])
def test_contradicting_outputs_are_one_sentence_and_exit_2(tmp_path: Path, capsys, extra, words) -> None:
    args = [str(EXAMPLE), "-q", "--no-cache", *[str(tmp_path / a) if a.endswith((".md", ".html")) else a
                                               for a in extra]]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_every_output_is_checked_before_the_profile_is_read(tmp_path: Path, capsys) -> None:
    """One -o naming the input refuses the whole run, before anything is written: no half-written set."""
    safe = tmp_path / "r.md"
    assert cli.main([str(EXAMPLE), "-q", "--no-cache", "-o", str(safe), "-o", str(EXAMPLE)]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not safe.exists()


@pytest.mark.slow
def test_compare_writes_every_format_from_one_comparison(tmp_path: Path) -> None:
    before, after = REPO / "fixtures" / "examples" / "eager_decode.sqlite", EXAMPLE
    files = [tmp_path / "c.md", tmp_path / "c.json"]
    assert cli.main(["compare", str(before), str(after), "-q", "--no-cache", "-o", str(files[0]),
                     "-o", str(files[1])]) == 0
    comparison = json.loads(files[1].read_text(encoding="utf-8"))
    assert comparison["before"]["path"] == str(before) and comparison["verdict"] in ("improved", "regressed")
    assert files[0].read_text(encoding="utf-8").startswith("## ")
