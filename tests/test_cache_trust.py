"""The cache is private to its user and nothing found on disk is trusted: a planted or shipped cache can neither
run SQL, read a file nor forge a verdict; a private profile never gets a cache others can read; an export whose
rows live partly in a WAL is read afresh; a path switched to another export during a run mixes nothing."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from conftest import run_as, shared_directory
from nsys_diagnose.reading import cache as store
from nsys_diagnose.reading.messages import CacheWarning
from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.base.errors import InputError
from nsys_diagnose.fixtures.generator import generate
from nsys_diagnose.reading.export import open_export

DIAGNOSE = Path(sys.executable).parent / "diagnose"
SECRET = "TOP-SECRET-api-key-0xC0FFEE"


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    """A file only its owner may read, as a credentials file would be."""
    p = tmp_path / "credentials"
    p.write_text(SECRET)
    p.chmod(0o600)
    return p


def _run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DIAGNOSE), *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def _plant(cache: Path, statements: list[str], fingerprint_of: Path | None = None) -> None:
    """A DuckDB file at `cache` made of `statements`, with the fingerprint state a cache of `fingerprint_of`
    would carry (which anyone who can read the profile can compute)."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.unlink(missing_ok=True)
    con = duckdb.connect(str(cache))
    try:
        for sql in statements:
            con.execute(sql)
        if fingerprint_of is not None:
            from nsys_diagnose.reading.profile_file import ProfileFile
            from nsys_diagnose.reading.export import _cache_key

            with ProfileFile.open(fingerprint_of) as pf:
                key = _cache_key(pf)
            con.execute("CREATE OR REPLACE TABLE _state (key VARCHAR, value VARCHAR)")
            con.execute("INSERT INTO _state VALUES ('fingerprint', ?), ('seal', 'forged')", [key])
    finally:
        con.close()


def _forged_views(secret: Path) -> list[str]:
    """Every canonical view as a DuckDB view that reads `secret` into a kernel name."""
    from nsys_diagnose.reading.canonical import VIEWS

    out = []
    for name, view in VIEWS.items():
        cols = ", ".join(f"NULL::{c.type} AS \"{c.name}\"" for c in view.columns)
        out.append(f'CREATE VIEW "{name}" AS SELECT {cols} FROM range(1)')
    cols = ", ".join(f"NULL::{c.type} AS \"{c.name}\"" if c.name != "name" else "content AS name"
                     for c in VIEWS["kernels"].columns)
    out.append(f"CREATE OR REPLACE VIEW kernels AS SELECT {cols} FROM read_text('{secret}')")
    return out


def test_planted_cache_with_a_file_reading_view_is_not_used(tmp_path, user_cache, secret_file):
    """A DuckDB file planted (or shipped) at the cache path, whose views read a private file: the run rebuilds
    the cache, the report holds nothing of the file, and the verdict is the profile's own."""
    profile = tmp_path / "run.sqlite"
    generate("eager_decode", profile)
    cache = store.cache_path(profile)
    _plant(cache, _forged_views(secret_file), fingerprint_of=profile)
    done = _run(profile, "--format", "json", "--fail-on", "warning")
    assert SECRET not in done.stdout + done.stderr
    assert done.returncode == 1, done.stderr  # the real launch-bound warning, not a forged clean bill
    assert json.loads(done.stdout)["verdict"]["primary"] == "launch-bound"
    with open_export(profile, cache=True) as export:
        assert export.cache_hit  # replaced by a genuine cache
        assert not export.query("SELECT count(*) FROM duckdb_views() WHERE database_name = 'canon' "
                                "AND NOT internal")[0][0]


@pytest.mark.slow
def test_a_sealed_cache_whose_tables_were_altered_is_refused(tmp_path, user_cache):
    """Even our own sealed cache is not read once its tables differ from what this version writes: here a
    generated column, an expression DuckDB would evaluate on every read."""
    profile = tmp_path / "run.sqlite"
    generate("eager_decode", profile)
    diagnose(profile)
    cache = store.cache_path(profile)
    con = duckdb.connect(str(cache))
    con.execute("DROP TABLE kernel_names")
    con.execute("CREATE TABLE kernel_names (id BIGINT, value VARCHAR GENERATED ALWAYS AS ('FORGED-' || id))")
    con.execute("INSERT INTO kernel_names (id) SELECT DISTINCT name_id FROM kernels")
    con.close()
    report = diagnose(profile)
    assert "FORGED" not in report.model_dump_json()
    assert report.verdict.primary == "launch-bound"
    with open_export(profile, cache=True) as export:  # replaced by a genuine cache
        assert export.cache_hit and not export.query("SELECT count(*) FROM kernels WHERE name LIKE 'FORGED%'")[0][0]


@pytest.mark.slow
def test_a_cache_sealed_by_another_key_cannot_forge_the_verdict(tmp_path, user_cache, monkeypatch):
    """A cache built by someone else (another user's key) for this very profile, with its rows edited to hide the
    problem, is not reused: the fingerprint can be computed from the profile, the seal cannot."""
    profile = tmp_path / "run.sqlite"
    generate("eager_decode", profile)
    forger = tmp_path / "forger-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(forger))
    store.cache_secret.cache_clear()
    diagnose(profile)
    forged = store.cache_path(profile)
    con = duckdb.connect(str(forged))
    con.execute("DELETE FROM kernels")  # "no GPU work": the launch-bound finding would vanish
    con.close()
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_cache.parent))
    store.cache_secret.cache_clear()
    victim = store.cache_path(profile)
    victim.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(forged, victim)
    done = _run(profile, "--fail-on", "warning", "-q")
    assert done.returncode == 1 and "launch-bound" in done.stdout


@pytest.mark.slow
def test_cache_directory_and_key_are_private(tmp_path, user_cache):
    profile = tmp_path / "run.sqlite"
    generate("tiny_capture", profile)
    diagnose(profile)
    assert stat.S_IMODE(user_cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.key_path(user_cache).stat().st_mode) == 0o600
    user_cache.chmod(0o755)  # opened up by mistake: closed again before it is used
    diagnose(profile)
    assert stat.S_IMODE(user_cache.stat().st_mode) == 0o700


@pytest.mark.slow
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_cache_is_never_more_readable_than_the_profile(tmp_path, user_cache, mode):
    shared = shared_directory()
    profile = tmp_path / "run.sqlite"
    generate("tiny_capture", profile)
    profile.chmod(mode)
    done = _run(profile, "-q", "--cache-dir", shared)
    assert done.returncode == 0, done.stderr
    (cache,) = shared.glob("*" + store.CACHE_SUFFIX)
    assert stat.S_IMODE(cache.stat().st_mode) == mode


@pytest.mark.slow
def test_another_user_cannot_read_the_cache_of_a_private_profile(tmp_path, user_cache, other_user):
    """The profiled command line (with its API keys) is in the cache: a 0600 profile gives a 0600 cache, even in
    a directory every user can enter."""
    shared = shared_directory()
    profile = shared / "run.sqlite"
    generate("tiny_capture", profile)
    profile.chmod(0o600)
    assert _run(profile, "-q", "--cache-dir", shared).returncode == 0
    (cache,) = shared.glob("*" + store.CACHE_SUFFIX)
    denied = run_as(other_user, ["cat", str(cache)])
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert _run(profile, "-q").returncode == 0  # the default cache, in the user's 0700 directory
    (private,) = user_cache.glob("*" + store.CACHE_SUFFIX)
    denied = run_as(other_user, ["cat", str(private)])
    assert denied.returncode != 0 and "Permission denied" in denied.stderr


@pytest.mark.slow
def test_a_cache_planted_by_another_user_is_not_trusted(tmp_path, user_cache, other_user, secret_file):
    """In a shared cache directory another user plants a cache for our profile (with views that read our
    private file, and the right fingerprint): it is not opened; the run goes on without a cache."""
    shared = shared_directory()
    profile = tmp_path / "run.sqlite"
    generate("eager_decode", profile)
    cache = store.cache_path(profile, shared)
    _plant(cache, _forged_views(secret_file), fingerprint_of=profile)
    os.chown(cache, *other_user)  # as if the other user had written it
    done = _run(profile, "--format", "json", "--cache-dir", shared)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert json.loads(done.stdout)["verdict"]["primary"] == "launch-bound"
    assert cache.stat().st_uid == other_user[0]  # left alone, not trusted, not used


@pytest.mark.slow
def test_a_planted_directory_at_the_cache_path_means_no_cache(tmp_path, user_cache):
    profile = tmp_path / "run.sqlite"
    generate("eager_decode", profile)
    store.cache_path(profile).mkdir(parents=True)
    done = _run(profile, "-q")
    assert done.returncode == 0, done.stderr
    assert "launch-bound" in done.stdout


def _to_wal_mode(profile: Path) -> None:
    con = sqlite3.connect(profile)
    con.execute("PRAGMA journal_mode=WAL")
    con.close()


@pytest.mark.slow
def test_rows_committed_into_a_wal_are_read_not_a_stale_cache(tmp_path, user_cache):
    """Rows committed into `run.sqlite-wal` change neither the size, the mtime nor the content of the main file:
    such an export is read afresh every time, never from a cache."""
    profile = tmp_path / "run.sqlite"
    generate("eager_decode", profile)
    _to_wal_mode(profile)
    first = json.loads(_run(profile, "--format", "json").stdout)
    kernels = first["metrics"]["kernel_count"]
    writer = sqlite3.connect(profile)  # a writer keeps the WAL (and its index) alive while we read
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0")
        writer.commit()
        assert Path(str(profile) + "-wal").stat().st_size > 0
        done = _run(profile, "--format", "json")
        assert done.returncode == 0, done.stderr
        second = json.loads(done.stdout)
    finally:
        writer.close()
    assert second["metrics"]["kernel_count"] == kernels - kernels // 2
    assert not list(user_cache.glob("*" + store.CACHE_SUFFIX))


@pytest.mark.slow
def test_a_hot_journal_is_named_not_called_a_permissions_problem(tmp_path, user_cache):
    """A copy taken while a writer was inside a transaction: pages already changed in the file, the originals in
    `-journal`. A read-only reader may not roll it back, and the message says what the journal is."""
    live, crash = tmp_path / "live.sqlite", tmp_path / "crash.sqlite"
    generate("eager_decode", live)
    writer = sqlite3.connect(live, isolation_level=None)
    try:
        writer.execute("PRAGMA cache_size=5")  # dirty pages spill into the file during the transaction
        writer.execute("BEGIN")
        writer.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + 1')
        shutil.copyfile(live, crash)
        shutil.copyfile(str(live) + "-journal", str(crash) + "-journal")
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    done = _run(crash, "-q")
    assert done.returncode == 2, done.stdout
    assert "rollback journal (crash.sqlite-journal)" in done.stderr and "permissions" not in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert Path(str(crash) + "-journal").exists()  # the user's files are left as they were


def _switch_on_first_read(action):
    """A progress callback that runs `action` once, as the export starts being read."""
    done = []

    def progress(stage: str) -> None:
        if not done and stage.startswith("reading "):
            done.append(stage)
            action()
    return progress


@pytest.mark.slow
def test_a_symlink_switched_during_a_run_mixes_nothing(tmp_path, user_cache):
    """`ln -sfn other.sqlite current.sqlite` while `current.sqlite` is being read: the run reads the export it
    opened, and the next run reads the new one, not a cache of the old."""
    eager, storm = tmp_path / "eager.sqlite", tmp_path / "storm.sqlite"
    generate("eager_decode", eager)
    generate("sync_storm", storm)
    current = tmp_path / "current.sqlite"
    current.symlink_to(eager)

    def switch() -> None:
        tmp = tmp_path / "current.tmp"
        tmp.symlink_to(storm)
        os.replace(tmp, current)

    first = diagnose(current, progress=_switch_on_first_read(switch))
    assert first.verdict.primary == "launch-bound"
    assert first.metrics["kernel_count"] == diagnose(eager, cache=False).metrics["kernel_count"]
    assert diagnose(current).verdict.primary == "api-latency"


@pytest.mark.slow
def test_a_file_moved_over_the_profile_during_a_run_mixes_nothing(tmp_path, user_cache):
    """`mv other.sqlite run.sqlite` while run.sqlite is being read: the run says so instead of reporting (or
    caching) a mix of the two exports; the next run reads the new export."""
    profile, storm = tmp_path / "run.sqlite", tmp_path / "storm.sqlite"
    generate("eager_decode", profile)
    generate("sync_storm", storm)
    storm_kernels = diagnose(storm, cache=False).metrics["kernel_count"]
    with pytest.raises(InputError, match="changed while it was being read"):
        diagnose(profile, progress=_switch_on_first_read(lambda: os.replace(storm, profile)))
    assert not list(user_cache.glob("*" + store.CACHE_SUFFIX))
    assert diagnose(profile).verdict.primary == "api-latency"
    with open_export(profile, cache=True) as export:
        assert export.cache_hit and export.query("SELECT count(*) FROM kernels")[0][0] == storm_kernels


@pytest.mark.slow
def test_first_runs_started_together_all_get_the_same_key(tmp_path):
    """Batch workers or ranks starting at once on a machine that never cached before: every one of them gets the
    key (none reads a key file that another is still writing and gives up caching), and it is the same key."""
    import time

    xdg = tmp_path / "xdg"
    start = time.time() + 1.5
    child = ("import time, sys\n"
             "from nsys_diagnose.reading import cache as store\n"
             f"time.sleep(max(0, {start} - time.time()))\n"
             "key = store.cache_secret(store.cache_dir())\n"
             "print(key.hex() if key else 'NONE')\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
    env.pop(store.CACHE_DIR_ENV, None)
    children = [subprocess.Popen([sys.executable, "-c", child], env=env, stdout=subprocess.PIPE, text=True)
                for _ in range(8)]
    keys = [c.communicate(timeout=120)[0].strip() for c in children]
    assert "NONE" not in keys and len(set(keys)) == 1, keys
    secret = store.key_path(xdg / "nsys-diagnose")
    assert secret.read_bytes().hex() == keys[0]
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert sorted(os.listdir(secret.parent)) == [secret.name]  # no key written aside is left behind


@pytest.mark.slow
def test_an_empty_key_left_by_a_killed_run_is_replaced_and_caching_works(tmp_path, user_cache):
    """A run killed between creating the key file and writing it (as versions that wrote the key in place could
    be) left an empty file, which used to turn caching off for good."""
    user_cache.mkdir(parents=True, mode=0o700)
    store.key_path(user_cache).touch(mode=0o600)
    profile = tmp_path / "run.sqlite"
    generate("tiny_capture", profile)
    said: list[str] = []
    diagnose(profile, progress=said.append)
    assert not any("no private key" in s for s in said), said
    assert len(store.key_path(user_cache).read_bytes()) == 32
    assert stat.S_IMODE(store.key_path(user_cache).stat().st_mode) == 0o600
    store.cache_secret.cache_clear()
    with open_export(profile, cache=True) as export:
        assert export.cache_hit


def test_a_key_file_of_ours_that_others_may_read_is_replaced_by_a_fresh_private_key(tmp_path, user_cache):
    """Whoever could read it could seal caches for this user: it is never used, but replaced (caching would
    otherwise be off for good), by a key of fresh random bytes, 0600."""
    user_cache.mkdir(parents=True, mode=0o700)
    secret = store.key_path(user_cache)
    secret.write_bytes(b"k" * 32)
    secret.chmod(0o644)
    fresh = store.cache_secret(user_cache)
    assert fresh is not None and fresh != b"k" * 32 and len(fresh) == 32
    assert secret.read_bytes() == fresh and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert sorted(os.listdir(user_cache)) == [secret.name]  # no key written aside is left behind


def test_a_key_that_is_not_a_regular_file_turns_caching_off_is_left_alone_and_said(tmp_path, user_cache):
    user_cache.mkdir(parents=True, mode=0o700)
    secret = store.key_path(user_cache)
    os.mkfifo(secret, 0o600)  # a FIFO is never waited on
    assert store.cache_secret(user_cache) is None
    assert stat.S_ISFIFO(os.lstat(secret).st_mode)
    assert store.cache_problem() == (f"the key that seals the caches in {user_cache}, {secret}, is not a regular "
                                     f"file, so it is never trusted; remove it (a new private key is then made), "
                                     f"or choose another cache directory")


# -- a cache that cannot be used is said, once, on a line that stays -------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "eager_decode.sqlite"


def _warnings(stderr: str, prog: str = "diagnose") -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"{prog}: warning: ")]


def test_a_missing_cache_directory_is_a_warning_that_stays_when_stderr_is_no_terminal(tmp_path, user_cache):
    """CI's stderr is no terminal, where progress lines are never shown: the warning is a line of its own anyway,
    naming the directory and what to do; --quiet leaves it out."""
    missing = tmp_path / "no-such-caches"
    env = {store.CACHE_DIR_ENV: str(missing)}
    done = _run(EXAMPLE, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"diagnose: warning: reading the export without a cache: the cache directory {missing} "
        f"({store.CACHE_DIR_ENV}) does not exist; create it (mkdir -p {missing}), or unset {store.CACHE_DIR_ENV}."]
    quiet = _run(EXAMPLE, "-q", env=env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert not missing.exists()


@pytest.mark.slow
def test_a_directory_others_may_write_without_the_sticky_bit_is_said_once_with_what_to_do(tmp_path, user_cache):
    """The two profiles of a comparison share the cache directory: one warning, not one per profile; batch says
    it too (its workers say nothing)."""
    unsafe = tmp_path / "caches"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    done = _run("compare", EXAMPLE, EXAMPLE, "--cache-dir", unsafe)
    assert done.returncode == 0, done.stderr
    (line,) = _warnings(done.stderr, "diagnose compare")
    assert f"the cache directory {unsafe} (--cache-dir) may be written by others and has no sticky bit" in line
    assert f"chmod +t {unsafe}" in line and f"chmod 0700 {unsafe}" in line and "drop --cache-dir" in line
    batch = _run("batch", EXAMPLE, "--out", tmp_path / "results.csv", "--cache-dir", unsafe)
    assert batch.returncode == 0, batch.stderr
    assert len(_warnings(batch.stderr, "diagnose batch")) == 1 and f"chmod +t {unsafe}" in batch.stderr
    assert list(unsafe.iterdir()) == []
    unsafe.chmod(0o1777)  # with the sticky bit, as /tmp: used, and nothing said
    done = _run(EXAMPLE, "--cache-dir", unsafe)
    assert done.returncode == 0 and not _warnings(done.stderr), done.stderr
    assert len(list(unsafe.glob("*" + store.CACHE_SUFFIX))) == 1


@pytest.mark.slow
def test_a_cache_file_of_ours_that_others_may_write_is_rebuilt_not_refused_for_good(tmp_path, user_cache):
    """Never read (anyone may have written it), but ours to replace: the run builds a cache and renames it over
    the file, so the next run reuses it."""
    profile = tmp_path / "run.sqlite"
    shutil.copyfile(EXAMPLE, profile)
    profile.chmod(0o600)
    cache = store.cache_path(profile)
    cache.write_bytes(b"anyone could have written this")
    cache.chmod(0o666)
    said: list[str] = []
    assert diagnose(profile, progress=said.append).verdict.primary == "launch-bound"
    assert not any(isinstance(s, CacheWarning) for s in said), said
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600 and cache.read_bytes()[:30] != b"anyone could have written this"
    with open_export(profile, cache=True) as export:
        assert export.cache_hit


@pytest.mark.slow
def test_a_cache_file_of_another_user_is_left_alone_and_said(tmp_path, user_cache, other_user):
    profile = tmp_path / "run.sqlite"
    shutil.copyfile(EXAMPLE, profile)
    cache = store.cache_path(profile)
    cache.write_bytes(b"planted")
    os.chown(cache, *other_user)
    done = _run(profile)
    assert done.returncode == 0, done.stderr
    (line,) = _warnings(done.stderr)
    assert f"the cache file {cache} belongs to another user, so it is never trusted; remove it" in line
    assert cache.read_bytes() == b"planted" and cache.stat().st_uid == other_user[0]
