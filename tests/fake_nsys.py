"""Fake `nsys` executables for the capture tests: each answers `--version`, `profile --help` and `export --help` as one
nsys release does (the switches and values listed below), records every argv it is called with, and emulates a
capture: it runs the program, passes on its exit status, and writes a report (or, like Debian's 2022.4 without its
importer, only a .qdstrm); `export` copies a prepared SQLite export.

The 2022.4 lists match the `nsys profile --help` of Debian's nsight-systems 2022.4.2; the other releases carry the
differences that matter here, as the Nsight Systems user guide describes them (--capture-range-end replacing
--stop-on-range-end, --gpu-metrics-devices replacing --gpu-metrics-device, then `cuda-visible`, --pytorch and the
python-gil trace), placed in the release each example stands for: what is tested is that the spelling follows the
help text, whatever the release."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

COMMON = ["--sample", "--cpuctxsw", "--delay", "--duration", "--output", "--force-overwrite", "--capture-range"]
TRACE_2022 = ["cuda", "nvtx", "cublas", "cudnn", "osrt", "mpi", "openacc", "openmp", "none"]
VERSIONS: dict[str, dict] = {
    "2021.1.1.66": {"switches": COMMON + ["--stop-on-range-end", "--trace-fork-before-exec",
                                          "--gpu-metrics-device"], "trace": TRACE_2022, "export": False},
    "2022.4.2.1": {"switches": COMMON + ["--capture-range-end", "--trace-fork-before-exec", "--cuda-graph-trace",
                                         "--gpu-metrics-device"], "trace": TRACE_2022, "export": True},
    "2023.4.1.97": {"switches": COMMON + ["--capture-range-end", "--trace-fork-before-exec", "--cuda-graph-trace",
                                          "--gpu-metrics-device"], "trace": TRACE_2022 + ["python-gil"],
                    "export": True},
    "2024.6.1.90": {"switches": COMMON + ["--capture-range-end", "--trace-fork-before-exec", "--cuda-graph-trace",
                                          "--gpu-metrics-devices", "--pytorch"], "trace": TRACE_2022 + ["python-gil"],
                    "devices": ["all", "none", "cuda-visible"], "export": True},
    "2025.3.1.90": {"switches": COMMON + ["--capture-range-end", "--trace-fork-before-exec", "--cuda-graph-trace",
                                          "--gpu-metrics-devices", "--pytorch"],
                    "trace": TRACE_2022 + ["python-gil", "cuda-hw"], "devices": ["all", "none", "cuda-visible"],
                    "export": True},
}


def profile_help(version: str) -> str:
    spec = VERSIONS[version]
    quoted = ", ".join(f"'{v}'" for v in spec["trace"])
    parts = [f"usage: nsys profile [<args>] [application] [<application args>]\n\n\t-t, --trace=\n\n\t   Possible "
             f"values are {quoted}.\n\t   Select the API(s) to trace.\n"]
    for switch in spec["switches"]:
        values = "'" + "', '".join(spec.get("devices", ["all", "none"])) + "'" \
            if switch.startswith("--gpu-metrics-device") else "'true' or 'false'"
        short = {"--output": "-o, ", "--sample": "-s, ", "--duration": "-d, ", "--delay": "-y, "}.get(switch, "")
        parts.append(f"\t{short}{switch}=\n\n\t   Possible values are {values}.\n")
    return "\n".join(parts)


SCRIPT = r'''#!{python}
import json, os, shutil, signal, subprocess, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "fake.json")) as f:
    CONF = json.load(f)
with open(CONF["log"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in CONF["watch_env"]}}}}) + "\n")
args = sys.argv[1:]
if args == ["--start-agent"]:  # the agent: a daemon that waits for nsys until it is stopped
    with open(os.path.join(HERE, "agent.pid"), "w") as f:
        f.write(str(os.getpid()))
    while True:
        signal.pause()
if args == ["--version"]:
    if CONF.get("broken"):
        print("nsys: error while loading shared libraries: libQt6Core.so.6", file=sys.stderr); sys.exit(127)
    print("NVIDIA Nsight Systems version " + CONF["version"])
    sys.exit(0)
if args[:1] == ["profile"] and args[1:] == ["--help"]:
    print(CONF["profile_help"]); sys.exit(0)
if args[:1] == ["export"] and args[1:] == ["--help"]:
    if not CONF["export"]:
        print("unknown command 'export'", file=sys.stderr); sys.exit(1)
    print("usage: nsys export [<args>] [nsys-rep-file]\n\n\t-f, --force-overwrite=\n\n\t-o, --output=\n\n"
          "\t-t, --type=\n\n\t   Possible values are: sqlite, hdf, text, arrow, json, info.\n")
    sys.exit(0)
if args[:1] == ["export"]:
    out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
    if not os.path.isfile(args[-1]):
        print("no such report", file=sys.stderr); sys.exit(1)
    shutil.copyfile(CONF["export_from"], out)
    sys.exit(0)
if args[:1] == ["profile"] and "--sample=bogus" in args:  # how nsys refuses a value it does not know
    print("Illegal --sample argument: bogus.\nPossible --sample values are 'process-tree', 'system-wide', and "
          "'none'.\n\nusage: nsys profile [<args>] [application] [<application args>]\nTry 'nsys profile --help' "
          "for more information.", file=sys.stderr)
    sys.exit(1)
if args[:1] == ["profile"]:
    rest = args[1:]
    while rest and rest[0].startswith("-"):
        rest.pop(0)
    base = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
    if CONF.get("say"):
        print(CONF["say"], flush=True)
    if CONF.get("agent"):  # as nsys 2022.4 does: its agent in a session of its own, not waited for
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--start-agent"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists(os.path.join(HERE, "agent.pid")):
            time.sleep(0.01)
    if CONF.get("agent_lost"):  # nsys's own transient failure: no report, the agent left behind
        print("Connection to the Agent lost", flush=True)
        sys.exit(1)
    stopped, started = [], []
    own = CONF.get("own_session")  # the launcher runs the program in a session of its own: nsys passes Ctrl-C on
    signal.signal(signal.SIGINT, lambda s, f: (stopped.append(s), own and started and started[0].send_signal(s)))
    child = subprocess.Popen(rest, start_new_session=bool(own))
    started.append(child)
    duration = next((float(a.split("=", 1)[1]) for a in args if a.startswith("--duration=")), None)
    try:
        code = child.wait(timeout=duration)
    except subprocess.TimeoutExpired:  # the end of the capture window: nsys sends SIGTERM (--kill's default)
        child.send_signal(signal.SIGTERM)
        code = child.wait()
    if stopped:
        time.sleep(CONF.get("finish_delay", 0))  # writing a large report takes a while
    if CONF.get("write_nothing"):
        print("fake nsys: cannot profile", file=sys.stderr); sys.exit(1)
    suffix = ".qdstrm" if CONF.get("qdstrm") else ".nsys-rep"
    with open(base + suffix, "w") as f:
        f.write("fake report\n")
    print("Generated:\n    " + base + suffix)
    sys.exit(code if code >= 0 else 128 - code)
sys.exit(2)
'''

IMPORTER = r'''#!{python}
import sys
args = sys.argv[1:]
src, out = args[args.index("-i") + 1], args[args.index("-o") + 1]
open(out, "w").write(open(src).read())
print('Saved report file to "' + out + '"')
'''

WATCH_ENV = ["VLLM_WORKER_MULTIPROC_METHOD", "TLLM_LLMAPI_ENABLE_NVTX"]


def make_fake_nsys(root: Path, version: str, export_from: Path | None = None, *, qdstrm: bool = False,
                   write_nothing: bool = False, finish_delay: float = 0, broken: bool = False,
                   say: str = "", agent: bool = False, agent_lost: bool = False,
                   own_session: bool = False) -> tuple[Path, Path]:
    """A fake nsys in root/nsight/bin/nsys (with a QdstrmImporter in root/nsight/host-linux-x64, where Debian's
    package keeps it); returns (nsys, log of its calls, one JSON line each). `agent`: a capture starts an agent
    daemon in a session of its own, as nsys 2022.4 does (its pid in agent_pid(nsys)), which only a signal stops;
    `agent_lost`: then fails as nsys does when it loses that agent, leaving it running; `own_session`: the program
    runs in a session of its own, as under nsys's launcher, and nsys passes Ctrl-C on to it."""
    bin_dir = root / "nsight" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    log = root / "nsys-calls.jsonl"
    conf = {"version": version, "profile_help": profile_help(version), "export": VERSIONS[version]["export"],
            "export_from": str(export_from or ""), "log": str(log), "watch_env": WATCH_ENV, "qdstrm": qdstrm,
            "write_nothing": write_nothing, "finish_delay": finish_delay, "broken": broken, "say": say,
            "agent": agent or agent_lost, "agent_lost": agent_lost, "own_session": own_session}
    (bin_dir / "fake.json").write_text(json.dumps(conf))
    nsys = bin_dir / "nsys"
    nsys.write_text(SCRIPT.format(python=sys.executable))
    nsys.chmod(nsys.stat().st_mode | stat.S_IXUSR)
    host = root / "nsight" / "host-linux-x64"
    host.mkdir(exist_ok=True)
    importer = host / "QdstrmImporter"
    importer.write_text(IMPORTER.format(python=sys.executable))
    importer.chmod(importer.stat().st_mode | stat.S_IXUSR)
    return nsys, log


def agent_pid(nsys: Path) -> int | None:
    """The pid of the agent the fake nsys started, if it started one."""
    pid_file = nsys.with_name("agent.pid")
    return int(pid_file.read_text()) if pid_file.is_file() else None


def calls(log: Path) -> list[dict]:
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def profile_call(log: Path) -> dict:
    return next(c for c in calls(log) if c["argv"][:1] == ["profile"] and c["argv"][1:] != ["--help"])
