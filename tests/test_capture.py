"""`diagnose profile -- CMD` with fake nsys executables (tests/fake_nsys.py) of several releases: the flags each
preset gets per version, dropped flags and their warning, the output directory, the program's exit status, Ctrl-C,
a missing or too old nsys, the .qdstrm importer and the per-binary cache of what nsys accepts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsys_diagnose.capture.flags import CaptureOptions, build_plan
from nsys_diagnose.capture.nsys import installed_nsys
from nsys_diagnose.pack.presets import guess_preset, load_presets, parallel_size
from nsys_diagnose.fixtures.generator import generate

from cli_in_process import run_cli
from conftest import LAST_RESORT_S
from fake_nsys import agent_pid, calls, make_fake_nsys, profile_call

OLD, V2022, V2023, V2024, V2025 = "2021.1.1.66", "2022.4.2.1", "2023.4.1.97", "2024.6.1.90", "2025.3.1.90"
EXIT_PROGRAM_FAILED = 4

# Every test here runs nsys (a fake one) and the program under it: none may leave a process running (conftest.py).
pytestmark = pytest.mark.usefixtures("reaped")


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("export") / "eager.sqlite"
    generate("eager_decode", path)
    return path


def _plan(tmp_path: Path, version: str, preset: str, command: list[str], **options):
    nsys, _ = make_fake_nsys(tmp_path, version)
    found, _ = installed_nsys(nsys, cache=False)
    return build_plan(found, load_presets()[preset], command, tmp_path / "out", CaptureOptions(**options), {})


def _switches(plan) -> list[str]:
    return [a for a in plan.profile_argv[2:] if a.startswith("--") and not a.startswith("--output=")]


@pytest.mark.parametrize("version", [V2022, V2023, V2024, V2025])
def test_vllm_gets_fork_tracing_graph_nodes_and_spawned_workers_on_every_version(tmp_path, version):
    plan = _plan(tmp_path, version, "vllm", ["vllm", "serve", "m"])
    assert _switches(plan) == ["--trace=cuda,nvtx,osrt", "--trace-fork-before-exec=true", "--cuda-graph-trace=node",
                               "--sample=none", "--cpuctxsw=none"]
    assert plan.env == {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    assert plan.profile_argv[-3:] == ["vllm", "serve", "m"]
    assert plan.warnings == []


@pytest.mark.parametrize("version, kept", [(V2022, False), (V2023, True), (V2024, True), (V2025, True)])
def test_trtllm_traces_the_gil_only_where_nsys_can(tmp_path, version, kept):
    plan = _plan(tmp_path, version, "tensorrt-llm", ["trtllm-serve", "m"])
    trace = next(s for s in _switches(plan) if s.startswith("--trace="))
    assert trace == ("--trace=cuda,nvtx,python-gil" if kept else "--trace=cuda,nvtx")
    assert plan.env == {"TLLM_LLMAPI_ENABLE_NVTX": "1", "TLLM_PROFILE_RECORD_GC": "1"}
    if kept:
        assert plan.warnings == []
    else:
        assert plan.warnings == [f"nsys {version} cannot trace python-gil: dropped from --trace; lost: when Python "
                                 f"threads wait for the GIL."]


@pytest.mark.parametrize("version, switch", [(V2022, None), (V2023, None), (V2024, "--pytorch=autograd-nvtx"),
                                             (V2025, "--pytorch=autograd-nvtx")])
def test_pytorch_autograd_ranges_where_nsys_has_the_switch(tmp_path, version, switch):
    plan = _plan(tmp_path, version, "pytorch", ["python", "train.py"])
    assert _switches(plan)[0] == "--trace=cuda,nvtx,osrt,cudnn,cublas"
    assert (switch in _switches(plan)) if switch else not any(s.startswith("--pytorch") for s in _switches(plan))
    assert len(plan.warnings) == (0 if switch else 1)
    if not switch:
        assert plan.warnings[0].startswith(f"nsys {version} has no --pytorch switch: --pytorch=autograd-nvtx dropped; "
                                           f"lost: NVTX ranges of PyTorch's autograd operators")


@pytest.mark.parametrize("version, expected", [
    (V2022, "--gpu-metrics-device=all"), (V2023, "--gpu-metrics-device=all"),
    (V2024, "--gpu-metrics-devices=cuda-visible"), (V2025, "--gpu-metrics-devices=cuda-visible")])
def test_gpu_metrics_switch_is_spelled_for_the_version(tmp_path, version, expected):
    plan = _plan(tmp_path, version, "cuda", ["./app"], gpu_metrics=True)
    assert expected in _switches(plan)
    assert plan.warnings == []


@pytest.mark.parametrize("version", [V2022, V2024])
def test_capture_range_window_and_its_end_per_preset(tmp_path, version):
    vllm = _plan(tmp_path / "v", version, "vllm", ["vllm", "serve", "m"], capture_range="cudaProfilerApi",
                 delay_s=30, duration_s=12.5)
    assert _switches(vllm)[-4:] == ["--capture-range=cudaProfilerApi", "--capture-range-end=repeat", "--delay=30",
                                    "--duration=12.5"]
    sglang = _plan(tmp_path / "s", version, "sglang", ["python", "-m", "sglang.launch_server"],
                   capture_range="cudaProfilerApi")
    assert "--capture-range-end=stop" in _switches(sglang)


def test_an_old_nsys_gets_the_old_spelling_or_loses_the_switch_with_a_warning(tmp_path):
    sglang = _plan(tmp_path / "s", OLD, "sglang", ["python", "-m", "sglang.launch_server"],
                   capture_range="cudaProfilerApi", gpu_metrics=True)
    assert "--stop-on-range-end=true" in _switches(sglang)
    assert "--gpu-metrics-device=all" in _switches(sglang)
    assert sglang.warnings == [f"nsys {OLD} has no --cuda-graph-trace switch: --cuda-graph-trace=node dropped; lost: "
                               f"kernels inside CUDA graphs (each replay stays one opaque interval)."]
    vllm = _plan(tmp_path / "v", OLD, "vllm", ["vllm", "serve", "m"], capture_range="cudaProfilerApi")
    assert not any("range-end" in s for s in _switches(vllm))
    assert (f"nsys {OLD} has only --stop-on-range-end, which cannot say --capture-range-end=repeat: dropped; lost: "
            f"what happens at the end of the capture range (nsys's default).") in vllm.warnings


@pytest.mark.parametrize("command, preset", [
    (["vllm", "serve", "meta-llama/Llama-3.1-8B"], "vllm"),
    (["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], "sglang"),
    (["python", "-m", "sglang.bench_one_batch"], "sglang"),
    (["trtllm-serve", "m"], "tensorrt-llm"), (["env", "A=1", "trtllm-bench", "throughput"], "tensorrt-llm"),
    (["python", "bench.py"], "pytorch"), (["torchrun", "--nproc-per-node", "2", "t.py"], "pytorch"),
    (["./my_cuda_app"], "cuda")])
def test_the_preset_is_guessed_from_the_command(command, preset):
    assert guess_preset(command)[0] == preset


def test_parallel_sizes_in_the_command_give_the_expected_gpus():
    presets = load_presets()
    assert parallel_size(presets["vllm"], ["vllm", "serve", "m", "--tensor-parallel-size", "2", "-pp=2"]) == 4
    assert parallel_size(presets["sglang"], ["python", "-m", "sglang.launch_server", "--tp", "8"]) == 8
    assert parallel_size(presets["vllm"], ["vllm", "serve", "m"]) is None


def test_capture_exports_and_diagnoses_in_a_fresh_directory(tmp_path, export):
    nsys, log = make_fake_nsys(tmp_path, V2024, export)
    out = tmp_path / "run1"
    done = run_cli("profile", "--nsys", nsys, "--out-dir", out, "-f", "json", "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"]["primary"]  # the eager decode the fake export holds is diagnosed
    assert sorted(p.name for p in out.iterdir()) == ["capture.json", "capture.log", "profile.nsys-rep",
                                                     "profile.sqlite", "report.md"]
    assert "preset pytorch (guessed: the program is" in done.stderr
    assert f"kept {out / 'profile.nsys-rep'}, {out / 'profile.sqlite'}, {out / 'report.md'}" in done.stderr
    argv = profile_call(log)["argv"]
    assert argv[argv.index(f"--output={out / 'profile'}") + 1:] == [sys.executable, "-c", "pass"]
    exported = [c["argv"] for c in calls(log) if c["argv"][:1] == ["export"] and c["argv"][1:] != ["--help"]]
    assert exported == [["export", "--type=sqlite", f"--output={out / 'profile.sqlite'}", "--force-overwrite=true",
                         str(out / "profile.nsys-rep")]]
    record = json.loads((out / "capture.json").read_text())
    assert record["program_exit_status"] == 0 and record["nsys_version"] == V2024


@pytest.mark.slow
def test_an_earlier_capture_is_never_overwritten_without_force(tmp_path, export):
    nsys, log = make_fake_nsys(tmp_path, V2024, export)
    out = tmp_path / "run"
    assert run_cli("profile", "--nsys", nsys, "--out-dir", out, "--", sys.executable, "-c", "pass").returncode == 0
    before = (out / "profile.sqlite").stat().st_mtime_ns
    again = run_cli("profile", "--nsys", nsys, "--out-dir", out, "--", sys.executable, "-c", "pass")
    assert again.returncode == 2
    assert f"{out} already holds a capture (capture.json); choose another --out-dir, or pass --force" \
        in again.stderr
    assert (out / "profile.sqlite").stat().st_mtime_ns == before
    assert run_cli("profile", "--nsys", nsys, "--out-dir", out, "--force", "--", sys.executable, "-c",
                   "pass").returncode == 0
    assert "--force-overwrite=true" in [c for c in calls(log) if c["argv"][:1] == ["profile"]][-1]["argv"]


@pytest.mark.slow
def test_force_replaces_the_captures_own_files_and_never_the_users_reports(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.html").write_text("the user's own report")
    (out / "report.json").write_text("{}")
    (out / "profile.py").write_text("# the user's own script")
    done = run_cli("profile", "--nsys", nsys, "--out-dir", out, "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr  # none of these is a capture's
    assert run_cli("profile", "--nsys", nsys, "--out-dir", out, "--force", "--", sys.executable, "-c",
                   "pass").returncode == 0
    assert (out / "report.html").read_text() == "the user's own report"
    assert (out / "report.json").read_text() == "{}" and (out / "profile.py").is_file()


def test_a_directory_without_capture_json_is_not_called_a_capture(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.md").write_text("notes")
    done = run_cli("profile", "--nsys", nsys, "--out-dir", out, "--", sys.executable, "-c", "pass")
    assert done.returncode == 2
    assert f"{out} holds report.md, which the capture would replace; choose another --out-dir, or pass --force " \
           f"to replace it." in done.stderr
    assert "already holds a capture" not in done.stderr and (out / "report.md").read_text() == "notes"


@pytest.mark.slow
def test_the_default_directory_is_never_one_that_exists_already(tmp_path, export, monkeypatch):
    """Two runs started in the same second: the second never shares (or reuses the empty) directory of the first."""
    from nsys_diagnose.capture import run as capture_run

    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    work = tmp_path / "work"
    work.mkdir()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(1_700_000_000))
    real_localtime = time.localtime
    monkeypatch.setattr(capture_run.time, "localtime", lambda _now=None: real_localtime(1_700_000_000))
    taken = [work / f"nsys-diagnose-{stamp}", work / f"nsys-diagnose-{stamp}-{os.getpid()}"]
    for path in taken:
        path.mkdir()  # another run's, just created and still empty
    done = run_cli("profile", "--nsys", nsys, "--", sys.executable, "-c", "pass", cwd=work)
    assert done.returncode == 0, done.stderr
    assert all(not any(path.iterdir()) for path in taken)
    made = sorted(set(work.iterdir()) - set(taken))
    assert [p.name for p in made] == [f"nsys-diagnose-{stamp}-{os.getpid()}-1"]
    assert (made[0] / "profile.sqlite").is_file()


@pytest.mark.slow
def test_the_default_directory_is_new_and_timestamped(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    work = tmp_path / "work"
    work.mkdir()
    done = run_cli("profile", "--nsys", nsys, "--", sys.executable, "-c", "pass", cwd=work)
    assert done.returncode == 0, done.stderr
    made = [p.name for p in work.iterdir()]
    assert len(made) == 1 and made[0].startswith("nsys-diagnose-")
    assert (work / made[0] / "profile.sqlite").is_file()


@pytest.mark.slow
def test_a_failing_program_is_reported_and_its_partial_capture_diagnosed(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    out = tmp_path / "run"
    done = run_cli("profile", "--nsys", nsys, "--out-dir", out, "-f", "json", "--", sys.executable, "-c",
                   "import sys; sys.exit(3)")
    assert done.returncode == EXIT_PROGRAM_FAILED
    assert "the program failed: exit status 3; diagnosing the partial capture nsys wrote" in done.stderr
    assert json.loads(done.stdout)["verdict"]["primary"]
    assert json.loads((out / "capture.json").read_text())["program_exit_status"] == 3


@pytest.mark.slow
def test_the_qdstrm_nsys_leaves_is_imported_with_the_importer_beside_it(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2022, export, qdstrm=True)
    out = tmp_path / "run"
    done = run_cli("profile", "--nsys", nsys, "--out-dir", out, "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr
    importer = tmp_path / "nsight" / "host-linux-x64" / "QdstrmImporter"
    assert f"nsys left profile.qdstrm: importing it with {importer}" in done.stderr
    assert (out / "profile.nsys-rep").is_file() and not (out / "profile.qdstrm").exists()


def test_nsys_that_writes_no_report_is_one_sentence(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export, write_nothing=True)
    done = run_cli("profile", "--nsys", nsys, "--out-dir", tmp_path / "run", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "nsys wrote no report" in errors[0] and "fake nsys: cannot profile" in errors[0]
    assert "Traceback" not in done.stderr


def test_missing_nsys_is_one_sentence_saying_how_to_get_or_point_to_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NSYS_DIAGNOSE_NSYS", raising=False)
    done = run_cli("profile", "--", "python", "bench.py")
    assert done.returncode == 2
    assert "nsys was not found on PATH" in done.stderr and "--nsys PATH or NSYS_DIAGNOSE_NSYS" in done.stderr
    assert "install Nsight Systems" in done.stderr and "Traceback" not in done.stderr
    monkeypatch.setenv("NSYS_DIAGNOSE_NSYS", str(tmp_path / "no-such-nsys"))
    named = run_cli("profile", "--", "python", "bench.py")
    assert named.returncode == 2 and f"{tmp_path / 'no-such-nsys'} (from NSYS_DIAGNOSE_NSYS)" in named.stderr


def test_no_program_or_one_named_like_a_switch_is_one_sentence(tmp_path):
    nsys, log = make_fake_nsys(tmp_path, V2024)
    none = run_cli("profile", "--nsys", nsys)
    assert none.returncode == 2 and "give the program to profile after --" in none.stderr
    dashed = run_cli("profile", "--nsys", nsys, "--", "-o.sh")
    assert dashed.returncode == 2 and "name it by a path, e.g. ./-o.sh" in dashed.stderr
    assert calls(log) == []  # refused before nsys was even asked its version


def test_an_nsys_without_export_is_too_old(tmp_path):
    nsys, _ = make_fake_nsys(tmp_path, OLD)
    done = run_cli("profile", "--nsys", nsys, "--", "python", "bench.py")
    assert done.returncode == 2
    assert f"(nsys {OLD}) is too old: it has no `nsys export --type sqlite`" in done.stderr


def test_dry_run_prints_the_exact_lines_and_environment_and_runs_nothing(tmp_path):
    nsys, log = make_fake_nsys(tmp_path, V2024)
    out = tmp_path / "run"
    done = run_cli("profile", "--nsys", nsys, "--out-dir", out, "--dry-run", "--range", "cudaProfilerApi", "--",
                   "vllm", "serve", "m", "--tensor-parallel-size", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "export VLLM_WORKER_MULTIPROC_METHOD=spawn" in lines
    assert (f"{nsys} profile --trace=cuda,nvtx,osrt --trace-fork-before-exec=true --cuda-graph-trace=node "
            f"--sample=none --cpuctxsw=none --capture-range=cudaProfilerApi --capture-range-end=repeat "
            f"--output={out / 'profile'} vllm serve m --tensor-parallel-size 2") in lines
    assert f"{nsys} export --type=sqlite --output={out / 'profile.sqlite'} --force-overwrite=true " \
           f"{out / 'profile.nsys-rep'}" in lines
    assert any(line.startswith("# ") and "/start_profile" in line for line in lines)  # the range note
    assert f"diagnose {out / 'profile.sqlite'} --set=facts.expected_gpus=2 --set=facts.expected_ranks=2" in lines
    assert not out.exists()
    assert not [c for c in calls(log) if c["argv"][:1] == ["profile"] and c["argv"][1:] != ["--help"]]


# What each bundled preset must name to get a PyTorch-profiler (Kineto) trace without nsys, from the stacks' own
# guides: vLLM docs/contributing/profiling.md (https://docs.vllm.ai/en/latest/contributing/profiling.html), SGLang
# https://docs.sglang.ai/developer_guide/benchmark_and_profiling.html, TensorRT-LLM
# https://nvidia.github.io/TensorRT-LLM/developer-guide/perf-analysis.html, https://pytorch.org/docs/stable/profiler.html
TORCH_PROFILER_NAMES = {
    "vllm": ["--profiler-config", '"profiler": "torch"', "torch_profiler_dir", "VLLM_TORCH_PROFILER_DIR",
             "POST /start_profile", "POST /stop_profile", "vllm bench serve --profile", "llm.start_profile()"],
    "sglang": ["SGLANG_TORCH_PROFILER_DIR", "POST /start_profile", "POST /stop_profile", "sglang.bench_serving",
               "sglang.bench_one_batch ... --profile"],
    "tensorrt-llm": ["TLLM_TORCH_PROFILE_TRACE=", "TLLM_PROFILE_START_STOP=A-B", "PyTorch backend only"],
    "pytorch": ["torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])",
                'record_function("decode_step")', 'export_chrome_trace("run.pt.trace.json.gz")',
                "diagnose run.pt.trace.json.gz"],
    "cuda": ["No PyTorch profiler", "capture it with nsys"],
}


def test_every_bundled_preset_says_how_to_get_a_pytorch_profiler_trace_with_its_stacks_own_switches():
    presets = load_presets()
    assert set(presets) == set(TORCH_PROFILER_NAMES)  # a new preset needs its names here too
    for name, words in TORCH_PROFILER_NAMES.items():
        text = " ".join(presets[name].torch_profiler.split())
        assert all(word in text for word in words), (name, [w for w in words if w not in text])


def test_a_preset_without_its_pytorch_profiler_note_does_not_load(tmp_path, monkeypatch):
    from nsys_diagnose.pack import presets as presets_module
    from nsys_diagnose.base.errors import SetupError

    bundled = presets_module.presets_dir()
    (tmp_path / "nsys-flags.yaml").write_text((bundled / "nsys-flags.yaml").read_text(encoding="utf-8"))
    text = (bundled / "cuda.yaml").read_text(encoding="utf-8")
    (tmp_path / "cuda.yaml").write_text(text.split("torch_profiler:")[0] + "references: []\n", encoding="utf-8")
    monkeypatch.setattr(presets_module, "presets_dir", lambda: tmp_path)
    presets_module.load_flags.cache_clear()
    presets_module.load_presets.cache_clear()
    try:
        with pytest.raises(SetupError, match="not a valid capture preset .* at torch_profiler"):
            presets_module.load_presets()
    finally:
        monkeypatch.undo()
        presets_module.load_flags.cache_clear()
        presets_module.load_presets.cache_clear()
    assert presets_module.load_presets()["cuda"].torch_profiler


def test_dry_run_and_a_missing_nsys_say_how_to_profile_without_nsys(tmp_path, monkeypatch):
    nsys, _ = make_fake_nsys(tmp_path, V2024)
    done = run_cli("profile", "--nsys", nsys, "--dry-run", "--", "python", "-m", "sglang.launch_server", "--tp", "2")
    assert done.returncode == 0, done.stderr
    note = " ".join(load_presets()["sglang"].torch_profiler.split())
    assert f"# without nsys: {note}" in done.stdout.splitlines()
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NSYS_DIAGNOSE_NSYS", raising=False)
    missing = run_cli("profile", "--", "vllm", "serve", "m")
    assert missing.returncode == 2 and "nsys was not found on PATH" in missing.stderr
    vllm = " ".join(load_presets()["vllm"].torch_profiler.split())
    assert f"diagnose profile: without nsys: {vllm}" in missing.stderr.splitlines()


def test_what_nsys_accepts_is_cached_per_binary_and_probed_again_when_it_changes(tmp_path, user_cache):
    nsys, log = make_fake_nsys(tmp_path, V2024)
    first, cached = installed_nsys(nsys)
    assert not cached and first.version == V2024
    probes = len(calls(log))
    second, cached = installed_nsys(nsys)
    assert cached and second == first and len(calls(log)) == probes
    cache_file = next(user_cache.glob("nsys-capabilities-*.json"))
    assert cache_file.stat().st_mode & 0o777 == 0o600 and cache_file.parent.stat().st_mode & 0o777 == 0o700
    os.utime(nsys, ns=(time.time_ns(), time.time_ns() + 10**9))
    _, cached = installed_nsys(nsys)
    assert not cached and len(calls(log)) > probes
    cache_file.chmod(0o666)  # a file others may write is never trusted
    _, cached = installed_nsys(nsys)
    assert not cached


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    """Until the program has written `path`: a run that ends first fails the test at once, with what it said."""
    deadline = time.monotonic() + LAST_RESORT_S
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {path.name} appeared: "
                                 f"{proc.communicate()[1][-500:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)


def _start(spawn, tmp_path: Path, export: Path, finish_delay: float = 0,
           **fake) -> tuple[subprocess.Popen, Path, Path]:
    """`diagnose profile` of a program that writes its pid into `ready`, then sleeps, started by `spawn` (its
    process group is killed when the test ends)."""
    nsys, _ = make_fake_nsys(tmp_path, V2024, export, finish_delay=finish_delay, **fake)
    ready, out = tmp_path / "ready", tmp_path / "run"
    program = (f"import os, pathlib, signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(130)); "
               f"pathlib.Path({str(ready) + '.new'!r}).write_text(str(os.getpid())); "
               f"os.replace({str(ready) + '.new'!r}, {str(ready)!r}); time.sleep(600)")
    proc = spawn([sys.executable, "-m", "nsys_diagnose.cli", "profile", "--nsys", str(nsys), "--out-dir", str(out),
                  "-f", "json", "--", sys.executable, "-c", program],
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(ready, proc)
    return proc, out, ready


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet collected by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_ctrl_c_stops_the_program_lets_nsys_finish_and_diagnoses_what_it_wrote(spawn, tmp_path, export):
    proc, out, _ = _start(spawn, tmp_path, export)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: to the whole foreground process group
    stdout, stderr = proc.communicate(timeout=LAST_RESORT_S)
    assert proc.returncode == 130, stderr
    assert "stopping the program; nsys is writing what it captured" in stderr
    assert "the program stopped by SIGINT after" in stderr
    assert json.loads(stdout)["verdict"]["primary"]
    assert (out / "report.md").is_file() and json.loads((out / "capture.json").read_text())["stopped_by_signal"] == 2


@pytest.mark.slow
def test_a_second_ctrl_c_aborts(spawn, tmp_path, export):
    proc, out, ready = _start(spawn, tmp_path, export, finish_delay=600, agent=True, own_session=True)  # nsys slow
    os.killpg(proc.pid, signal.SIGINT)  # to write its report, its agent and the program outside its process group
    # The second Ctrl-C goes once the first was handled (its message is out), not after a fixed wait: two signals
    # that arrive before the handler runs are one.
    first = ""
    while "stopping the program" not in first:
        line = proc.stderr.readline()
        assert line, f"diagnose profile ended before handling the first Ctrl-C: {first}"
        first += line
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=LAST_RESORT_S)
    stderr = first + stderr
    assert proc.returncode == 130
    assert stdout == "" and "interrupted" in stderr and "Traceback" not in stderr
    assert not (out / "report.md").exists() and not (out / "profile.nsys-rep").exists()  # nsys was not waited for
    # nsys was killed: what it had started outside its process group is stopped by diagnose profile itself
    assert "stopped what nsys left running: " in stderr
    assert not _alive(int(ready.read_text())) and not _alive(agent_pid(out.parent / "nsight" / "bin" / "nsys"))


def test_an_agent_nsys_lost_is_stopped_and_the_failure_says_to_run_again(tmp_path, export):
    """nsys 2022.4 on a busy machine: "Connection to the Agent lost", no report, and its agent (a daemon in a
    session of its own) left running; diagnose profile stops it and says so."""
    nsys, _ = make_fake_nsys(tmp_path, V2024, export, agent_lost=True)
    done = run_cli("profile", "--nsys", nsys, "--out-dir", tmp_path / "run", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2, done.stderr
    assert "nsys wrote no report" in done.stderr and "Connection to the Agent lost" in done.stderr
    assert "nsys could not start or keep its agent process, which a busy machine can cause: run the capture " \
           "again." in done.stderr
    pid = agent_pid(nsys)
    assert pid is not None and "stopped what nsys left running: python" in done.stderr and f"(pid {pid})" in \
        done.stderr
    assert not _alive(pid)


@pytest.mark.slow
def test_expected_gpus_turn_a_missing_gpu_into_a_capture_finding(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    done = run_cli("profile", "--nsys", nsys, "--out-dir", tmp_path / "run", "-f", "json", "--expect-gpus", "2",
                   "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr
    findings = {f["rule"]: f for f in json.loads(done.stdout)["findings"]}
    assert findings["fewer-gpus-than-expected"]["message"].startswith(
        "Only 1 GPU did work in the capture, but the run should use 2")
    assert findings["fewer-ranks-than-expected"]["severity"] == "warning"  # --expect-ranks follows --expect-gpus
    assert json.loads((tmp_path / "run" / "capture.json").read_text())["settings"] == [
        "facts.expected_gpus=2", "facts.expected_ranks=2"]


@pytest.mark.slow
def test_capture_findings_lead_with_the_diagnose_profile_line_for_the_profiles_stack():
    from conftest import scenario_analysis

    worker = next(f for f in scenario_analysis("worker_kernels_untraced")[1].findings
                  if f.rule == "worker-without-kernels")
    assert worker.message.startswith("VllmWorker-1 (pid 70111) made 7,325 kernel or graph launch calls")
    # the vllm preset traces forks already: no --nsys-arg, and its environment in the line by hand
    assert worker.remediation[0] == (
        "Capture again with: diagnose profile --preset vllm -- <your command> (by hand: "
        "VLLM_WORKER_MULTIPROC_METHOD=spawn nsys profile --trace=cuda,nvtx --trace-fork-before-exec=true ...).")
    graph = next(f for f in scenario_analysis("graph_decode_graph")[1].findings
                 if f.rule == "graph-mode-hides-kernels")
    assert graph.remediation[0] == (
        "Capture again with: diagnose profile --preset pytorch --nsys-arg=--cuda-graph-trace=node -- <your command> "
        "(by hand: nsys profile --cuda-graph-trace=node --trace=cuda,nvtx ...).")


@pytest.mark.slow
def test_nsys_arg_replaces_the_presets_switch_and_unknown_switches_are_dropped(tmp_path):
    plan = _plan(tmp_path, V2022, "vllm", ["vllm", "serve", "m"],
                 extra=("--cuda-graph-trace=graph", "--python-sampling=true"))
    assert "--cuda-graph-trace=graph" in _switches(plan) and "--cuda-graph-trace=node" not in _switches(plan)
    assert plan.warnings == [f"nsys {V2022} has no --python-sampling switch: --nsys-arg=--python-sampling=true "
                             f"dropped."]


def test_an_nsys_that_cannot_run_is_one_sentence(tmp_path):
    nsys, _ = make_fake_nsys(tmp_path, V2024, broken=True)
    done = run_cli("profile", "--nsys", nsys, "--", "python", "bench.py")
    assert done.returncode == 2
    assert f"{nsys} --version failed (nsys: error while loading shared libraries: libQt6Core.so.6), so this nsys " \
           f"is unusable here" in done.stderr
    assert "--nsys PATH or NSYS_DIAGNOSE_NSYS" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_gpu_metrics_without_the_privilege_say_how_to_grant_it(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export, say="ERR_NVGPUCTRPERM - The user does not have permission "
                                                          "to access NVIDIA GPU Performance Counters")
    done = run_cli("profile", "--nsys", nsys, "--out-dir", tmp_path / "run", "--gpu-metrics", "--",
                   sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr
    assert "GPU metrics need access to the GPU performance counters: run the capture as root" in done.stderr
    assert "NVreg_RestrictProfilingToAdminUsers=0" in done.stderr


@pytest.mark.slow
def test_a_program_that_nsys_stops_at_the_end_of_duration_did_not_fail(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    out = tmp_path / "run"
    done = run_cli("profile", "--nsys", nsys, "--out-dir", out, "--duration", "1", "--", sys.executable, "-c",
                   "import time; time.sleep(30)")
    assert done.returncode == 0, done.stderr
    assert "the program was stopped by nsys at the end of the capture window (1 s), as --duration asks" in done.stderr
    record = json.loads((out / "capture.json").read_text())
    assert record["program_exit_status"] == 143 and record["ended_by_duration"] is True


def test_more_gpus_asked_than_visible_is_a_warning_and_the_range_note_is_printed(tmp_path, monkeypatch):
    nsys, _ = make_fake_nsys(tmp_path, V2024)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    done = run_cli("profile", "--nsys", nsys, "--dry-run", "--range", "cudaProfilerApi", "--", "python", "-m",
                   "sglang.launch_server", "--tp", "2")
    assert done.returncode == 0
    assert "warning: the command asks for 2 GPUs but CUDA_VISIBLE_DEVICES shows 1" in done.stderr
    assert "note: With --range cudaProfilerApi, bracket the load with POST /start_profile and POST /stop_profile" \
        in done.stderr


def test_every_bundled_capture_line_is_a_command_diagnose_profile_accepts():
    """The line a capture finding prints is pasted as is: it must parse, with every switch whole."""
    import re
    import shlex

    from nsys_diagnose.pack.presets import capture_line, load_presets
    from nsys_diagnose.pack.stacks import bundled_stacks
    from nsys_diagnose.cli.capture import parser as capture_parser
    from nsys_diagnose.diagnosis.rules import load_rules
    from nsys_diagnose.facts.loading import load_facts

    rules = [r for r in load_rules(load_facts(), scope=None).values() if r.spec.capture is not None]
    assert len(rules) >= 8
    for rule in rules:
        spec = rule.spec.capture
        for preset in load_presets().values():
            lineage = [next((s.key for s in bundled_stacks() if s.preset == preset.preset), "cuda")]
            line = capture_line(lineage, spec.profile, spec.pass_switches, spec.nsys)
            command = line.removeprefix("Capture again with: ").split(" (by hand:")[0]
            # the placeholders a user fills in (<seconds>, <Hz>) stand for numbers
            filled = re.sub(r"<[^<>]+>", "10", command.replace("<your command>", "python bench.py"))
            argv = shlex.split(filled)
            assert argv[:2] == ["diagnose", "profile"], line
            args = capture_parser().parse_args(argv[2:])  # exits 2 (SystemExit) on a switch it refuses
            assert args.command == ["python", "bench.py"], line
            assert all(s.split("=", 1)[0] in {p.split("=", 1)[0] for p in spec.pass_switches}
                       for s in args.nsys_args), (rule.id, args.nsys_args)


@pytest.mark.parametrize("switch, instead", [
    ("--output=/tmp/x", "--out-dir DIR"), ("--duration=5", "--duration S"), ("--delay 3", "--delay S"),
    ("--force-overwrite=true", "--force"), ("--capture-range=nvtx", "--range cudaProfilerApi"),
    ("--capture-range-end=repeat", "--range cudaProfilerApi"), ("--export=sqlite", "the profile.sqlite"),
    ("--gpu-metrics-device=all", "--gpu-metrics")])
def test_nsys_arg_refuses_a_switch_diagnose_profile_sets_itself(tmp_path, switch, instead):
    nsys, log = make_fake_nsys(tmp_path, V2024)
    done = run_cli("profile", "--nsys", nsys, f"--nsys-arg={switch}", "--", "python", "bench.py", cwd=tmp_path)
    assert done.returncode == 2
    name = switch.split("=")[0].split()[0]
    assert f"{name} is set by diagnose profile itself, so it cannot be passed with --nsys-arg; use {instead}" \
        in done.stderr
    assert not log.exists()  # refused before nsys was even asked what it accepts


def test_arguments_nsys_rejects_are_reported_as_nsys_rejecting_them(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    out = tmp_path / "run"
    done = run_cli("profile", "--nsys", nsys, "--out-dir", out, "--nsys-arg=--sample=bogus", "--", sys.executable,
                   "-c", "pass")
    assert done.returncode == 2
    assert "nsys rejected its arguments (it said: Illegal --sample argument: bogus. / Possible --sample values " \
           "are 'process-tree', 'system-wide', and 'none'.) and ran nothing" in done.stderr
    assert "the program failed" not in done.stderr and "failed: exit status" not in done.stderr


@pytest.mark.slow
def test_timings_time_the_capture_the_export_and_the_diagnosis(tmp_path, export):
    nsys, _ = make_fake_nsys(tmp_path, V2024, export)
    done = run_cli("profile", "--nsys", nsys, "--out-dir", tmp_path / "run", "--timings", "-q", "--", sys.executable,
                   "-c", "pass")
    assert done.returncode == 0, done.stderr
    stages = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("stage ")]
    assert stages[:3] == ["capture", "import", "export"] and "render" in stages and len(stages) > 4
    assert any(line.startswith("total ") for line in done.stderr.splitlines())


@pytest.mark.slow
def test_an_empty_capture_of_a_program_that_exited_0_does_not_blame_a_failure(tmp_path):
    empty = tmp_path / "empty.sqlite"
    generate("empty_capture", empty)
    nsys, _ = make_fake_nsys(tmp_path, V2024, empty)
    done = run_cli("profile", "--nsys", nsys, "--out-dir", tmp_path / "run", "-f", "json", "--", sys.executable,
                   "-c", "pass")
    assert "the program exited with status 0" in done.stderr
    finding = next(f for f in json.loads(done.stdout)["findings"] if f["rule"] == "capture-empty")
    assert "probably failed" not in finding["message"]
    assert "it ended (or failed) before the capture began or its capture range opened" in finding["message"]


@pytest.mark.slow
def test_the_capture_line_keeps_the_preset_the_capture_ran_with(tmp_path):
    """An empty capture shows no stack, so the line would fall back to the generic preset; the vllm capture's
    line keeps vllm (its worker spawning and fork tracing are what a re-capture needs)."""
    empty = tmp_path / "empty.sqlite"
    generate("empty_capture", empty)
    nsys, _ = make_fake_nsys(tmp_path, V2024, empty)
    done = run_cli("profile", "--nsys", nsys, "--preset", "vllm", "--out-dir", tmp_path / "run", "-f", "json", "--",
                   sys.executable, "-c", "pass")
    finding = next(f for f in json.loads(done.stdout)["findings"] if f["rule"] == "capture-empty")
    assert finding["remediation"][0] == ("Capture again with: diagnose profile --preset vllm -- <your command> (by "
                                         "hand: VLLM_WORKER_MULTIPROC_METHOD=spawn nsys profile "
                                         "--trace=cuda,nvtx,osrt ...).")


def test_a_leftover_counts_as_stopped_only_once_it_is_gone_or_a_zombie(spawn):
    """stop_leftovers waits on /proc/PID/stat, not on the environment a dying process has already dropped, and
    never takes a pid reused by another process for the capture's."""
    from nsys_diagnose.capture.run import CAPTURE_ID_ENV, _running

    entry = f"{CAPTURE_ID_ENV}=test-id".encode()
    ours = spawn(["sleep", "30"], env={**os.environ, CAPTURE_ID_ENV: "test-id"})
    other = spawn(["sleep", "30"], env={k: v for k, v in os.environ.items() if k != CAPTURE_ID_ENV})
    assert _running(ours.pid, entry) and not _running(other.pid, entry)
    ours.kill()
    deadline = time.monotonic() + LAST_RESORT_S
    while Path(f"/proc/{ours.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)  # killed, not yet waited for: a zombie, which runs no more
    assert not _running(ours.pid, entry)
    ours.wait()
    assert not _running(ours.pid, entry)
