from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

import pytest

# diagnose() keeps its caches (and the key that seals them) in the user's cache directory; the suite must not
# write into the home directory of whoever runs it, so XDG_CACHE_HOME points to a scratch directory for this
# session (subprocesses too), and a cache directory set in the environment is ignored.
_OWN_CACHE_DIR = tempfile.mkdtemp(prefix="nsys-diagnose-test-cache-")
os.environ["XDG_CACHE_HOME"] = _OWN_CACHE_DIR
os.environ.pop("NSYS_DIAGNOSE_CACHE_DIR", None)


def pytest_sessionfinish(session, exitstatus):
    """The suite's caches and generated scenarios are scratch: remove them (tens of MB per run)."""
    import shutil

    for d in [_OWN_CACHE_DIR, *_SCENARIO_DIR, *_CLEANUP]:
        if d:
            shutil.rmtree(d, ignore_errors=True)
    import subprocess

    for user in _CREATED_USERS:
        subprocess.run(["userdel", user], capture_output=True)

REPO = Path(__file__).resolve().parents[1]
REAL_DIR = REPO.parent / "shared" / "real-profiles"
REAL_EXPORTS = sorted(REAL_DIR.glob("*.sqlite")) if REAL_DIR.is_dir() else []

requires_real = pytest.mark.skipif(not REAL_EXPORTS, reason=f"real exports not found in {REAL_DIR}")


def real(fragment: str) -> Path:
    """The real export whose file name contains `fragment`."""
    matches = [p for p in REAL_EXPORTS if fragment in p.name]
    if len(matches) != 1:
        pytest.skip(f"real export matching {fragment!r} not available")
    return matches[0]


def sqlite_ro(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con


def table_exists(con: sqlite3.Connection, table: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


def raw_count(path: Path, table: str, where: str = "") -> int:
    with sqlite_ro(path) as con:
        if not table_exists(con, table):
            return 0
        return con.execute(f'SELECT count(*) FROM "{table}" {where}').fetchone()[0]


_ANALYSES: dict = {}


_SCENARIO_DIR: list[Path] = []
_CLEANUP: list[Path] = []
_CREATED_USERS: list[str] = []


def scenario_analysis(name: str):
    """(facts, report) of a generated fixture scenario, computed once per test session."""
    import tempfile

    from nsys_diagnose.fixtures.generator import generate

    if not _SCENARIO_DIR:
        _SCENARIO_DIR.append(Path(tempfile.mkdtemp(prefix="nsys-diagnose-scenarios-")))
    path = _SCENARIO_DIR[0] / f"{name}.sqlite"
    if str(path) not in _ANALYSES:
        generate(name, path)
    return analysis(path)


def analysis(path: Path):
    """(facts, report) of an export, computed once per test session: several test modules read them."""
    key = str(path)
    if key not in _ANALYSES:
        from nsys_diagnose.api import build_report
        from nsys_diagnose.diagnosis.config import Config
        from nsys_diagnose.facts.compute import compute_facts
        from nsys_diagnose.facts import load_facts
        from nsys_diagnose.diagnosis.rules import load_rules
        from nsys_diagnose.reading.source import open_export

        fact_defs = load_facts()
        rules = load_rules(fact_defs)
        with open_export(path) as export:
            facts = compute_facts(export, facts=fact_defs)
            report = build_report(export, facts, rules, Config(), fact_defs)
        _ANALYSES[key] = (facts, report)
    return _ANALYSES[key]


OTHER_USER = "nsys-diagnose-other"


@pytest.fixture(scope="session")
def other_user() -> tuple[int, int]:
    """(uid, gid) of a second, unprivileged user, for the cases where another user on a shared machine plants
    files or tries to read ours. Created when the suite runs as root (as in CI); skipped, with the reason
    printed, where that is impossible."""
    import pwd
    import shutil
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("the cross-user cases need root to create a second user; this suite runs unprivileged")
    try:
        entry = pwd.getpwnam(OTHER_USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            pytest.skip("the cross-user cases need `useradd` to create a second user, and it is not installed")
        done = subprocess.run([useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot create a second user for the cross-user cases: {done.stderr.strip()}")
        _CREATED_USERS.append(OTHER_USER)  # removed again at the end of the session
        entry = pwd.getpwnam(OTHER_USER)
    return entry.pw_uid, entry.pw_gid


def run_as(user: tuple[int, int], command: list[str], **kwargs):
    """Run `command` as `user` (uid, gid) with no supplementary groups."""
    import subprocess

    uid, gid = user
    return subprocess.run(command, user=uid, group=gid, extra_groups=[], capture_output=True, text=True, **kwargs)


def shared_directory() -> Path:
    """A directory every user may write, with the sticky bit, like /tmp."""
    d = Path(tempfile.mkdtemp(prefix="nsys-diagnose-shared-"))
    d.chmod(0o1777)
    _CLEANUP.append(d)  # removed at the end of the session
    return d
