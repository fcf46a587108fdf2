"""`diagnose batch --executor dask`: the same rows as the local worker pool, computed on a Dask distributed cluster
(https://distributed.dask.org), either an existing one (`--scheduler tcp://host:8786` or a scheduler file) or a
`LocalCluster` of worker processes started here.

    rows = diagnose_batch_dask(profiles, config, scheduler="tcp://10.0.0.5:8786")

Every profile is one task that runs `diagnose_row` (engine/runs/batch.py) on a worker, so a row is what local mode
gives. The workers read the profiles themselves: the paths must name the same files on every worker (a shared file
system). Dask reschedules the tasks of a worker that died; a profile whose task killed its worker more often than
the scheduler allows (`distributed.scheduler.allowed-failures`, 3 by default) is an "internal error:" row, and a
profile the cluster lost another way (the scheduler went away, a task was cancelled) is a row that says so: the
batch always ends with one row per profile.

Dask is an optional extra (`pip install 'nsys-diagnose[dask]'`), imported only here and only when asked for.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .batch import Done, WorkerSettings, diagnose_row, stop_signals_held, worker_count
from .batch_table import error_row
from ..diagnosis.config import Config
from ..base.duck import usable_cpus
from ..base.errors import INTERNAL, InputError, SetupError, error_sentence
from ..reading.cache import cache_secret, usable_cache_dir
from ..reading.workspace import SCRATCH_PREFIX
from ..base.version import tool_version

INSTALL_HINT = ("--executor dask needs Dask distributed, which is not installed; install it with "
                "pip install 'nsys-diagnose[dask]'.")
CONNECT_TIMEOUT_S = 10  # Dask retries a refused connection until then
POLL_S = 0.1
STOP_WAIT_S = 30  # a stopped batch waits this long for the diagnoses in progress to clean up after themselves

Check = Callable[[str], None]
# diagnose_row's shape: (path, settings, check) -> row, or None once `check` stopped the diagnosis
Work = Callable[[str, WorkerSettings, Check], "dict[str, Any] | None"]


def require_dask() -> None:
    """Raise SetupError (one sentence: how to install it) when Dask distributed is not installed."""
    _distributed()


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise SetupError(INSTALL_HINT) from None
    return distributed


def _require_cryptography() -> None:
    """The local cluster's TLS credentials are made with the cryptography package (part of the dask extra)."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise SetupError("--executor dask without --scheduler starts a local Dask cluster secured with TLS, which "
                         "needs the cryptography package; install it with pip install 'nsys-diagnose[dask]'.") from None


@dataclass
class Cluster:
    """Where the batch runs, as the summary line names it."""

    description: str = ""
    workers: int = 0
    scratch: str | None = None  # the working directory of a LocalCluster's workers


def describe_local(workers: int) -> str:
    return f"a local Dask cluster of {workers} worker process{'es' if workers != 1 else ''}"


# ------------------------------------------------------------------------------------------------------------
# The task, run on a worker
# ------------------------------------------------------------------------------------------------------------
_STOPPED: set[str] = set()  # on a worker: the batches whose command was stopped


def _stop_batch(batch: str) -> None:
    """Run on every worker when the command is stopped: the diagnoses of that batch stop at their next stage and
    remove their temporary files, as the local pool's workers do. Other batches sharing the worker go on."""
    _STOPPED.add(batch)


def _checker(batch: str) -> Check:
    def check(stage: str = "") -> None:
        if batch in _STOPPED:
            raise KeyboardInterrupt

    return check


def _task(given: str, absolute: str, settings: WorkerSettings, host_threads: dict[str, int], version: str,
          work: Work, batch: str) -> dict[str, Any] | None:
    """One profile's row, computed on a Dask worker. DuckDB's threads and memory limit are shared among the tasks
    that this worker's machine runs side by side (the Dask threads of every worker on that host, as the scheduler
    counted them when the batch started), as local mode shares them among its processes."""
    from distributed import get_worker

    worker = get_worker()
    if tool_version() != version:
        return error_row(given, f"the Dask worker {worker.address} runs nsys-diagnose {tool_version()}, this command "
                                f"{version}; install the same version on every worker so every row is judged alike.")
    side_by_side = max(1, host_threads.get(worker.ip, worker.state.nthreads))
    settings = dataclasses.replace(settings, threads=max(1, usable_cpus() // side_by_side), share=side_by_side)
    row = work(absolute, settings, _checker(batch))
    if row is None:
        return None
    # The worker read the absolute path (its working directory is not this command's); the row names the profile
    # as it was given, as in local mode.
    if row.get("error") and absolute != given:
        row["error"] = row["error"].replace(absolute, given)
    row["path"] = given
    return row


# ------------------------------------------------------------------------------------------------------------
# The client side
# ------------------------------------------------------------------------------------------------------------
def _lost(exc: BaseException, distributed: Any) -> str:
    """The row's error for a task that ended without a row."""
    if isinstance(exc, distributed.KilledWorker):
        return (f"{INTERNAL}the Dask workers diagnosing this profile died every time it was tried (killed, out of "
                f"memory or a crash in a library); diagnose the profile alone to see what happens.")
    if isinstance(exc, ImportError):
        return (f"the Dask worker cannot import nsys-diagnose ({' '.join(str(exc).split())[:200]}); install "
                f"nsys-diagnose[dask] on every worker.")
    return error_sentence(exc, bug=True)


def _cancelled() -> str:
    # Not "internal error:": a scheduler that went away is the cluster's trouble, not a bug in nsys-diagnose.
    return ("the Dask cluster lost this profile before it finished (the scheduler went away or cancelled the task); "
            "diagnose it again.")


def connect(scheduler: str | None, workers: int, distributed: Any) -> tuple[Any, Any, Cluster]:
    """(client, local cluster or None, where). `scheduler`: an address (tcp://host:8786), a scheduler file written
    by `dask scheduler --scheduler-file`, or None for a LocalCluster of `workers` processes."""
    if scheduler is None:
        import dask

        _require_cryptography()
        # One thread per worker process: a diagnosis holds the GIL in Python between its DuckDB queries. A worker
        # holds only the task it runs (saturation 1.0): when a worker dies, the scheduler counts that against every
        # task the worker held, and a profile queued behind one that kills its worker must not pay for it.
        # The worker processes start with the stop signals blocked, so that Ctrl-C on the terminal (which reaches
        # the whole process group) does not kill them in the middle of a profile: this command stops them instead,
        # through _stop_batch, and each removes its temporary files. Dask's own working files go to a scratch
        # directory of this run (removed with the cluster, or by a later run's sweep when this one was killed), not
        # to a dask-scratch-space left in the temporary directory.
        scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-dask-")
        where = Cluster(describe_local(workers), workers, scratch)
        # No web server: the scheduler and every worker start an HTTP server whatever the dashboard setting, with
        # the routes of `distributed.{scheduler,worker}.http.routes` (the scheduler's identity, the workers' call
        # stacks, a sitemap, https://distributed.dask.org/en/stable/http_services.html), and HTTP has no TLS
        # credentials to ask for: any local user could read them. No routes (nothing but 404) until they are
        # closed below, and no Bokeh dashboard.
        settings = {"distributed.scheduler.worker-saturation": 1.0, "temporary-directory": scratch,
                    "distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
        try:
            with dask.config.set(settings), stop_signals_held():
                # Loopback only, and the scheduler's HTTP server (closed once started) on a free port: Dask's
                # default, 8787, may belong to another cluster on this machine, and taking it would print a warning.
                # Loopback is not private: any local user could connect and run code as this user, so the cluster
                # speaks TLS with throwaway credentials that only this process and its workers hold (security=True,
                # Security.temporary in https://distributed.dask.org/en/stable/tls.html).
                cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                   host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                                   scheduler_kwargs={"dashboard": False}, security=True,
                                                   silence_logs=logging.CRITICAL)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        try:
            client = distributed.Client(cluster, security=cluster.security)
            _close_http_servers(client, cluster, distributed)
            return client, cluster, where
        except BaseException:
            close_local(cluster, where)
            raise
    try:
        if os.path.isfile(scheduler):
            client = distributed.Client(scheduler_file=scheduler, timeout=CONNECT_TIMEOUT_S)
        else:
            client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - whatever Dask makes of a bad address or file, it is one sentence
        why = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise InputError(f"cannot reach the Dask scheduler at {scheduler} ({why}); check the address "
                         f"(tcp://HOST:PORT) or scheduler file, and that `dask scheduler` is running there.") from None
    count = len(client.scheduler_info().get("workers", {}))
    return client, None, Cluster(f"the Dask cluster at {scheduler} ({count} worker{'s' if count != 1 else ''} when "
                                 f"the batch started)", count)


def _close_http_servers(client: Any, cluster: Any, distributed: Any) -> None:
    """Stop the HTTP servers of a LocalCluster listening: the scheduler's (in this process, on the cluster's event
    loop) and every worker's, now and whenever a nanny restarts one (a worker plugin, set up on each worker that
    joins: https://distributed.dask.org/en/stable/plugins.html#worker-plugins). Only the TLS ports stay open."""

    async def stop_scheduler_http() -> None:
        cluster.scheduler.http_server.stop()

    class WithoutHttp(distributed.WorkerPlugin):  # type: ignore[name-defined,misc]
        name = "nsys-diagnose-without-http"

        def setup(self, worker: Any) -> None:
            worker.http_server.stop()

    cluster.sync(stop_scheduler_http)
    client.register_plugin(WithoutHttp())


def close_local(cluster: Any, where: Cluster) -> None:
    try:
        cluster.close()
    finally:
        if where.scratch is not None:
            shutil.rmtree(where.scratch, ignore_errors=True)


def _host_threads(client: Any) -> dict[str, int]:
    hosts: dict[str, int] = {}
    for info in client.scheduler_info().get("workers", {}).values():
        hosts[info["host"]] = hosts.get(info["host"], 0) + int(info.get("nthreads") or 1)
    return hosts


def diagnose_batch_dask(profiles: Sequence[Path], config: Config, *, scheduler: str | None = None,
                        jobs: int | None = None, cache: bool = True, cache_dir: str | os.PathLike[str] | None = None,
                        on_done: Done | None = None, check_stop: Callable[[], None] | None = None,
                        on_connect: Callable[[Cluster], None] | None = None,
                        work: Work = diagnose_row) -> list[dict[str, Any]]:
    """One row per profile, in the order given, as `diagnose_batch` returns them. `scheduler`: see `connect` (None:
    Dask's scheduler-address setting, else a LocalCluster of `jobs` worker processes). `work` runs on the workers
    (tests give their own). On an interruption (`check_stop` raises KeyboardInterrupt) the workers stop this batch's
    diagnoses (see _stop), a LocalCluster is shut down, and the exception propagates."""
    distributed = _distributed()
    if scheduler is None:
        import dask

        scheduler = dask.config.get("scheduler-address", None)  # Dask's own setting: DASK_SCHEDULER_ADDRESS
    total = len(profiles)
    if total == 0:
        return []
    if scheduler is None and cache:
        directory = usable_cache_dir(cache_dir)[0]
        if directory is not None:
            cache_secret(directory)  # create this user's cache key once, before workers race to create it
    with _quiet_dask():
        return _run(profiles, config, scheduler, jobs, cache, cache_dir, on_done, check_stop, on_connect, work,
                    distributed)


@contextmanager
def _quiet_dask() -> Iterator[None]:
    """Dask's client logs what it retries and gives up on (a scheduler that went away, a worker that died); the
    rows and the summary say what that cost, so its log stays out of the command's output."""
    # Dask's logging configuration gives some of its loggers levels of their own: silence each, not only the root.
    names = ["distributed", *(n for n in logging.root.manager.loggerDict if n.startswith("distributed."))]
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _run(profiles: Sequence[Path], config: Config, scheduler: str | None, jobs: int | None, cache: bool,
         cache_dir: str | os.PathLike[str] | None, on_done: Done | None, check_stop: Callable[[], None] | None,
         on_connect: Callable[[Cluster], None] | None, work: Work, distributed: Any) -> list[dict[str, Any]]:
    client, cluster, where = connect(scheduler, worker_count(len(profiles), jobs), distributed)
    futures: dict[Any, int] = {}
    batch = f"nsys-diagnose-{os.urandom(8).hex()}"  # names this batch's tasks on a cluster others may share
    try:
        if on_connect is not None:
            on_connect(where)
        settings = WorkerSettings(config, cache, os.fspath(cache_dir) if cache_dir is not None else None)
        hosts, version = _host_threads(client), tool_version()
        for index, path in enumerate(profiles):
            given = str(path)
            future = client.submit(_task, given, os.path.join(os.getcwd(), given), settings, hosts, version, work,
                                   batch, key=f"{batch}-{index}", pure=False)
            futures[future] = index
        return _collect(futures, profiles, distributed, on_done, check_stop)
    except BaseException:
        _stop(client, futures, batch, wait=cluster is not None)
        raise
    finally:
        client.close()
        if cluster is not None:
            close_local(cluster, where)


def _collect(futures: dict[Any, int], profiles: Sequence[Path], distributed: Any, on_done: Done | None,
             check_stop: Callable[[], None] | None) -> list[dict[str, Any]]:
    total = len(profiles)
    rows: dict[int, dict[str, Any]] = {}
    pending = set(futures)
    while pending:
        # Polled rather than waited on: distributed.wait raises for the whole set when one task is cancelled, and
        # the stop check must run every fraction of a second anyway.
        # "lost": the worker holding a finished row died before it was fetched; the scheduler computes it again.
        done = {f for f in pending if f.status not in ("pending", "lost")}
        pending -= done
        if check_stop is not None:
            check_stop()
        if not done:
            time.sleep(POLL_S)
        for future in done:
            index = futures[future]
            given = str(profiles[index])
            if future.status == "finished":
                try:
                    row = future.result()
                except Exception as exc:  # noqa: BLE001 - e.g. a row that could not be sent back
                    row = error_row(given, _lost(exc, distributed))
                if row is None:  # the worker was asked to stop
                    raise KeyboardInterrupt
            elif future.status == "cancelled":  # by the scheduler, or lost with it
                row = error_row(given, _cancelled())
            else:  # the task raised (a worker died too often; it could not be unpickled there)
                row = error_row(given, _lost(future.exception(), distributed))
            future.release()  # the row is here: the worker need not keep it
            rows[index] = row
            if on_done is not None:
                on_done(row, len(rows), total)
    return [rows[i] for i in range(total)]


def _stop(client: Any, futures: dict[Any, int], batch: str, *, wait: bool) -> None:
    """Ask the workers to stop this batch: a diagnosis in progress stops at its next stage and removes its temporary
    files, a task not started yet returns at once. With `wait` (a LocalCluster about to be shut down), wait for all
    of them to return; otherwise cancel them on the scheduler and leave the remote workers to it."""
    try:
        if futures:
            client.run(_stop_batch, batch)
        if wait:
            deadline = time.monotonic() + STOP_WAIT_S
            while any(f.status == "pending" for f in futures) and time.monotonic() < deadline:
                time.sleep(POLL_S)
        else:
            client.cancel(list(futures), force=True)
    except Exception:  # noqa: BLE001 - stopping anyway: a scheduler that is gone has nothing left to stop
        pass
