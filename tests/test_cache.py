"""The cache of canonical tables in the user's cache directory: reused while the profile is unchanged, rebuilt
when it changed or the cache is damaged, skipped with --no-cache, never written beside the profile unless asked,
never half-written, and Ctrl-C stops promptly without leaving temporary files behind."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import default_stop_signals, start_and_wait_for
from nsys_diagnose.reading import cache as store
from nsys_diagnose.reading import workspace
from nsys_diagnose.reading.messages import CacheWarning
from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.fixtures.generator import generate, generate_large
from nsys_diagnose.reading.export import open_export

REPO = Path(__file__).resolve().parents[1]
DIAGNOSE = Path(sys.executable).parent / "diagnose"


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    p = tmp_path / "profiles" / "run.sqlite"
    p.parent.mkdir()
    generate("eager_decode", p)
    return p


def _cache_of(p: Path) -> Path:
    path = store.cache_path(p)
    assert path is not None
    return path


def _listing(d: Path) -> list[str]:
    return sorted(str(x.relative_to(d)) for x in d.rglob("*"))


def test_second_run_reuses_the_cache_and_gives_the_same_report(profile, user_cache):
    first = diagnose(profile)
    assert _cache_of(profile).is_file() and _cache_of(profile).parent == user_cache
    with open_export(profile, cache=True) as export:
        assert export.cache_hit and export.cache_file == _cache_of(profile)
        assert export.count("kernels") > 1000
    second = diagnose(profile)
    assert second.model_dump(exclude={"profile"}) == first.model_dump(exclude={"profile"})
    assert second.profile.path == str(profile)
    # nothing beside the profile; in the cache directory only the cache, the facts computed from it and the key
    # that seals both
    assert _listing(profile.parent) == ["run.sqlite"]
    assert _listing(user_cache) == sorted([_cache_of(profile).name, _cache_of(profile).name + ".facts.json",
                                           store.key_path(user_cache).name])
    assert stat.S_IMODE(user_cache.stat().st_mode) == 0o700


def test_the_cache_key_hashed_while_the_rules_load_finds_the_cache(profile, user_cache):
    """diagnose opens the profile and hashes it (the cache key) while the rules load: the hash it hands to
    open_export keys the same cache as opening the profile there."""
    from nsys_diagnose.reading.export import prefetch_profile

    diagnose(profile)
    opened = prefetch_profile(profile)
    assert opened is not None
    try:
        with open_export(profile, cache=True, opened=opened) as export:
            assert export.cache_hit and export.cache_file == _cache_of(profile)
    finally:
        opened.close()
    with open_export(profile, cache=True) as export:
        assert export.cache_hit


def test_a_hash_nobody_will_read_stops_when_the_profile_is_closed(tmp_path):
    """A run stopped before the cache is looked up (a broken rule pack) does not wait for the hash of a large
    export to finish: closing the profile stops it."""
    from nsys_diagnose.reading.export import prefetch_profile

    big = tmp_path / "big.sqlite"
    with open(big, "wb") as f:
        f.truncate(4 << 30)  # sparse: 4 GiB of zeros take seconds to hash
    opened = prefetch_profile(big)
    assert opened is not None
    opened.close()
    assert opened._digest is None and opened.fd == -1
    # a run that will key no cache stops the hash at once, and no cache can be keyed on a stopped hash
    opened = prefetch_profile(big)
    assert opened is not None
    try:
        opened.stop_hashing()
        with pytest.raises(RuntimeError, match="hash was stopped"):
            opened.fingerprint()
    finally:
        opened.close()
    os.mkfifo(tmp_path / "fifo.sqlite")
    assert prefetch_profile(tmp_path / "fifo.sqlite") is None  # never opened: open_export says what is wrong
    assert prefetch_profile(tmp_path / "missing.sqlite") is None


@pytest.mark.slow
def test_changed_profile_rebuilds_the_cache(profile, user_cache, tmp_path):
    diagnose(profile)
    other = tmp_path / "other.sqlite"
    generate("sync_storm", other)
    shutil.copyfile(other, profile)  # same path, different content
    with open_export(profile, cache=True) as export:
        assert not export.cache_hit
    report = diagnose(profile)
    assert report.verdict.primary == "api-latency"  # the sync storm, not the cached eager decode
    with open_export(profile, cache=True) as export:
        assert export.cache_hit


@pytest.mark.slow
def test_touching_the_profile_invalidates_the_cache(profile, user_cache):
    diagnose(profile)
    st = profile.stat()
    os.utime(profile, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with open_export(profile, cache=True) as export:
        assert not export.cache_hit


@pytest.mark.slow
def test_same_size_and_mtime_but_other_content_is_not_reused(tmp_path, user_cache):
    """The whole content is hashed: rows rewritten in the middle of a file, with its header, size and mtime
    restored, are seen."""
    profile = tmp_path / "big.sqlite"
    generate("eager_decode", profile, scale=4)
    diagnose(profile)
    st = profile.stat()
    header = profile.read_bytes()[:100]
    with sqlite3.connect(profile) as con:  # the last kernels live in pages far past the first and last MiB
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + 1 WHERE rowid % 2 = 0 AND rowid < '
                    '(SELECT max(rowid) * 2 / 3 FROM CUPTI_ACTIVITY_KIND_KERNEL) AND rowid > '
                    '(SELECT max(rowid) / 3 FROM CUPTI_ACTIVITY_KIND_KERNEL)')
    with open(profile, "r+b") as fh:
        fh.write(header)  # the change counter too: only the rows differ
    os.utime(profile, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert profile.stat().st_size == st.st_size and st.st_size > 3 << 20
    with open_export(profile, cache=True) as export:
        assert not export.cache_hit


@pytest.mark.slow
def test_damaged_cache_is_rebuilt_not_trusted(profile, user_cache):
    user_cache.mkdir(parents=True, exist_ok=True)
    _cache_of(profile).write_bytes(b"not a database at all" * 100)
    report = diagnose(profile)
    assert report.verdict.primary == "launch-bound"
    with open_export(profile, cache=True) as export:
        assert export.cache_hit


@pytest.mark.slow
def test_a_cache_of_another_profile_is_not_used(profile, user_cache, tmp_path):
    other = tmp_path / "other.sqlite"
    generate("sync_storm", other)
    diagnose(other)
    shutil.copyfile(_cache_of(other), _cache_of(profile))  # another profile's cache under our name
    assert diagnose(profile).verdict.primary == "launch-bound"


@pytest.mark.slow
def test_no_cache_writes_nothing_anywhere(profile, user_cache):
    diagnose(profile, cache=False)
    assert _listing(profile.parent) == ["run.sqlite"]
    done = subprocess.run([str(DIAGNOSE), str(profile), "--no-cache", "-q"], capture_output=True, text=True,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert _listing(profile.parent) == ["run.sqlite"]
    assert not user_cache.exists() or not list(user_cache.glob("*" + store.CACHE_SUFFIX))


@pytest.mark.slow
def test_default_cache_is_never_beside_the_profile(profile, user_cache):
    done = subprocess.run([str(DIAGNOSE), str(profile), "-q"], capture_output=True, text=True,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert _listing(profile.parent) == ["run.sqlite"]
    assert len(list(user_cache.glob("*" + store.CACHE_SUFFIX))) == 1


@pytest.mark.slow
def test_cache_beside_the_profile_is_opt_in(profile, user_cache):
    """--cache-dir (or NSYS_DIAGNOSE_CACHE_DIR) puts the cache where the user asks, e.g. beside the profile."""
    done = subprocess.run([str(DIAGNOSE), str(profile), "-q", "--cache-dir", str(profile.parent)],
                          capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    beside = [n for n in _listing(profile.parent) if n.endswith(store.CACHE_SUFFIX)]
    assert len(beside) == 1 and beside[0].endswith("-run.sqlite" + store.CACHE_SUFFIX)
    with open_export(profile, cache=True, cache_dir=profile.parent) as export:
        assert export.cache_hit


@pytest.mark.slow
def test_cache_dir_env_keeps_caches_out_of_the_profile_directory(profile, user_cache, tmp_path, monkeypatch):
    """Everything the cache needs, its key included, goes where the user said: nothing into ~/.cache."""
    caches = tmp_path / "caches"
    caches.mkdir()
    monkeypatch.setenv(store.CACHE_DIR_ENV, str(caches))
    diagnose(profile)
    assert _listing(profile.parent) == ["run.sqlite"]
    assert len(list(caches.glob("*" + store.CACHE_SUFFIX))) == 1
    key = store.key_path(caches)
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert not user_cache.exists()  # the default cache directory, and its key, were never touched
    with open_export(profile, cache=True) as export:
        assert export.cache_hit  # sealed with that key, and reused


@pytest.mark.slow
def test_a_cache_directory_the_user_named_is_never_created(profile, user_cache, tmp_path, monkeypatch):
    """A missing --cache-dir (a typo, an unmounted disk) is not created: the run goes on without a cache, says why
    in its progress, and leaves no directory behind; the default directory is not used instead."""
    missing = tmp_path / "no-such" / "caches"
    said: list[str] = []
    report = diagnose(profile, cache_dir=missing, progress=said.append)
    assert report.verdict.primary == "launch-bound"
    assert not missing.parent.exists() and not user_cache.exists()
    assert any(isinstance(s, CacheWarning) and f"the cache directory {missing} (--cache-dir) does not exist" in s
               and "without a cache" in s for s in said), said
    done = subprocess.run([str(DIAGNOSE), str(profile), "-q", "--cache-dir", str(missing)], capture_output=True,
                          text=True, env=dict(os.environ))
    assert done.returncode == 0 and "launch-bound" in done.stdout, done.stderr
    assert not missing.parent.exists() and not user_cache.exists()


@pytest.mark.slow
def test_unusable_cache_directory_means_no_cache(profile, user_cache, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(store.CACHE_DIR_ENV, str(blocker / "caches"))
    assert diagnose(profile).verdict.primary == "launch-bound"
    with open_export(profile, cache=True) as export:
        assert export.cache_file is None and not export.cache_hit


@pytest.mark.slow
def test_long_profile_names_are_cached_too(tmp_path, user_cache):
    long = tmp_path / ("r" * 240 + ".sqlite")  # 247 bytes: with the cache suffix more than a file name may hold
    generate("tiny_capture", long)
    diagnose(long)
    with open_export(long, cache=True) as export:
        assert export.cache_hit
        assert len(export.cache_file.name.encode()) <= 255


def test_opening_leaves_no_temporary_files(profile, tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    with open_export(profile) as export:
        assert export.workspace is not None and Path(export.workspace.root).parent == scratch
        assert export.count("kernels") > 0
    assert _listing(scratch) == []


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["starting", "reading CUPTI_ACTIVITY_KIND_KERNEL", "computing fact"])
def test_ctrl_c_stops_promptly_and_leaves_no_temporary_files(tmp_path, stage):
    """Ctrl-C while the program is still importing, while the big kernel table is read, and while the facts run:
    the test waits until the run says it reached the stage, then signals."""
    big = tmp_path / "big.sqlite"
    generate_large(big, kernels=800_000)
    scratch, caches = tmp_path / "tmp", tmp_path / "caches"
    scratch.mkdir()
    caches.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), **{store.CACHE_DIR_ENV: str(caches)})
    # As from a terminal: Ctrl-C handled by default even when this suite runs as a background job (which
    # starts with SIGINT ignored, and children inherit that).
    proc = start_and_wait_for([str(DIAGNOSE), str(big), "-q"], stage, tmp_path / "stages", env=env,
                              preexec_fn=default_stop_signals)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    stopped_after = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "diagnose: interrupted"
    assert "Traceback" not in err
    assert stopped_after < 5, f"took {stopped_after:.1f} s to stop"
    assert _listing(scratch) == []
    # a cache is either complete (published before the interrupt) or absent: never a partial file (the key that
    # seals the caches of this directory is kept there too)
    leftovers = _listing(caches) if caches.exists() else []
    assert all(name.endswith(store.CACHE_SUFFIX) or name == store.key_path(caches).name for name in leftovers), \
        leftovers


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MB file system: too small for the tables of a 100 000-kernel export."""
    d = tmp_path / "tiny"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here")
    yield d
    subprocess.run(["umount", str(d)], capture_output=True)


@pytest.mark.slow
def test_full_cache_disk_falls_back_to_no_cache(tmp_path, tiny_disk, monkeypatch):
    big = tmp_path / "big.sqlite"
    generate_large(big, kernels=100_000)
    monkeypatch.setenv(store.CACHE_DIR_ENV, str(tiny_disk))
    report = diagnose(big)
    assert report.verdict.primary == "launch-bound"
    assert _listing(tiny_disk) == [store.key_path(tiny_disk).name]  # the partial cache was removed


@pytest.mark.slow
def test_full_temporary_disk_is_one_sentence(tmp_path, tiny_disk):
    big = tmp_path / "big.sqlite"
    generate_large(big, kernels=100_000)
    env = dict(os.environ, TMPDIR=str(tiny_disk))
    done = subprocess.run([str(DIAGNOSE), str(big), "-q", "--no-cache"], env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "ran out of space" in done.stderr and "Traceback" not in done.stderr
    assert _listing(tiny_disk) == []


def test_memory_limit_is_split_between_ranks_read_side_by_side(monkeypatch):
    monkeypatch.delenv(workspace.MEMORY_LIMIT_ENV, raising=False)
    assert workspace.memory_limit() == "500MB"
    assert workspace.memory_limit(2) == "256MB"  # never starved below 256 MB
    assert workspace.memory_limit(16) == "256MB"
    monkeypatch.setenv(workspace.MEMORY_LIMIT_ENV, "2GB")
    assert workspace.memory_limit(2) == "1024MB"
    monkeypatch.setenv(workspace.MEMORY_LIMIT_ENV, "6GB")
    assert workspace.memory_limit(4) == "1536MB"


@pytest.mark.slow
def test_bad_memory_limit_is_one_sentence(profile, monkeypatch):
    env = dict(os.environ, **{workspace.MEMORY_LIMIT_ENV: "lots'"})
    done = subprocess.run([str(DIAGNOSE), str(profile), "-q", "--no-cache"], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("diagnose: error: NSYS_DIAGNOSE_MEMORY_LIMIT=") and done.stderr.count("\n") == 1
