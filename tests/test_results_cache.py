"""A cached export keeps its computed facts, so a second run that asks the same questions (any rules, thresholds
or output format) skips the fact queries; anything that changes the answers computes them again, and a facts
file this user did not write unchanged is never believed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from nsys_diagnose.api import diagnose
from nsys_diagnose.diagnosis.config import Config, apply_set
from nsys_diagnose.facts.results_cache import SUFFIX
from nsys_diagnose.reports.render import render

EAGER = REPO / "fixtures" / "examples" / "eager_decode.sqlite"
REUSED = "reusing the facts computed from"


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    copy = tmp_path / "profiles" / "eager_decode.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(EAGER, copy)
    return copy


def _run(profile: Path, cache_dir: Path, *sets: str) -> tuple[dict, list[str]]:
    config = Config()
    for assignment in sets:
        apply_set(config, assignment)
    said: list[str] = []
    report = diagnose(profile, config, progress=said.append, cache_dir=cache_dir)
    return json.loads(render(report, "json")), said


def _facts_file(cache_dir: Path) -> Path:
    [found] = [p for p in cache_dir.iterdir() if p.name.endswith(SUFFIX)]
    return found


def _without_tool_noise(document: dict) -> dict:
    document = dict(document)
    document.pop("generated_at", None)
    return document


def test_a_second_run_reuses_the_facts_and_reports_the_same(profile, tmp_path):
    cache = tmp_path / "cache"
    first, said_first = _run(profile, cache)
    second, said_second = _run(profile, cache)
    assert not any(REUSED in s for s in said_first)
    assert any(REUSED in s for s in said_second)
    assert not any(s.startswith("computing fact") for s in said_second)
    assert _without_tool_noise(second) == _without_tool_noise(first)
    assert first["verdict"]["primary"] == "launch-bound"


def test_rule_settings_reuse_the_facts_and_are_judged_afresh(profile, tmp_path):
    cache = tmp_path / "cache"
    plain, _ = _run(profile, cache)
    stricter, said = _run(profile, cache, "launch-bound.max_overhead_ratio=0.7")
    assert any(REUSED in s for s in said)
    fired = lambda doc: {f["rule"] for f in doc["findings"]}  # noqa: E731
    assert "launch-bound" in fired(plain) and "launch-bound" not in fired(stricter)


def test_a_fact_parameter_or_phase_pattern_computes_the_facts_again(profile, tmp_path):
    cache = tmp_path / "cache"
    _run(profile, cache)
    for change in ("facts.host_work_min_ns=1", "phases.decode=(?i)never-matches"):
        if change.startswith("phases."):
            config = Config(phase_patterns={"decode": "(?i)never-matches"})
            said: list[str] = []
            diagnose(profile, config, progress=said.append, cache_dir=cache)
        else:
            _, said = _run(profile, cache, change)
        assert not any(REUSED in s for s in said), change
        assert any(s.startswith("computing fact") for s in said), change


def test_an_edited_facts_file_is_ignored_and_rewritten(profile, tmp_path):
    cache = tmp_path / "cache"
    truth, _ = _run(profile, cache)
    path = _facts_file(cache)
    entry = json.loads(path.read_text())
    payload = json.loads(entry["payload"])
    payload["results"]["summary"]["rows"][0]["gpu_utilization"] = 0.999  # a forged number, seal left as is
    entry["payload"] = json.dumps(payload)
    path.write_text(json.dumps(entry))
    again, said = _run(profile, cache)
    assert not any(REUSED in s for s in said)
    assert _without_tool_noise(again) == _without_tool_noise(truth)
    assert json.loads(json.loads(path.read_text())["payload"]) != payload  # the forgery is gone


def test_a_facts_file_others_may_write_a_link_or_a_fifo_is_not_believed(profile, tmp_path):
    cache = tmp_path / "cache"
    _run(profile, cache)
    path = _facts_file(cache)
    os.chmod(path, 0o666)
    _, said = _run(profile, cache)
    assert not any(REUSED in s for s in said)
    elsewhere = tmp_path / "elsewhere.json"
    shutil.copyfile(path, elsewhere)
    path.unlink()
    path.symlink_to(elsewhere)
    _, said = _run(profile, cache)
    assert not any(REUSED in s for s in said)
    path.unlink()
    os.mkfifo(path)  # opening it for reading must not wait for a writer
    _, said = _run(profile, cache)
    assert not any(REUSED in s for s in said)


def test_the_facts_file_is_as_private_as_the_profile(profile, tmp_path):
    cache = tmp_path / "cache"
    os.chmod(profile, 0o600)
    _run(profile, cache)
    assert _facts_file(cache).stat().st_mode & 0o777 == 0o600


def test_without_a_cache_no_facts_are_kept(profile, tmp_path):
    said: list[str] = []
    diagnose(profile, Config(), progress=said.append, cache=False)
    assert not any(REUSED in s for s in said)
    assert [p for p in profile.parent.iterdir()] == [profile]
