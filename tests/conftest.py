from __future__ import annotations

import contextlib
import math
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

# rounded(value, digits): every float cut to `digits` significant digits, for comparing results whose last bits
# may differ between machines or between runs; the goldens are written with it (make regen).
from nsys_diagnose.authoring.regen import rounded  # noqa: E402,F401

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
    as it has CPUs (engine/base/duck.py usable_cpus): N workers each running one thread per CPU of the machine would
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


def assert_findings_finite(report) -> None:
    """Every finding's cost is a share (0-1 or none) and every float of its evidence is finite."""
    for f in report.findings:
        assert f.impact is None or 0 <= f.impact <= 1
        for e in f.evidence:
            if isinstance(e.value, float):
                assert math.isfinite(e.value)


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
    from nsys_diagnose.runs.api import build_report, load_pack
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


# Temporary directories the tests make themselves. A test takes pytest's `tmp_path`; a directory that must be
# elsewhere (a short path, one shared by the session) is made in the temporary directory and removed by whoever
# made it: its fixture, or the end of the session (_CLEANUP). Every directory that code in tests/ makes directly in
# the temporary directory with tempfile (mkdtemp, TemporaryDirectory) is recorded through Python's audit event
# `tempfile.mkdtemp` (https://docs.python.org/3/library/tempfile.html#tempfile.mkdtemp), in this process (the
# controller, or each xdist worker), and `_no_temporary_directory_outlives_the_session` fails the session, naming
# and removing them, when any is still there once its owner's teardown has run.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
_MADE_IN_TEMP: list[Path] = []


def _record_temporary_directory(event: str, args: tuple) -> None:
    if event != "tempfile.mkdtemp":
        return  # the first thing done: the hook sees every audit event of the process
    import sys

    path = Path(args[0])
    if os.path.realpath(path.parent) != os.path.realpath(tempfile.gettempdir()):
        return  # inside a directory someone else removes (tmp_path, a scenario directory)
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == tempfile.__file__:
        frame = frame.f_back  # TemporaryDirectory and mkdtemp itself
    if frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _TESTS_DIR:
        _MADE_IN_TEMP.append(path)


def temporary_directories_left() -> list[Path]:
    """The directories that code in tests/ made in the temporary directory in this process and that are still
    there, bar those the end of the session removes (_CLEANUP, the cache and scenario directories)."""
    removed_at_the_end = {os.path.realpath(d) for d in [_OWN_CACHE_DIR, *_SCENARIO_DIR, *_CLEANUP]}
    return [d for d in _MADE_IN_TEMP if os.path.lexists(d) and os.path.realpath(d) not in removed_at_the_end]


@pytest.fixture(scope="session", autouse=True)
def _no_temporary_directory_outlives_the_session():
    import shutil
    import sys

    sys.addaudithook(_record_temporary_directory)  # once per process: an audit hook cannot be removed
    yield
    if left := temporary_directories_left():
        for d in left:
            shutil.rmtree(d, ignore_errors=True)
        pytest.fail(f"this test session left {len(left)} temporary director{'ies' if len(left) != 1 else 'y'} "
                    f"(now removed): {', '.join(map(str, left))}; make them in pytest's tmp_path, or remove them "
                    f"where they are made", pytrace=False)


def default_stop_signals() -> None:
    """A preexec_fn: the run starts with Ctrl-C, SIGTERM and SIGHUP at their default dispositions, as from a terminal.
    A shell's background job inherits SIGINT ignored, and a suite started under nohup SIGHUP ignored; the program
    rightly keeps a signal ignored that it was started with (engine/cli/console.py), so a test that sends it one
    must start it as a user's terminal would."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)


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


# ------------------------------------------------------------------------------------------------------------
# Processes the tests start. This pytest process (the controller, or each xdist worker: this module is imported once
# per process) puts PROCESS_MARK_ENV, with a value of its own, into its environment, and every process it starts
# inherits it, and every process those start, daemons included: nsys 2022.4 runs its agent (`nsys --start-agent`)
# in a session of its own whose parent is PID 1, and a Dask LocalCluster's worker processes are spawned
# interpreters. A process that carries this process's value (/proc/PID/environ) was started by one of its tests,
# whoever its parent is now: `leftover_processes` lists them, the `reaped` fixture fails a test that leaves one
# running (and stops it), and the session ends the same way for what a module or session fixture left.
# A deadline below is a last resort for a hung test: nothing waits it out but a run that is stuck or a leak.
# ------------------------------------------------------------------------------------------------------------
PROCESS_MARK_ENV = "NSYS_DIAGNOSE_TEST_PROCESS_MARK"
os.environ[PROCESS_MARK_ENV] = f"{os.getpid()}-{os.urandom(6).hex()}"
LAST_RESORT_S = 600.0
# Helpers that multiprocessing keeps for the whole life of the process that started them, which end with it
# (https://docs.python.org/3/library/multiprocessing.html#contexts-and-start-methods): a test that uses the
# spawn or forkserver start method (a Dask LocalCluster does) leaves them, and they are no leak.
INTERPRETER_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def leftover_processes(mark: str | None = None) -> dict[int, str]:
    """pid -> command line of each live process, other than this one, that carries PROCESS_MARK_ENV=mark (this
    process's value by default), bar INTERPRETER_HELPERS; a zombie (whose environment is gone) is not listed."""
    entry = f"{PROCESS_MARK_ENV}={mark or os.environ[PROCESS_MARK_ENV]}".encode()
    found: dict[int, str] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            if entry not in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                continue
            command = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:  # gone meanwhile, or another user's
            continue
        if command and not any(helper in command for helper in INTERPRETER_HELPERS):
            found[int(name)] = command.strip()
    return found


def _still_there(pids: set[int], seconds: float, mark: str | None = None) -> dict[int, str]:
    """Those of `pids` still running after up to `seconds` (returns as soon as none is)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        left = {pid: cmd for pid, cmd in leftover_processes(mark).items() if pid in pids}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def stop_processes(pids: set[int], mark: str | None = None) -> dict[int, str]:
    """SIGTERM, then SIGKILL, to those of `pids` that still carry the mark; returns any that survived both."""
    import signal

    left = leftover_processes(mark)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids & set(left):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        left = _still_there(pids, 10.0, mark)
    return left


def check_nothing_left(before: set[int], what: str, mark: str | None = None) -> None:
    """Fail, naming them, when processes carrying the mark other than `before` are still running once those about
    to exit have (a finaliser that ran returns after its processes are gone; this only waits for a leak). They are
    stopped first, so one test's leak does not fail the next."""
    left = _still_there(set(leftover_processes(mark)) - before, 30.0, mark)
    if left:
        stop_processes(set(left), mark)
        listing = "; ".join(f"{pid}: {cmd[:160]}" for pid, cmd in sorted(left.items()))
        pytest.fail(f"{what} left {len(left)} process{'es' if len(left) != 1 else ''} running (now stopped): "
                    f"{listing}", pytrace=False)


@pytest.fixture
def reaped():
    """Fails the test (at its teardown, after its other fixtures' finalisers) when a process it started is still
    running, daemons and processes of other sessions included."""
    before = set(leftover_processes())
    yield
    check_nothing_left(before, "the test")


@pytest.fixture(scope="session", autouse=True)
def _nothing_outlives_the_session():
    yield
    check_nothing_left(set(), "this test session (a module or session fixture, or a test without `reaped`)")


def kill_group(proc: "subprocess.Popen") -> None:
    """Kill the process group of `proc` (started with start_new_session=True) and collect `proc`, whatever state
    it is in."""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=LAST_RESORT_S)


def run_in_own_session(command: list[str], **popen) -> "subprocess.CompletedProcess[str]":
    """Run `command` to its end in a session (and process group) of its own and return what it printed: waited
    for, not timed (LAST_RESORT_S only ends a hung run, as a failure). Its process group is killed before this
    returns, however it returns; what left the group (a daemon) is for `reaped` to find."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)
    try:
        out, err = proc.communicate(timeout=LAST_RESORT_S)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"{' '.join(map(str, command))[:200]} was still running after {LAST_RESORT_S:g} s: hung")
    finally:
        kill_group(proc)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.fixture
def spawn(reaped):
    """Start a process in a session of its own (`spawn(command, **popen)` -> Popen) whose process group is killed
    when the test ends, however it ends; `reaped` then checks that nothing it started is left."""
    started: list[subprocess.Popen] = []

    def start(command: list[str], **popen) -> "subprocess.Popen":
        proc = subprocess.Popen(command, start_new_session=True, **{"preexec_fn": default_stop_signals, **popen})
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_group(proc)
