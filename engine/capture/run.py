"""Running a capture: the output directory, nsys with the program under it (its output on standard error, so
standard output carries only the report), Ctrl-C, the program's exit status, a .qdstrm left behind, the export."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import DiagnoseError, OutputError
from .flags import Plan
from .nsys import INSTALL_HINT, NsysError, find_importer

# The files a capture writes into its directory; --force replaces these and nothing else (a report.html or
# report.json the user wrote there with -o stays). capture.json, written last, marks the directory as a capture.
OWN_FILES = ("profile.nsys-rep", "profile.qdstrm", "profile.sqlite", "capture.log", "capture.json", "report.md")
MARKER = "capture.json"
DEFAULT_PREFIX = "nsys-diagnose-"
NSYS_USAGE = "usage: nsys profile"
EXPORT_TIMEOUT_S = 3600
LOG_TAIL = 200  # lines of nsys's output kept to explain a failure
# The message of nsys (and of CUPTI) when GPU performance counters need privileges the user lacks.
COUNTER_PERMISSION = ("ERR_NVGPUCTRPERM", "Insufficient privilege", "insufficient privilege",
                      "profiling permission", "not permitted to access GPU performance counters")
# nsys's own failure to start or keep its agent (the daemon it starts as `nsys --start-agent`): it says one of these and
# writes no report. Seen on a busy machine, where the agent starts too slowly for nsys; running again usually works.
AGENT_FAILURES = ("Connection to the Agent lost", "The timeout expired", "Agent launcher failed",
                  "Failed to start the agent")
AGENT_HINT = ("nsys could not start or keep its agent process, which a busy machine can cause: run the capture "
              "again")
# Every process of a capture carries this variable, one value per capture, in its environment (/proc/PID/environ):
# nsys 2022.4 starts its agent as a daemon in a session of its own (`nsys --start-agent`, its parent PID 1), and
# its launcher runs the program in another session, so neither nsys's process group nor a signal to nsys reaches
# them once nsys is gone; this variable finds them.
CAPTURE_ID_ENV = "NSYS_DIAGNOSE_CAPTURE_ID"
LEFTOVER_SETTLE_S = 2.0   # how long what nsys left may take to exit on its own once nsys has
LEFTOVER_GRACE_S = 5.0    # between SIGTERM and SIGKILL for what is still there
COUNTER_HINT = ("GPU metrics need access to the GPU performance counters: run the capture as root (sudo), or let "
                "every user read them (as root: `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
                "/etc/modprobe.d/, then reload the driver or reboot; "
                "https://developer.nvidia.com/nvidia-development-tools-solutions-err_nvgpuctrperm-permission-issue-performance-counters).")


def default_out_dir(now: float | None = None, attempt: int = 0) -> Path:
    """./nsys-diagnose-<date>-<time>-<pid>[-N]: the process id keeps two runs started in the same second apart."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return Path.cwd() / f"{DEFAULT_PREFIX}{stamp}-{os.getpid()}{f'-{attempt}' if attempt else ''}"


def create_default_out_dir(now: float | None = None, tries: int = 100) -> Path:
    """A new default directory, created by this run alone: one that exists already (whoever made it) is never
    used; the next name is tried instead."""
    for attempt in range(tries):
        out_dir = Path(os.path.abspath(default_out_dir(now, attempt)))
        try:
            out_dir.mkdir(exist_ok=False)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(f"{out_dir}: cannot create the capture directory ({exc.strerror or exc}); choose "
                              f"an --out-dir.") from None
        return out_dir
    raise OutputError(f"{tries} capture directories named {default_out_dir(now).name}[-N] exist already; choose "
                      f"an --out-dir.")


def prepare_out_dir(out_dir: Path, *, force: bool) -> Path:
    """Create the --out-dir, or use an existing one. One that holds a capture (its capture.json) or any file a
    capture writes is refused unless --force, which removes those files (OWN_FILES) and nothing else."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"{out_dir} exists and is not a directory; choose another --out-dir.")
    if out_dir.is_dir():
        ours = [out_dir / name for name in OWN_FILES if os.path.lexists(out_dir / name)]
        if ours and not force:
            if os.path.lexists(out_dir / MARKER):
                raise OutputError(f"{out_dir} already holds a capture ({MARKER}); choose another --out-dir, or "
                                  f"pass --force to replace it.")
            names = ", ".join(p.name for p in ours)
            raise OutputError(f"{out_dir} holds {names}, which the capture would replace; choose another "
                              f"--out-dir, or pass --force to replace {'it' if len(ours) == 1 else 'them'}.")
        for path in ours:
            path.unlink()
        return out_dir
    try:
        out_dir.mkdir(parents=True)
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot create the capture directory ({exc.strerror or exc}); choose another "
                          f"--out-dir.") from None
    return out_dir


@dataclass
class CaptureResult:
    returncode: int                      # nsys's exit status: the program's own, as nsys passes it on
    interrupted: int | None = None       # the stop signal that ended the program early, if any
    seconds: float = 0.0
    log_tail: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    window_end_s: float | None = None    # --delay + --duration: when nsys ends the capture (and the program)

    @property
    def ended_by_duration(self) -> bool:
        """nsys stopped the program at the end of --duration, as asked: it sends SIGTERM (`--kill`'s default, nsys
        profile --help) and passes on the status 128 + 15, or 128 + 9 when the program had to be killed."""
        return (self.window_end_s is not None and self.interrupted is None and self.seconds >= self.window_end_s
                and self.returncode in (128 + signal.SIGTERM, 128 + getattr(signal, "SIGKILL", 9)))

    @property
    def rejected(self) -> bool:
        """nsys refused its own command line and ran nothing: it prints what it refused, then its usage
        (`usage: nsys profile [<args>] ...`), and exits 1."""
        return (self.returncode != 0 and self.interrupted is None
                and any(line.startswith(NSYS_USAGE) for line in self.log_tail))

    @property
    def rejection(self) -> str:
        """What nsys said before its usage, e.g. `Illegal --sample argument: bogus. / Possible --sample values
        are ...`."""
        cut = next(i for i, line in enumerate(self.log_tail) if line.startswith(NSYS_USAGE))
        return _nsys_said(self.log_tail[max(0, cut - 6):cut])

    @property
    def failed(self) -> bool:
        return self.returncode != 0 and not self.ended_by_duration and self.interrupted is None

    def program_status(self) -> str:
        if self.interrupted is not None:
            return f"stopped by {signal.Signals(self.interrupted).name} after {self.seconds:.1f} s"
        if self.ended_by_duration:
            return (f"was stopped by nsys at the end of the capture window ({self.window_end_s:g} s), as --duration "
                    f"asks")
        if self.returncode == 0:
            return "exited with status 0"
        try:
            name = f" ({signal.Signals(self.returncode - 128).name})" if self.returncode > 128 else ""
        except ValueError:
            name = ""
        return f"failed: exit status {self.returncode}{name}"


class _Tee(threading.Thread):
    """Copies the capture's output (the program's and nsys's, both) to our standard error and to capture.log,
    keeping the last lines to explain a failure."""

    def __init__(self, stream, log: Path) -> None:
        super().__init__(daemon=True)
        self.stream, self.log = stream, log
        self.tail: list[str] = []

    def run(self) -> None:
        with open(self.log, "wb") as log:
            for line in iter(self.stream.readline, b""):
                log.write(line)
                try:
                    sys.stderr.buffer.write(line) if hasattr(sys.stderr, "buffer") else \
                        sys.stderr.write(line.decode("utf-8", "replace"))
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                self.tail.append(line.decode("utf-8", "replace").rstrip("\r\n"))
                del self.tail[:-LOG_TAIL]


def run_capture(plan: Plan, say, environ: dict[str, str], window_end_s: float | None = None) -> CaptureResult:
    """Run nsys in a process group of its own. The first Ctrl-C (or SIGTERM, SIGHUP) is passed to that group:
    the program stops and nsys writes what it has; a second one kills the group and aborts (KeyboardInterrupt)."""
    log = plan.report.parent / "capture.log"
    capture_id = f"{os.getpid()}-{os.urandom(8).hex()}"
    env = {**environ, **plan.env, CAPTURE_ID_ENV: capture_id}
    started = time.monotonic()
    try:
        # a process group of its own (POSIX), so that a terminal's Ctrl-C reaches nsys only through us
        group: dict[str, Any] = {"process_group": 0} if hasattr(os, "killpg") else {}
        child = subprocess.Popen(plan.profile_argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, **group)
    except OSError as exc:
        raise NsysError(f"{plan.profile_argv[0]} cannot be run ({exc.strerror or exc}); {INSTALL_HINT}.") from None
    tee = _Tee(child.stdout, log)
    tee.start()
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        try:
            if len(received) == 1:
                os.killpg(child.pid, signum) if group else child.send_signal(signum)
                say("stopping the program; nsys is writing what it captured (press Ctrl-C again to abort)")
            else:
                os.killpg(child.pid, signal.SIGKILL) if group else child.kill()
        except ProcessLookupError:
            pass

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) != signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    try:
        while True:
            try:
                code = child.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if len(received) >= 2:
                    child.wait()
                    raise KeyboardInterrupt
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        # nsys is gone: what it started and did not stop (its agent after a failure, the program after a second
        # Ctrl-C) is stopped here, before the output's reader waits for the pipe a leftover may still hold open.
        stop_leftovers(capture_id, say, settle=0 if len(received) >= 2 else LEFTOVER_SETTLE_S)
        tee.join(timeout=5)
    if len(received) >= 2:
        raise KeyboardInterrupt
    result = CaptureResult(returncode=code, interrupted=received[0] if received else None,
                           seconds=time.monotonic() - started, log_tail=list(tee.tail), window_end_s=window_end_s)
    if any(marker in line for line in tee.tail for marker in COUNTER_PERMISSION):
        result.notes.append(COUNTER_HINT)
    return result


def capture_processes(capture_id: str) -> dict[int, str]:
    """pid -> command (its first two words) of each live process, other than this one, whose environment holds
    CAPTURE_ID_ENV=capture_id: what a capture started and what those processes started in turn, daemons included.
    Empty where there is no /proc; a zombie (its environment is gone) or another user's process is not listed."""
    entry = f"{CAPTURE_ID_ENV}={capture_id}".encode()
    found: dict[int, str] = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if entry not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = [w.decode("utf-8", "replace") for w in f.read().split(b"\0") if w]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if words:
            found[pid] = " ".join([os.path.basename(words[0]), *words[1:2]])
    return found


def _running(pid: int, entry: bytes) -> bool:
    """Whether `pid` is still the capture's and runs: not gone, not a zombie (Z) nor dead (X) in /proc/PID/stat
    (proc(5)), and its environment holds `entry` or is already empty. A process on its way out drops its
    environment before it turns zombie, so the environment alone would call it gone early; a pid taken again by
    an unrelated process has an environment without `entry`, and is never signalled."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X") and (not environ or entry in environ.split(b"\0"))


def _wait_gone(capture_id: str, pids: set[int], seconds: float) -> set[int]:
    entry = f"{CAPTURE_ID_ENV}={capture_id}".encode()
    deadline = time.monotonic() + seconds
    while True:
        pids = {pid for pid in pids if _running(pid, entry)}
        if not pids or time.monotonic() >= deadline:
            return pids
        time.sleep(0.05)


def stop_leftovers(capture_id: str, say, *, settle: float = LEFTOVER_SETTLE_S) -> dict[int, str]:
    """Stop what a capture left running once nsys has exited, and say so: each process that still carries the
    capture's id gets `settle` seconds to exit on its own, then SIGTERM, then SIGKILL after LEFTOVER_GRACE_S.
    nsys waits for the program's processes (`--wait`, `nsys profile --help`) and stops its agent itself when the
    capture succeeds, so this finds nothing then; it finds the agent nsys loses on "Connection to the Agent lost",
    and the program nsys could not stop when a second Ctrl-C killed nsys. Returns what it stopped."""
    left = capture_processes(capture_id)
    if not left:
        return {}
    alive = _wait_gone(capture_id, set(left), settle)
    for sig, wait in ((signal.SIGTERM, LEFTOVER_GRACE_S), (getattr(signal, "SIGKILL", signal.SIGTERM), 1.0)):
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        alive = _wait_gone(capture_id, alive, wait)
    stopped = {pid: name for pid, name in left.items() if pid not in alive}
    named = ", ".join(f"{name} (pid {pid})" for pid, name in sorted(left.items()))
    say(f"stopped what nsys left running: {named}" if not alive else
        f"could not stop what nsys left running: {named}; stop it by hand (kill {' '.join(map(str, sorted(alive)))})")
    return stopped


def _nsys_said(lines: list[str]) -> str:
    useful = [line.strip() for line in lines if line.strip() and "%" not in line][-6:]
    return " ".join(" / ".join(useful).split())[:500] or "nothing"


def finish_report(plan: Plan, result: CaptureResult, say) -> Path:
    """The .nsys-rep of the capture: as nsys wrote it, or imported from the .qdstrm nsys left when it could not
    find its importer (Debian's nsight-systems 2022.4 does: it says 'The importer binary and its dependencies were
    not found'). One sentence when there is neither."""
    if plan.report.is_file():
        return plan.report
    qdstrm = plan.report.with_suffix(".qdstrm")
    if qdstrm.is_file():
        importer = find_importer(plan.profile_argv[0])
        if importer is None:
            raise NsysError(f"nsys left {qdstrm} but no report, and no QdstrmImporter was found beside "
                            f"{plan.profile_argv[0]}; convert it with the QdstrmImporter of a complete Nsight "
                            f"Systems install (QdstrmImporter -i {qdstrm}), then run `diagnose` on its export.")
        say(f"nsys left {qdstrm.name}: importing it with {importer}")
        done = subprocess.run([importer, "-i", str(qdstrm), "-o", str(plan.report)], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=EXPORT_TIMEOUT_S)
        if plan.report.is_file():
            qdstrm.unlink(missing_ok=True)  # the raw stream: everything in it is now in the report
            return plan.report
        said = _nsys_said((done.stdout + done.stderr).decode("utf-8", "replace").splitlines())
        raise NsysError(f"{importer} could not import {qdstrm} (it said: {said}); the capture is incomplete.")
    what = f"the program {result.program_status()}" if result.returncode else "nsys exited"
    if any(marker in line for line in result.log_tail for marker in AGENT_FAILURES):
        advice = AGENT_HINT
    else:
        advice = ("check that nsys can profile on this machine (`nsys status -e`) and that the command runs outside "
                  "nsys")
    raise NsysError(f"nsys wrote no report ({what}; nsys said: {_nsys_said(result.log_tail)}), so there is "
                    f"nothing to diagnose; {advice}. Its output is in {plan.report.parent / 'capture.log'}.")


def export_sqlite(plan: Plan, say) -> Path:
    """`nsys export --type sqlite` into the capture directory (always afresh: never a stale .sqlite)."""
    say(f"exporting {plan.report.name} to SQLite")
    plan.sqlite.unlink(missing_ok=True)
    try:
        done = subprocess.run(plan.export_argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=EXPORT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NsysError(f"`nsys export` could not run on {plan.report} ({exc}).") from None
    if done.returncode != 0 or not plan.sqlite.is_file():
        said = _nsys_said((done.stdout + done.stderr).decode("utf-8", "replace").splitlines())
        raise DiagnoseError(f"`nsys export --type sqlite` could not convert {plan.report} (nsys said: {said}); "
                            f"the report is kept, open it in the Nsight Systems GUI or export it by hand.")
    return plan.sqlite
