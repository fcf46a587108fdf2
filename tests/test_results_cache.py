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
from nsys_diagnose.runs.api import diagnose
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


def _cache_dir(tmp_path: Path, name: str = "cache") -> Path:
    """A cache directory the user chose (--cache-dir): it must exist to be used."""
    directory = tmp_path / name
    directory.mkdir()
    return directory


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
    cache = _cache_dir(tmp_path)
    first, said_first = _run(profile, cache)
    second, said_second = _run(profile, cache)
    assert not any(REUSED in s for s in said_first)
    assert any(REUSED in s for s in said_second)
    assert not any(s.startswith("computing fact") for s in said_second)
    assert _without_tool_noise(second) == _without_tool_noise(first)
    assert first["verdict"]["primary"] == "launch-bound"


@pytest.mark.slow
def test_rule_settings_reuse_the_facts_and_are_judged_afresh(profile, tmp_path):
    cache = _cache_dir(tmp_path)
    plain, _ = _run(profile, cache)
    stricter, said = _run(profile, cache, "launch-bound.max_overhead_ratio=0.7")
    assert any(REUSED in s for s in said)
    fired = lambda doc: {f["rule"] for f in doc["findings"]}  # noqa: E731
    assert "launch-bound" in fired(plain) and "launch-bound" not in fired(stricter)


@pytest.mark.slow
def test_a_fact_parameter_or_phase_pattern_computes_the_facts_again(profile, tmp_path):
    cache = _cache_dir(tmp_path)
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


@pytest.mark.slow
def test_an_edited_facts_file_is_ignored_and_rewritten(profile, tmp_path):
    cache = _cache_dir(tmp_path)
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


@pytest.mark.slow
def test_a_facts_file_others_may_write_a_link_or_a_fifo_is_not_believed(profile, tmp_path):
    cache = _cache_dir(tmp_path)
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


@pytest.mark.slow
def test_the_facts_file_is_as_private_as_the_profile(profile, tmp_path):
    cache = _cache_dir(tmp_path)
    os.chmod(profile, 0o600)
    _run(profile, cache)
    assert _facts_file(cache).stat().st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_without_a_cache_no_facts_are_kept(profile, tmp_path):
    said: list[str] = []
    diagnose(profile, Config(), progress=said.append, cache=False)
    assert not any(REUSED in s for s in said)
    assert [p for p in profile.parent.iterdir()] == [profile]


@pytest.mark.slow
def test_a_run_killed_while_keeping_the_facts_leaves_only_what_the_next_run_sweeps(profile, tmp_path):
    """SIGKILL (or the OOM killer) while the facts are being kept: the unpublished file is inside a build
    directory of the dead process, which the next run's sweep removes; no stray file is left in the cache
    directory."""
    import signal
    import subprocess
    import sys
    import time

    from nsys_diagnose.reading import cache as store
    from nsys_diagnose.reading import leftovers

    caches = _cache_dir(tmp_path, "caches")
    # The child dies at the moment it would publish its facts file, once the file is written.
    child = f"""
import os, signal
real_replace = os.replace
def replace(source, target, *args, **kwargs):
    if str(target).endswith({SUFFIX!r}):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(source, target, *args, **kwargs)
os.replace = replace
from nsys_diagnose.runs.api import diagnose
diagnose({str(profile)!r}, cache_dir={str(caches)!r})
"""
    scratch = tmp_path / "tmp"  # the killed child's own scratch directory stays there, not in the system's
    scratch.mkdir()
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = sorted(p.name for p in caches.iterdir())
    cached = [n for n in left if n.endswith(store.CACHE_SUFFIX)]
    assert len(cached) == 1, left  # the cache was complete before the facts
    assert not [n for n in left if n.endswith(SUFFIX)], left  # no facts file was published
    stray = [n for n in left if not n.endswith(store.CACHE_SUFFIX) and not n.startswith(store.KEY_PREFIX)]
    assert len(stray) == 1 and stray[0].startswith(store.BUILD_PREFIX), left
    assert [p.name for p in (caches / stray[0]).iterdir()] == [cached[0] + SUFFIX]

    later = time.time() + leftovers.LEFTOVER_AGE_S + 60
    assert leftovers.sweep_leftovers([caches], now=later) == [caches / stray[0]]
    assert len(leftovers.sweep_leftovers([scratch], now=later)) == 1 and not os.listdir(scratch)
    assert all(n.endswith(store.CACHE_SUFFIX) or n.startswith(store.KEY_PREFIX) for n in os.listdir(caches))
    report, said = _run(profile, caches)
    assert not any(REUSED in s for s in said)  # nothing unpublished was believed
    assert report["verdict"]["primary"] == "launch-bound"
