"""Every report says which NVTX texts each phase's pattern matched, and how many ranges: a user sees at once
whether the decode steps counted are decode steps (and not, say, compiler ranges that contain the letters)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from nsys_diagnose.fixtures.generator import generate
from nsys_diagnose.reports.render import render

from cli_in_process import run_cli
from conftest import analysis


@pytest.fixture(scope="module")
def relabelled(tmp_path_factory) -> tuple:
    """prefill_decode_nvtx (1 'prefill' range, 40 'decode' ranges) with its decode ranges relabelled the ways
    serving stacks and hand-written code name them: 25 numbered `decode_step N`, 10 `forward_decode`, 3 `decode`,
    2 `LLM@decode_all`."""
    path = tmp_path_factory.mktemp("phase-texts") / "relabelled.sqlite"
    generate("prefill_decode_nvtx", path)
    con = sqlite3.connect(path)
    with con:
        ids = [r[0] for r in con.execute("SELECT rowid FROM NVTX_EVENTS WHERE text = 'decode' ORDER BY start")]
        assert len(ids) == 40
        labels = [f"decode_step {i}" for i in range(25)] + ["forward_decode"] * 10 + ["decode"] * 3 + \
            ["LLM@decode_all"] * 2
        con.executemany("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?", zip(labels, ids))
    con.close()
    return analysis(path)


@pytest.mark.slow
def test_the_phases_fact_lists_the_texts_each_phase_matched(relabelled) -> None:
    facts, _ = relabelled
    by_phase = {r["phase"]: r for r in facts.rows("phases")}
    decode = by_phase["decode"]
    assert decode["range_count"] == 40
    assert decode["text_count"] == 4  # the numbered steps are one text
    assert decode["matched_texts"] == [{"text": "decode_step #", "range_count": 25},
                                       {"text": "forward_decode", "range_count": 10},
                                       {"text": "decode", "range_count": 3}]
    assert by_phase["prefill"]["matched_texts"] == [{"text": "prefill", "range_count": 1}]


@pytest.mark.slow
def test_every_format_says_what_each_phase_matched(relabelled) -> None:
    _, report = relabelled
    terminal = render(report, "terminal")
    assert "decode: 40 ranges matched (decode_step # 25, forward_decode 10, decode 3, +1 more text)" in terminal
    assert "prefill: 1 range matched (prefill 1)" in terminal
    md = render(report, "md")
    assert "| decode | 40 | decode\\_step # 25, forward\\_decode 10, decode 3, +1 more text |" in md
    html = render(report, "html")
    assert ('<td><code title="decode_step #">decode_step #</code> 25, <code title="forward_decode">forward_decode'
            '</code> 10, <code title="decode">decode</code> 3, +1 more text</td>') in html
    data = json.loads(render(report, "json"))
    decode = next(p for p in data["facts"]["phases"] if p["phase"] == "decode")
    assert decode["text_count"] == 4 and decode["matched_texts"][0] == {"text": "decode_step #", "range_count": 25}


def test_facts_show_phases_prints_the_texts_of_a_profile_split_into_phases(tmp_path) -> None:
    # `diagnose facts show phases` computes the phases fact and what it needs, not the per-phase facts; it used to
    # stop with an internal error on any profile whose work splits into phases.
    path = tmp_path / "prefill_decode_nvtx.sqlite"
    generate("prefill_decode_nvtx", path)
    done = run_cli("facts", "show", "phases", path, "-f", "json", "--no-cache")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert [(r["phase"], r["range_count"], r["matched_texts"]) for r in rows] == [
        ("prefill", 1, [{"text": "prefill", "range_count": 1}]),
        ("decode", 40, [{"text": "decode", "range_count": 40}])]


HOSTILE_STEPS = ["decode <script>alert(1)</script>", "decode|pipe`tick`[l](http://evil.example/a)",
                 "decode \x1b[31mred\x1b[0m\x9b31m", "decode\nsecond line\r\n|x"]


@pytest.mark.slow
def test_hostile_phase_texts_stay_inert_in_every_format(tmp_path) -> None:
    path = tmp_path / "hostile.sqlite"
    generate("prefill_decode_nvtx", path)
    con = sqlite3.connect(path)
    with con:
        ids = [r[0] for r in con.execute("SELECT rowid FROM NVTX_EVENTS WHERE text = 'decode' ORDER BY start")]
        con.executemany("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?",
                        [(HOSTILE_STEPS[i % len(HOSTILE_STEPS)], r) for i, r in enumerate(ids)])
    con.close()
    _, report = analysis(path)
    decode = next(p for p in report.facts["phases"] if p["phase"] == "decode")
    assert decode["range_count"] == 40 and decode["text_count"] == 4  # every one is a decode step
    terminal = render(report, "terminal")
    assert "decode: 40 ranges matched (decode" in terminal
    assert not any(c in terminal for c in ("\x1b", "\x9b"))
    md = render(report, "md")
    row = next(line for line in md.splitlines() if line.startswith("| decode | 40 |"))
    assert row.count("|") - row.count("\\|") == 10  # nine cells: no text breaks out of its cell
    assert "<script>" not in md and "](http" not in md.replace("\\](http", "")
    html = render(report, "html")
    assert "<script>" not in html and "&lt;script&gt;" in html
