"""Every sentence of the verdict is worded in headlines.yaml, the notes after the headline and the per-phase lines
included: a team pack that rewords one of them changes what its reports say, and the bundled wording is what the
reports said before it moved into data."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_diagnose.diagnosis.config import Config
from nsys_diagnose.pack.headlines import HeadlineError, load_headlines
from nsys_diagnose.reports.render import render
from nsys_diagnose.runs.api import diagnose

from conftest import scenario_path


def _team(tmp_path: Path, text: str) -> Config:
    (tmp_path / "headlines.yaml").write_text(text, encoding="utf-8")
    return Config(rule_dirs=[tmp_path])


def test_a_team_pack_rewords_the_unexplained_gaps_note(tmp_path):
    path = scenario_path("tiny_capture")
    bundled = diagnose(path, cache=False)
    assert "The GPUs still wait between kernels (overhead ratio " in bundled.verdict.headline
    config = _team(tmp_path, 'unexplained_gaps: " Gaps nobody explains (ratio {ratio}): {causes}."\n'
                             'idle_cause_share: "{cause} {share}"\n')
    reworded = diagnose(path, config, cache=False)
    markdown = render(reworded, "md")
    assert "still wait between kernels" not in markdown
    # the numbers are still the tool's, each cause with its share in the order the team chose
    assert reworded.verdict.headline.endswith(" Gaps nobody explains (ratio 1.00): launch cost 74 %, allocation and "
                                              "free calls 26 %.")
    assert "Gaps nobody explains" in markdown


def test_a_team_pack_rewords_the_per_phase_lines(tmp_path):
    path = scenario_path("prefill_decode_nvtx")
    bundled = diagnose(path, cache=False)
    assert [p.line.split(":", 1)[0] for p in bundled.verdict.phases] == ["prefill (bounds TTFT)",
                                                                         "decode (bounds TPOT)"]
    config = _team(tmp_path, 'phase_line: "Phase {phase}: {judgement} ({size}{too_few})"\n'
                             'phase_line_healthy: "healthy ({where})"\n'
                             'phase_too_few: " (few steps)"\n'
                             'goal_tpot: "the decode goal"\n')
    reworded = diagnose(path, config, cache=False)
    lines = [p.line for p in reworded.verdict.phases]
    assert lines[0].startswith("Phase prefill: healthy (GPU busy 99 %, time goes to kernels led by ")
    assert lines[0].endswith(" (1 step, 29 % of the run's GPU window (few steps))")
    assert lines[1].startswith("Phase decode: launch-bound, ≈54 % of decode's GPU time")
    assert "In decode (bounds the decode goal): " in reworded.verdict.headline
    markdown = render(reworded, "md")
    assert "Phase decode: launch-bound" in markdown and "decode (bounds TPOT): " not in markdown


def test_a_team_pack_rewords_the_idle_server_note(tmp_path):
    path = scenario_path("idle_server_bursts")
    assert " Waiting for requests " in diagnose(path, cache=False).verdict.headline
    config = _team(tmp_path, 'server_idle_serving: " Idle {share} ({stretches}{how}); judged: {active}."\n'
                             'server_idle_many: "{count} pauses"\n')
    headline = diagnose(path, config, cache=False).verdict.headline
    assert "Waiting for requests" not in headline
    assert " pauses" in headline and "; judged: " in headline


@pytest.mark.parametrize("text, message", [
    ('phase_line: "{phase}: {verdict}"\n', r"phase_line uses \{verdict\}, which it cannot fill in \(its "
                                           r"placeholders: \{bounds\}, \{judgement\}, \{phase\}, \{size\}, "
                                           r"\{too_few\}\)"),
    ('unexplained_gap: "x"\n', r"unknown sentence 'unexplained_gap'; did you mean 'unexplained_gaps'\?"),
    ('run_rank_many: "ranks {rank}"\n', r"run_rank_many uses \{rank\}, which it cannot fill in; did you mean "
                                        r"'ranks'\?"),
])
def test_a_moved_sentence_is_checked_like_the_headline(tmp_path, text, message):
    (tmp_path / "headlines.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(HeadlineError, match=r"headlines.yaml:1:1: " + message):
        load_headlines([tmp_path])


def test_a_team_pack_rewords_how_a_multi_rank_verdict_names_its_ranks(tmp_path):
    from nsys_diagnose.model.runmodel import RankRow, RunBalance
    from nsys_diagnose.model.verdict import Verdict
    from nsys_diagnose.runs.multirank import run_verdict

    primaries = ["launch-bound", "launch-bound", None]
    ranks = [RankRow(rank=i, path=f"r{i}.sqlite", file=f"r{i}.sqlite", findings=[],
                     verdict=Verdict(primary=p, rule=p, headline=f"rank {i} headline"))
             for i, p in enumerate(primaries)]
    balance = RunBalance(rank_count=3, comm_rank_count=3, imbalance=0.02)
    bundled = run_verdict([], ranks, balance)
    assert bundled.subject == "ranks 0, 1"
    assert "on 2 of 3 ranks (ranks 0, 1)" in bundled.headline
    assert "across the 3 ranks with kernels" in bundled.headline
    (tmp_path / "headlines.yaml").write_text('run_rank_many: "GPUs of rank {ranks}"\n'
                                             'run_rank_count_many: "{count} workers"\n', encoding="utf-8")
    reworded = run_verdict([], ranks, balance, load_headlines([tmp_path]))
    assert reworded.subject == "GPUs of rank 0, 1"
    assert "on 2 of 3 ranks (GPUs of rank 0, 1)" in reworded.headline
    assert "across the 3 workers with kernels" in reworded.headline


def test_a_team_pack_rewords_the_start_up_note_and_line(tmp_path):
    path = scenario_path("model_load_decode")
    bundled = diagnose(path, cache=False)
    assert " after a one-off start-up (model load and warm-up, " in bundled.verdict.headline
    config = _team(tmp_path, 'startup_judged_after: " Judged: the {steady} after loading ({parts}; {share}; by '
                             '{found})."\n'
                             'startup_load_warmup: "weights and warm-up"\n'
                             'startup_line_apart: "Loading: {description} (then {steady} judged)."\n')
    reworded = diagnose(path, config, cache=False)
    assert "one-off start-up" not in reworded.verdict.headline
    steady = bundled.verdict.headline.split(" This verdict judges the ", 1)[1].split(" after", 1)[0]
    assert f" Judged: the {steady} after loading (weights and warm-up; " in reworded.verdict.headline
    assert reworded.startup is not None and reworded.startup.line.startswith("Loading: model load: ")
    markdown = render(reworded, "md")
    assert "after loading (weights and warm-up; " in markdown and "Judged apart:" not in markdown


def test_a_team_pack_rewords_why_a_finding_is_only_also_checked(tmp_path):
    from nsys_diagnose.model.findings import Finding
    from nsys_diagnose.diagnosis.merge import set_aside_negligible

    tiny = Finding(rule="small-grids", title="Small grids", category="occupancy", severity="info", kind="cause",
                   impact=0.001, subject="GPU 0", message="m", evidence=[], remediation=[], references=[],
                   row={})
    _, bundled = set_aside_negligible([tiny], load_headlines())
    assert bundled[0].reason == "fired (GPU 0) but costs under 0.5 % of GPU time"
    (tmp_path / "headlines.yaml").write_text('negligible: "below {limit}{where}"\nnegligible_where: " on {subject}"\n',
                                             encoding="utf-8")
    _, reworded = set_aside_negligible([tiny], load_headlines([tmp_path]))
    assert reworded[0].reason == "below 0.5 % on GPU 0"


def test_a_team_pack_rewords_the_phase_cost_evidence_row(tmp_path):
    path = scenario_path("prefill_decode_nvtx")
    bundled = diagnose(path, cache=False)
    rows = [e for f in bundled.findings for e in f.evidence if e.label == "Cost in decode and in the run"]
    assert rows and " of decode's GPU time, " in rows[0].display and rows[0].display.endswith(" of the run's")
    config = _team(tmp_path, 'evidence_phase_cost: "{phase} vs run"\n'
                             'evidence_phase_cost_value: "{impact} / {run_impact}"\n')
    reworded = diagnose(path, config, cache=False)
    labels = {e.label: e.display for f in reworded.findings for e in f.evidence}
    assert "Cost in decode and in the run" not in labels
    assert labels["decode vs run"].count(" / ") == 1 and labels["decode vs run"].count("%") == 2
    assert "decode vs run" in render(reworded, "md")
