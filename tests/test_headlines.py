"""The verdict headline's wording is data (rules/vocabulary/headlines.yaml): a team
pack rewords it with a headlines.yaml in
its rule directory, and a broken one stops the load with the file and what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.diagnosis.config import Config
from nsys_diagnose.pack.headlines import PLACEHOLDERS, HeadlineError, load_headlines
from nsys_diagnose.fixtures.generator import generate


@pytest.fixture(scope="module")
def eager(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("headlines") / "eager_decode.sqlite"
    generate("eager_decode", path)
    return path


def test_the_bundled_wording_leads_with_the_primary_finding_and_its_cost(eager):
    report = diagnose(eager, cache=False)
    primary = next(f for f in report.findings if f.rule == report.verdict.rule)
    assert report.verdict.headline.startswith(f"{primary.title} (costs ≈")
    assert f"of GPU time): {primary.message}" in report.verdict.headline


def test_a_team_pack_rewords_the_headline(eager, tmp_path):
    (tmp_path / "headlines.yaml").write_text('primary: "Bottleneck: {title}{cost}. {message}"\n'
                                             'cost: " ({impact} of GPU time)"\n', encoding="utf-8")
    report = diagnose(eager, Config(rule_dirs=[tmp_path]), cache=False)
    primary = next(f for f in report.findings if f.rule == report.verdict.rule)
    assert report.verdict.headline.startswith(f"Bottleneck: {primary.title} (")
    assert report.verdict.headline.endswith(f" of GPU time). {primary.message}")
    # the sentences it leaves out keep the bundled wording
    assert load_headlines([tmp_path]).sentences["blocking"] == load_headlines().sentences["blocking"]


@pytest.mark.parametrize("text, message", [
    ("primery: x\n", r"headlines.yaml:1:1: unknown sentence 'primery'; did you mean 'primary'\?"),
    ('cost: " ({impact} of {phase})"\n', r"headlines.yaml:1:1: cost uses \{phase\}, which it cannot fill in "
                                         r"\(its placeholders: \{impact\}\)"),
    ('healthy_graphs: ""\nprimary: "{titel}"\n', r"headlines.yaml:2:1: primary uses \{titel\}, which it cannot fill "
                                                  r"in; did you mean 'title'\?"),
    ("- primary\n", r"headlines.yaml:1:1: the headline wording must be a mapping"),
    ("primary: [x]\n", r"headlines.yaml:1:1: primary must be text"),
    ('primary: "{title}\n', r"headlines.yaml:2:1: invalid YAML"),
])
def test_a_broken_wording_file_says_what_to_change(tmp_path, text, message):
    (tmp_path / "headlines.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(HeadlineError, match=message):
        load_headlines([tmp_path])


def test_every_sentence_is_worded_and_uses_only_its_placeholders():
    sentences = load_headlines().sentences
    assert set(sentences) == set(PLACEHOLDERS)
    assert all(sentences[key] for key in PLACEHOLDERS)


def test_rules_check_reports_a_broken_wording_file(tmp_path, capsys):
    from nsys_diagnose.cli.main import main

    (tmp_path / "headlines.yaml").write_text("primary: \"{title}: {msg}\"\n", encoding="utf-8")
    assert main(["rules", "check", str(tmp_path)]) == 2
    assert "headlines.yaml:1:1: primary uses {msg}, which it cannot fill in; did you mean 'message'?" in \
        capsys.readouterr().out


def test_every_mistake_of_a_wording_file_is_listed_with_its_line(tmp_path):
    (tmp_path / "headlines.yaml").write_text('primary: "{title}"\nprimery: x\ncost: [x]\n', encoding="utf-8")
    with pytest.raises(HeadlineError) as caught:
        load_headlines([tmp_path])
    assert [p.split(": ", 1)[0].rsplit("/", 1)[-1] for p in caught.value.problems] == [
        "headlines.yaml:2:1", "headlines.yaml:3:1"]


def test_a_team_pack_rewords_the_multi_rank_headline(tmp_path):
    from nsys_diagnose.model.verdict import Verdict
    from nsys_diagnose.model.runmodel import RankRow, RunBalance
    from nsys_diagnose.runs.multirank import run_verdict

    ranks = [RankRow(rank=i, path=f"r{i}.sqlite", file=f"r{i}.sqlite",
                     verdict=Verdict(primary="launch-bound", rule="launch-bound", headline=f"rank {i} is launch-bound"),
                     findings=[])
             for i in range(3)]
    balance = RunBalance(rank_count=3, comm_rank_count=3, imbalance=0.02)
    bundled = run_verdict([], ranks, balance).headline
    assert bundled == ("No cross-rank finding (compute time differs by 2.0 % across the 3 ranks with kernels); the "
                       "most common rank verdict is launch-bound, on all 3 ranks. Rank 0: rank 0 is launch-bound")
    (tmp_path / "headlines.yaml").write_text('run_common: "{primary} on {who} ({spread}); see rank {rank}."\n'
                                             'run_all_ranks: "every rank"\n', encoding="utf-8")
    reworded = run_verdict([], ranks, balance, load_headlines([tmp_path])).headline
    assert reworded == "launch-bound on every rank (compute time differs by 2.0 % across the 3 ranks with kernels); " \
                       "see rank 0."


@pytest.mark.parametrize("sentence", ["{title{cost}", "{title} {cost", "{title!r}{cost:>10}", "costs } {cost}"])
def test_a_brace_that_is_no_placeholder_is_refused_instead_of_printed(tmp_path, sentence):
    (tmp_path / "headlines.yaml").write_text(f'primary: "{sentence}"\n', encoding="utf-8")
    with pytest.raises(HeadlineError, match=r"headlines\.yaml:1:1: primary has a brace that opens or closes no "
                                            r"placeholder"):
        load_headlines([tmp_path])
