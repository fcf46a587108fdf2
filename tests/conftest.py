from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest

# diagnose() keeps its caches (and the key that seals them) in the user's cache directory; the suite must not
# write into the home directory of whoever runs it, so XDG_CACHE_HOME points to a scratch directory for this
# session (subprocesses too), and a cache directory set in the environment is ignored.
_OWN_CACHE_DIR = tempfile.mkdtemp(prefix="nsys-diagnose-test-cache-")
os.environ["XDG_CACHE_HOME"] = _OWN_CACHE_DIR
os.environ.pop("NSYS_DIAGNOSE_CACHE_DIR", None)

REPO = Path(__file__).resolve().parents[1]
REAL_DIR = REPO.parent / "shared" / "real-profiles"
REAL_EXPORTS = sorted(REAL_DIR.glob("*.sqlite")) if REAL_DIR.is_dir() else []

# A test that reads the real-export corpus carries this mark (module-wide `pytestmark = requires_real`, or
# `@pytest.mark.real_exports` on the test). Such tests belong to the slow tier; without the corpus they are
# skipped with one reason, counted in one line at the end of the run, and under CI=true the run fails.
requires_real = pytest.mark.real_exports
CORPUS_ABSENT = (f"the real-export corpus {os.path.relpath(REAL_DIR, REPO)} is absent; put the nsys SQLite "
                 f"exports there to run these tests (CI=true makes this a failure)")


# ------------------------------------------------------------------------------------------------------------
# Two tiers. `pytest` runs the fast tier (pyproject.toml: addopts -m "not slow"), `pytest -m slow` the slow tier,
# `pytest --all` both: what CI runs (.ci/run). A test is in the slow tier by a mark on the test itself:
#   - `pytestmark = pytest.mark.slow` for a whole module, `@pytest.mark.slow` on one test (every case of it),
#     `pytest.param(..., marks=pytest.mark.slow)` or `slow_but(cases, *kept)` for the cases of a parametrized
#     test that the fast tier skips (it keeps one or two cases that walk the same mechanism).
# Two kinds are slow without a mark, because what they are makes them slow: every hypothesis property test
# (fuzzing), and every test that reads the real-export corpus (marked `real_exports`; see requires_real above).
# This file names no test: tests/test_tiers.py fails if it does again.
# The fast tier is the dev loop (`make test`, on every core): the unit tests of each layer (every fact's
# .test.yaml cases, the rule tests' inline `rows:` cases, the renderers on the golden model, the architecture
# and static checks, config and CLI parsing) and a thin end-to-end band: a few scenarios diagnosed (verdict,
# expectations, column checks, renderers, the rule cases on those scenarios), the CLI once per command, one
# cache reuse and one cache trust check, one output-safety case of each kind, one multi-rank run, one compare,
# one capture. What repeats the same mechanism on more inputs is slow: every scenario's verdict and recorded
# expectations, every rule case on every scenario, every parametrized case, subprocess CLI variants, cache and
# robustness edge cases. CI runs both tiers. Diagnosing a scenario costs about a second of CPU: a fast test
# reads the scenarios the others already diagnose (eager_decode, prefill_decode_nvtx, memory_bound_metrics,
# multi_gpu_straggler) where it can.
# Shared work is done once per run, whichever xdist worker needs it first: scenario_path and scenario_analysis (a
# directory the controller hands to every worker, each file made under a lock), and the user cache directory. Each
# worker runs on its own CPU (its affinity), so its DuckDB runs one thread per CPU it has, not per CPU of the machine.
# ------------------------------------------------------------------------------------------------------------


def slow_but(cases, *kept):
    """The cases of a parametrized test with every case but those in `kept` marked slow. A case is kept when it
    equals an entry of `kept`, or when it is a tuple whose first value (the case's name) does."""
    def name(case):
        return case[0] if isinstance(case, tuple) else case

    cases = list(cases)
    if missing := [k for k in kept if not any(k in (case, name(case)) for case in cases)]:
        raise ValueError(f"slow_but: no case {', '.join(map(repr, missing))} to keep in the fast tier")
    return [case if case in kept or name(case) in kept
            else pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
            for case in cases]


REAL_EXPORTS_MARK = "real_exports"


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", dest="run_all",
                     help="run the whole suite, fast and slow tiers (fuzzing, benchmark, Chromium, real exports): "
                          "what CI runs")


def pytest_configure(config):
    if _is_xdist_worker(config):
        _share_the_cpus(config.workerinput)
        _SCENARIO_DIR[:] = [Path(config.workerinput[_SHARED_KEY])]
        # One cache for the whole run, as one user's: a profile one worker diagnosed is reused by the other (the
        # cache is made for runs side by side: engine/reading/cache.py). The controller removes it at the end.
        os.rmdir(_OWN_CACHE_DIR)
        os.environ["XDG_CACHE_HOME"] = config.workerinput[_CACHE_KEY]
    if config.getoption("run_all", False):
        if config.option.markexpr not in ("", "not slow"):
            raise pytest.UsageError("--all runs every test; use -m alone to choose by mark")
        config.option.markexpr = ""


def _slow_by_kind(item) -> str | None:
    if item.get_closest_marker(REAL_EXPORTS_MARK):
        return "reads the real-export corpus"
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        return "hypothesis property test (fuzzing)"
    return None


_TIERS = {"slow_deselected": 0, "corpus_skipped": set()}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the slow tier (before -m deselects by mark), and skip the real-export tests without the corpus."""
    for item in items:
        if (callspec := getattr(item, "callspec", None)) is not None \
                and any(isinstance(v, Path) and REAL_DIR in v.parents for v in callspec.params.values()):
            item.add_marker(pytest.mark.real_exports)  # parametrized over the corpus but left unmarked
        if (reason := _slow_by_kind(item)) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow(reason=reason))
        if item.get_closest_marker(REAL_EXPORTS_MARK) and not REAL_EXPORTS:
            # first, so that this reason wins over pytest's own "got empty parameter set"
            item.add_marker(pytest.mark.skip(reason=CORPUS_ABSENT), append=False)


def pytest_deselected(items):
    _TIERS["slow_deselected"] += sum(1 for i in items if i.get_closest_marker("slow"))


# Under pytest-xdist (`-n N`) each worker collects, deselects and runs in its own process, with its own scratch
# cache and scenario directories (this module is imported once per process); the controller prints the summary,
# so a worker hands its count of deselected slow tests back through xdist's `workeroutput`.
def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _share_the_cpus(workerinput) -> None:
    """Give each xdist worker its own share of the CPUs (its affinity mask), so that its DuckDB runs as many threads
    as it has CPUs (engine/duck.py usable_cpus): N workers each running one thread per CPU of the machine would
    oversubscribe the cores and spend the difference switching between threads. Subprocesses inherit the mask."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return
    index = int(str(workerinput.get("workerid", "gw0")).removeprefix("gw") or 0)
    count = int(workerinput.get("workercount", 1))
    if count > 1 and len(cpus) > 1:
        os.sched_setaffinity(0, set(cpus[index % len(cpus)::count]) or {cpus[index % len(cpus)]})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    deselected = getattr(node, "workeroutput", {}).get("slow_deselected", 0)
    _TIERS["slow_deselected"] = max(_TIERS["slow_deselected"], deselected)  # every worker collects the same tests


def pytest_runtest_logreport(report):
    if report.skipped and report.when == "setup" and isinstance(report.longrepr, tuple) \
            and report.longrepr[2].endswith(CORPUS_ABSENT):
        _TIERS["corpus_skipped"].add(report.nodeid)


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    write = terminalreporter.write_line
    if skipped := len(_TIERS["corpus_skipped"]):
        prefix = "FAILED (CI requires the corpus): " if _ci() else ""
        write(f"{prefix}{skipped} tests skipped: {CORPUS_ABSENT}", red=_ci(), yellow=not _ci(), bold=True)
    if _TIERS["slow_deselected"] and config.option.markexpr == "not slow":
        write(f"fast tier: {_TIERS['slow_deselected']} slow tests not run (fuzzing, benchmark, Chromium, real "
              f"exports, long CLI cases); `pytest -m slow` runs them, `pytest --all` runs everything")


def pytest_sessionfinish(session, exitstatus):
    """The suite's caches and generated scenarios are scratch: remove them (tens of MB per run)."""
    if _is_xdist_worker(session.config):
        session.config.workeroutput["slow_deselected"] = _TIERS["slow_deselected"]
    elif _ci() and _TIERS["corpus_skipped"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    import shutil

    # The scenario directory is the controller's to remove: the other workers may still read it.
    shared = [] if _is_xdist_worker(session.config) else [_OWN_CACHE_DIR, *_SCENARIO_DIR]
    for d in [*shared, *_CLEANUP]:
        if d:
            shutil.rmtree(d, ignore_errors=True)
    import subprocess

    if not _is_xdist_worker(session.config) and _other_user_was_created():
        # by the controller only: under xdist the workers share the user and finish at different times
        subprocess.run(["userdel", OTHER_USER], capture_output=True)


def real(fragment: str) -> Path:
    """The real export whose file name contains `fragment`."""
    matches = [p for p in REAL_EXPORTS if fragment in p.name]
    if len(matches) != 1:
        pytest.skip(f"real export matching {fragment!r} not available")
    return matches[0]


def rounded(value, digits: int):
    """`value` (numbers, lists and dicts of them) with every float cut to `digits` significant digits, for
    comparing results whose last bits may differ between machines or between runs."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


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
# The directory of generated scenarios and their analyses, one per run: under pytest-xdist the controller makes it
# and hands it to every worker (pytest_configure_node), so a scenario is generated and diagnosed once per run, not
# once per worker; each is made under a lock by the first worker that needs it and read by the others.
_SHARED_KEY = "nsys_diagnose_scenario_dir"
_CACHE_KEY = "nsys_diagnose_cache_dir"  # the user cache directory, shared the same way


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput[_SHARED_KEY] = str(_scenario_dir())
    node.workerinput[_CACHE_KEY] = _OWN_CACHE_DIR


def _scenario_dir() -> Path:
    if not _SCENARIO_DIR:
        _SCENARIO_DIR.append(Path(tempfile.mkdtemp(prefix="nsys-diagnose-scenarios-")))
    return _SCENARIO_DIR[0]


@contextlib.contextmanager
def _made_once(path: Path):
    """Hold `path`'s lock (a file beside it, shared by the xdist workers) while the caller checks whether `path`
    exists and makes it if not."""
    import fcntl

    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def scenario_path(name: str) -> Path:
    """The export of a generated fixture scenario (seed 0, scale 1), written once per run and shared by every test
    (and xdist worker) that reads it; a test that changes an export copies it first."""
    from nsys_diagnose.fixtures.generator import generate

    path = _scenario_dir() / f"{name}.sqlite"
    if not path.exists():
        with _made_once(path):
            if not path.exists():
                # made under its own name (the export records it), then moved in whole
                scratch = Path(tempfile.mkdtemp(dir=path.parent)) / path.name
                generate(name, scratch)
                os.replace(scratch, path)
                scratch.parent.rmdir()
    return path


def scenario_analysis(name: str):
    """(facts, report) of a generated fixture scenario, computed once per run."""
    return analysis(scenario_path(name))


def analysis(path: Path):
    """(facts, report) of an export, computed once per test session: several test modules read them. Those of the
    generated scenarios are computed once per run and read by every xdist worker."""
    key = str(path)
    if key not in _ANALYSES:
        if Path(path).parent == _scenario_dir():
            _ANALYSES[key] = _shared_analysis(path)
        else:
            _ANALYSES[key] = _analyse(path)
    return _ANALYSES[key]


def _shared_analysis(path: Path):
    import pickle

    stored = path.with_name(path.name + ".analysis.pickle")
    with _made_once(stored):
        if stored.exists():
            return pickle.loads(stored.read_bytes())
        result = _analyse(path)
        stored.write_bytes(pickle.dumps(result))
        return result


def _analyse(path: Path):
    from nsys_diagnose.api import build_report, load_pack
    from nsys_diagnose.facts.compute import compute_facts
    from nsys_diagnose.reading.export import open_export

    pack = load_pack()
    with open_export(path) as export:
        facts = compute_facts(export, facts=pack.facts)
        return facts, build_report(export, facts, pack)


@pytest.fixture
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh user cache directory (XDG_CACHE_HOME) for this test, the default location; its key is read
    afresh."""
    from nsys_diagnose.reading import cache as store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(store.CACHE_DIR_ENV, raising=False)
    store.cache_secret.cache_clear()
    yield tmp_path / "xdg" / "nsys-diagnose"
    store.cache_secret.cache_clear()


OTHER_USER = "nsys-diagnose-other"


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# Whether the suite created the second user (removed again at the end): it did not exist when the session began.
_OTHER_USER_EXISTED = _user_exists(OTHER_USER)


def _other_user_was_created() -> bool:
    return not _OTHER_USER_EXISTED and _user_exists(OTHER_USER)


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
        try:  # another xdist worker may have created it first
            entry = pwd.getpwnam(OTHER_USER)
        except KeyError:
            pytest.skip(f"cannot create a second user for the cross-user cases: {done.stderr.strip()}")
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


def start_and_wait_for(command: list[str], stage: str, ready_file: Path, *, timeout: float = 120,
                       **popen) -> "subprocess.Popen[str]":
    """Start a command-line run and return once it has reached `stage` (the first line it announces that starts
    with it: "starting", "reading CUPTI_ACTIVITY_KIND_KERNEL", "computing fact", see engine/cli/interrupt.py), so
    a test signals at a known point of the run instead of after a guessed delay, which a loaded machine turns into
    another point. Fails when the run ends or times out before it gets there."""
    import time

    env = {**popen.pop("env", os.environ), "NSYS_DIAGNOSE_TEST_READY_FILE": str(ready_file)}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reached = ready_file.read_text().splitlines() if ready_file.exists() else []
        if any(line.startswith(stage) for line in reached):
            return proc
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run ended (exit {proc.returncode}) before it reached {stage!r}; it reached "
                        f"{reached[-3:]}; stderr: {err[-500:]}")
        time.sleep(0.005)
    proc.kill()
    proc.communicate()
    pytest.fail(f"the run did not reach {stage!r} within {timeout} s")
