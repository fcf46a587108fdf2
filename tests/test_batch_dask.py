"""`diagnose batch --executor dask`: the same rows as local mode, computed on a real Dask distributed cluster, and a
worker that dies mid-task costs a row, never the batch. `--shard I/N` with either executor.

One `distributed.LocalCluster` of two worker processes (about 2 s to start) serves the whole module; its scheduler
is configured as a cautious deployment would be (a worker holds only the task it runs; a task that killed its
worker once more than allowed is given up), so the lost-worker case ends in seconds."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
from pathlib import Path

import duckdb
import pytest

import conftest
from nsys_diagnose.runs import batch, batch_profiles, batch_table
from nsys_diagnose.cli import main as cli
from nsys_diagnose.diagnosis.config import Config

try:
    import dask
    import distributed
except ImportError:  # CI installs the dask extra (.ci/run); elsewhere these tests say why they did not run
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip("Dask distributed is not installed: pip install -e '.[test,dask]' to run these tests",
                allow_module_level=True)

# Slow tier: the optional executor starts a cluster of worker processes, each diagnosing profiles; the fast tier
# keeps local batches (tests/test_batch.py), which share the row building these tests compare against. No test may
# leave a worker process running: `reaped` (tests/conftest.py) checks each test that starts a cluster, and the module's
# cluster checks its own processes once it is closed (its nannies restart the workers a test kills, in between).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "fixtures" / "examples"


@pytest.fixture(scope="module")
def scheduler():
    config = {"distributed.scheduler.worker-saturation": 1.0, "distributed.scheduler.allowed-failures": 1}
    before = set(conftest.leftover_processes())
    with dask.config.set(config), distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL) as cluster:
        yield cluster.scheduler_address
    conftest.check_nothing_left(before, "the module's Dask cluster")


def _rows(results: Path) -> dict[str, dict]:
    """path -> row, without the diagnosis time, which differs between any two runs."""
    cursor = duckdb.connect().execute(f"SELECT * EXCLUDE (seconds) FROM '{results}'")
    names = [d[0] for d in cursor.description]
    return {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}


def _batch(*argv: str) -> tuple[int, str]:
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(["batch", *argv])
    return code, err.getvalue()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled examples beside broken inputs: rows with the sentence `diagnose` prints for each."""
    root = tmp_path_factory.mktemp("dask-inputs")
    (root / "empty.sqlite").write_bytes(b"")
    (root / "text.sqlite").write_text("not an export\n")
    return root


GIVEN = [str(EXAMPLES), "empty.sqlite", "text.sqlite", "gone.sqlite"]  # relative paths: from the inputs directory


@pytest.fixture(scope="module")
def local(inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The rows of local mode (two worker processes) over GIVEN."""
    out = tmp_path_factory.mktemp("local") / "local.parquet"
    with contextlib.chdir(inputs):
        assert _batch(*GIVEN, "--out", str(out), "-j", "2", "-q")[0] == 2  # some profiles are broken
    return _rows(out)


def test_the_rows_on_a_dask_cluster_are_the_rows_of_local_mode(scheduler, inputs, local, tmp_path, monkeypatch):
    monkeypatch.chdir(inputs)  # the workers read the paths made absolute; the rows name them as given
    code, err = _batch(*GIVEN, "--out", str(tmp_path / "dask.parquet"), "--executor", "dask", "--scheduler",
                       scheduler)
    assert code == 2
    got = _rows(tmp_path / "dask.parquet")
    assert got == local
    assert sorted(p for p, r in got.items() if r["status"] == "ok") == sorted(
        str(p) for p in EXAMPLES.glob("*.sqlite"))
    assert got["gone.sqlite"]["error"].startswith("gone.sqlite")  # the path as given, not the worker's
    assert f"on the Dask cluster at {scheduler} (2 workers when the batch started)" in err


def test_the_local_cluster_gives_the_rows_of_local_mode(inputs, local, tmp_path, monkeypatch, reaped):
    monkeypatch.chdir(inputs)
    code, err = _batch(*GIVEN, "--out", str(tmp_path / "dask.parquet"), "--executor", "dask", "-j", "2")
    assert code == 2 and "on a local Dask cluster of 2 worker processes" in err, err
    assert _rows(tmp_path / "dask.parquet") == local


def test_the_local_cluster_refuses_a_client_without_its_credentials(reaped):
    """Any local user can reach a loopback port: without the cluster's throwaway TLS credentials no client may
    connect and run code as the batch's user, neither over plain TCP nor with TLS credentials of its own."""
    from nsys_diagnose.runs.batch_dask import close_local, connect

    client, cluster, where = connect(None, 1, distributed)
    try:
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        assert client.run(os.getpid)  # the batch's own client holds the credentials
        outsiders = [("tcp://" + address.removeprefix("tls://"), None),  # no TLS at all
                     (address, distributed.security.Security.temporary())]  # TLS, but not the cluster's certificate
        for target, security in outsiders:
            with pytest.raises((OSError, TimeoutError, ValueError)):
                with distributed.Client(target, security=security, timeout=2) as intruder:
                    intruder.run(os.getuid)
    finally:
        client.close()
        close_local(cluster, where)


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on: its sockets (/proc/PID/fd) that /proc/net/tcp{,6} lists in state 0A,
    LISTEN (https://www.kernel.org/doc/html/latest/networking/proc_net_tcp.html)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if (target := os.readlink(fd)).startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _http_answer(port: int) -> str | None:
    """The status line an HTTP request for /sitemap.json on the loopback port gets, or None when nothing answers
    in HTTP (a TLS port closes the connection)."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=conftest.LAST_RESORT_S)
    try:
        connection.request("GET", "/sitemap.json")
        response = connection.getresponse()
        return f"{response.status} {response.reason}"
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


@pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads the listening sockets from /proc (Linux)")
def test_the_local_cluster_serves_no_http(reaped):
    """Dask's scheduler and workers start HTTP servers (the scheduler's identity, the workers' call stacks, a
    sitemap) that ask no credentials: the local cluster of a batch keeps none listening, only its TLS ports (the
    scheduler's, the workers' and their nannies'), and none of those answers HTTP."""
    from nsys_diagnose.runs.batch_dask import close_local, connect

    before = _listening_ports(os.getpid())
    client, cluster, where = connect(None, 2, distributed)
    try:
        workers = client.scheduler_info()["workers"]
        tls = {cluster.scheduler_address, *workers, *(info["nanny"] for info in workers.values())}
        assert all(address.startswith("tls://127.0.0.1:") for address in tls), tls
        # the scheduler and the nannies run in this process (beside another test's cluster, maybe: `before`)
        pids = {os.getpid(), *client.run(os.getpid).values(), *client.run(os.getpid, nanny=True).values()}
        listening = set().union(*map(_listening_ports, pids)) - before
        assert listening == {int(address.rsplit(":", 1)[1]) for address in tls}
        assert {port: _http_answer(port) for port in listening} == dict.fromkeys(listening)
    finally:
        client.close()
        close_local(cluster, where)


def test_without_cryptography_the_local_cluster_is_one_sentence(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cryptography", None)
    code, err = _batch(str(EXAMPLES), "--out", str(tmp_path / "r.parquet"), "--executor", "dask")
    assert code == 2 and err == ("diagnose batch: error: --executor dask without --scheduler starts a local Dask "
                                 "cluster secured with TLS, which needs the cryptography package; install it with "
                                 "pip install 'nsys-diagnose[dask]'.\n")
    assert list(tmp_path.iterdir()) == []


def test_shards_of_either_executor_partition_the_profiles(scheduler, inputs, local, tmp_path, monkeypatch):
    monkeypatch.chdir(inputs)
    shards: dict[str, dict] = {}
    for index, executor in ((1, "local"), (2, "dask"), (3, "dask")):
        out = tmp_path / f"shard-{index}.parquet"
        extra = ["--scheduler", scheduler] if executor == "dask" else []
        code, err = _batch(*GIVEN, "--out", str(out), "--shard", f"{index}/3", "--executor", executor, *extra)
        rows = _rows(out)
        assert code == (2 if any(r["status"] == "error" for r in rows.values()) else 0), err
        assert f"shard {index}/3 of the 6 profiles found" in err, err
        assert not set(rows) & set(shards) and all(batch_profiles.shard_of(Path(p), 3) == index for p in rows)
        shards.update(rows)
    assert shards == local


def _killer(path: str, settings: batch.WorkerSettings, check) -> dict:
    """A task that kills its worker process mid-task, as the kernel's OOM killer would: always on a.sqlite; on
    b.sqlite only the first time (a marker file beside it remembers)."""
    marker = Path(path).with_suffix(".tried")
    name = Path(path).name
    if name == "a.sqlite" or (name == "b.sqlite" and not marker.exists()):
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return batch_table.error_row(path, "diagnosed")


def test_a_worker_killed_mid_task_is_retried_then_an_internal_error_row(scheduler, tmp_path):
    from nsys_diagnose.runs.batch_dask import diagnose_batch_dask

    paths = [tmp_path / f"{name}.sqlite" for name in ("a", "b", "c", "d")]
    done: list[str] = []
    rows = diagnose_batch_dask(paths, Config(), scheduler=scheduler, cache=False, work=_killer,
                               on_done=lambda row, finished, total: done.append(Path(row["path"]).name))
    assert [r["path"] for r in rows] == [str(p) for p in paths]
    assert rows[0]["status"] == "error" and batch_table.is_internal(rows[0])
    assert "died every time it was tried" in rows[0]["error"]
    assert [r["error"] for r in rows[1:]] == ["diagnosed"] * 3  # b's worker died once: b was diagnosed again
    assert sorted(done) == ["a.sqlite", "b.sqlite", "c.sqlite", "d.sqlite"]


def _slow(path: str, settings: batch.WorkerSettings, check) -> dict:
    import time

    time.sleep(1)
    return batch_table.error_row(path, "diagnosed")


def test_a_scheduler_that_goes_away_leaves_a_row_for_every_profile(tmp_path, reaped):
    """The cluster's scheduler stops once the first row is back: the profiles it had not finished are rows that
    say so (not "internal error:": the cluster's trouble, not a bug), and the batch returns."""
    from nsys_diagnose.runs.batch_dask import diagnose_batch_dask

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address="127.0.0.1:0", silence_logs=logging.CRITICAL)
    paths = [tmp_path / f"p{i}.sqlite" for i in range(8)]

    def first_row_then_stop(row, finished, total):
        if finished == 1:
            cluster.close()

    try:
        rows = diagnose_batch_dask(paths, Config(), scheduler=cluster.scheduler_address, cache=False, work=_slow,
                                   on_done=first_row_then_stop)
    finally:
        cluster.close()
    assert [r["path"] for r in rows] == [str(p) for p in paths]
    errors = [r["error"] for r in rows]
    assert "diagnosed" in errors and 0 < errors.count(
        "the Dask cluster lost this profile before it finished (the scheduler went away or cancelled the task); "
        "diagnose it again.") == len(errors) - errors.count("diagnosed")
    assert not any(batch_table.is_internal(r) for r in rows)


def test_without_dask_installed_the_dask_executor_is_one_sentence(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    code, err = _batch(str(EXAMPLES), "--out", str(tmp_path / "r.parquet"), "--executor", "dask")
    assert code == 2 and err == ("diagnose batch: error: --executor dask needs Dask distributed, which is not "
                                 "installed; install it with pip install 'nsys-diagnose[dask]'.\n")
    assert list(tmp_path.iterdir()) == []


def test_a_scheduler_without_the_dask_executor_is_one_sentence(tmp_path):
    code, err = _batch(str(EXAMPLES), "--out", str(tmp_path / "r.parquet"), "--scheduler", "tcp://127.0.0.1:8786")
    assert code == 2 and err == ("diagnose batch: error: --scheduler names a Dask scheduler; add --executor dask to "
                                 "run the batch there.\n")


@pytest.mark.parametrize("where", ["refusing port", "scheduler file without an address", "no address"])
def test_an_unreachable_scheduler_is_one_sentence(where, monkeypatch, tmp_path):
    from nsys_diagnose.runs import batch_dask

    monkeypatch.setattr(batch_dask, "CONNECT_TIMEOUT_S", 1)
    out, bad_file = tmp_path / "out", tmp_path / "scheduler.json"
    out.mkdir()
    bad_file.write_text('{"type": "Scheduler"}')
    with socket_that_refuses() as refusing:
        address = {"refusing port": refusing, "scheduler file without an address": str(bad_file),
                   "no address": "sched.example"}[where]
        code, err = _batch(str(EXAMPLES), "--out", str(out / "r.parquet"), "--executor", "dask",
                           "--scheduler", address)
    assert code == 2 and err.startswith(f"diagnose batch: error: cannot reach the Dask scheduler at {address} (")
    assert err.endswith("and that `dask scheduler` is running there.\n") and err.count("\n") == 1
    assert list(out.iterdir()) == []


@contextlib.contextmanager
def socket_that_refuses():
    """A loopback port that nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield f"tcp://127.0.0.1:{port}"


@pytest.mark.real_exports
def test_the_real_exports_give_the_rows_of_local_mode_on_a_dask_cluster(scheduler, tmp_path):
    """Both runs reuse the canonical caches the session's other real-export tests built (or the first run builds
    them for the second): the rows must not depend on where the profile was diagnosed."""
    from conftest import REAL_EXPORTS

    local, on_dask = tmp_path / "local.parquet", tmp_path / "dask.parquet"
    exports = [str(p) for p in REAL_EXPORTS]
    assert _batch(*exports, "--out", str(local), "-j", "2", "-q")[0] == 0
    assert _batch(*exports, "--out", str(on_dask), "--executor", "dask", "--scheduler", scheduler, "-q")[0] == 0
    expected = _rows(local)
    assert sorted(expected) == sorted(exports) and _rows(on_dask) == expected


def test_ctrl_c_stops_the_local_cluster_and_leaves_nothing(tmp_path, spawn):
    """Ctrl-C reaches the whole process group, the local Dask cluster's workers too: each stops its diagnosis at
    the next stage and removes its temporary files, then the cluster is shut down; no results file is written."""
    import shutil
    import subprocess
    import time

    from nsys_diagnose.fixtures.generator import generate_large

    profiles, scratch, out = tmp_path / "big", tmp_path / "tmp", tmp_path / "out"
    for d in (profiles, scratch, out):
        d.mkdir()
    generate_large(profiles / "a.sqlite", kernels=400_000)
    shutil.copyfile(profiles / "a.sqlite", profiles / "b.sqlite")
    proc = spawn([str(Path(sys.executable).parent / "diagnose"), "batch", str(profiles), "--executor", "dask", "-j",
                  "2", "--no-cache", "-q", "--out", str(out / "results.parquet")],
                 env=dict(os.environ, TMPDIR=str(scratch)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + conftest.LAST_RESORT_S
    diagnosing = lambda: [p for p in scratch.iterdir() if "-dask-" not in p.name]  # noqa: E731
    while proc.poll() is None and len(diagnosing()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # until both workers are reading their export (what they wrote, not a guessed delay)
    if proc.poll() is not None:
        pytest.skip("the batch finished before the signal could be sent")
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=conftest.LAST_RESORT_S)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "diagnose batch: interrupted", err
    assert "Traceback" not in err and list(scratch.iterdir()) == [] and list(out.iterdir()) == []
