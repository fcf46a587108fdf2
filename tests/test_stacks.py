"""The report names the software stack it read from the export, and advice is written for that stack: serving
flags reach vLLM and SGLang profiles only, OpenACC code gets data-region advice, plain CUDA gets neither."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REAL_DIR, analysis, requires_real, scenario_analysis, slow_but
from nsys_diagnose.diagnosis.stacks import detect_stack
from nsys_diagnose.facts.compute import FactResult, FactSet
from nsys_diagnose.facts.catalog import Fact
from nsys_diagnose.fixtures import _kernels as K
from nsys_diagnose.fixtures import generator as gen
from nsys_diagnose.fixtures._export import ERA_2024, H100_SXM, Proc
from nsys_diagnose.reports.render import render

# Advice that only means something to an LLM-serving engine.
SERVING_ADVICE = re.compile(r"enforce-eager|cuda-graph-max-bs|max_num_seqs|max-num-seqs|max-running-requests|"
                            r"\bvLLM\b|\bSGLang\b")
# SGLang's own serving flags (https://docs.sglang.ai/advanced_features/server_arguments.html).
SGLANG_FLAGS = re.compile(r"--disable-overlap-schedule|--max-running-requests|--cuda-graph-max-bs|"
                          r"--disable-cuda-graph|\bSGLang\b")
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"


def _facts(rows: list[dict]) -> FactSet:
    fact = Fact(name="software_stack", sql="", path="software_stack.sql")
    return FactSet({"software_stack": FactResult(fact, ["stack", "source", "matches", "time_share", "example"], rows)})


def test_the_most_specific_stack_wins_and_no_evidence_means_plain_cuda():
    rows = [{"stack": "pytorch", "source": "kernels", "matches": 900, "time_share": 0.7, "example": "at::native::x"},
            {"stack": "vllm", "source": "kernels", "matches": 40, "time_share": 0.1, "example": "vllm::rms_norm"}]
    stack = detect_stack(_facts(rows))
    assert (stack.name, stack.lineage, stack.also) == ("vllm", ["vllm", "pytorch"], ["pytorch"])
    assert stack.evidence == ["40 kernels, 10 % of kernel time, e.g. vllm::rms_norm"]
    plain = detect_stack(_facts([]))
    assert (plain.name, plain.lineage) == ("cuda", ["cuda"])


def test_a_process_that_launched_no_gpu_work_never_decides_the_stack():
    rows = [{"stack": "pytorch", "source": "kernels", "matches": 900, "time_share": 0.7, "example": "at::native::x"},
            {"stack": "sglang", "source": "host", "matches": 2, "time_share": None, "example": "sglang::detokenizer"}]
    stack = detect_stack(_facts(rows))
    assert (stack.name, stack.also) == ("pytorch", [])
    assert stack.evidence[-1] == ("also on the host, not counted (no GPU work): 2 processes named like SGLang, "
                                  "e.g. sglang::detokenizer")
    assert detect_stack(_facts(rows[1:])).name == "cuda"


# PyTorch's own kernels in place of the vLLM custom ops of the generator's Llama decode step.
_TORCH_OPS = {K.RMS_NORM: K.MEAN, K.FUSED_ADD_RMS_NORM: K.ADD, K.ROTARY_EMBEDDING: K.MUL, K.ACT_AND_MUL: K.MUL}


def _decode_beside_an_idle_detokenizer(path: Path, launcher: str) -> Path:
    """A process named `launcher` runs 20 eager decode steps of PyTorch kernels (one launch per kernel, ~0.5 ms of
    host work between steps: launch-bound and host-bound); an `sglang::detokenizer` process on the same host
    opens an NVTX range 'sglang detokenize' after each step and issues no CUDA call."""
    x = gen._new_export(ERA_2024, H100_SXM, 1, command=("python3", ["decode.py"]))
    p = Proc(48213, launcher)
    x.procs.append(p)
    idle = Proc(48301, "sglang::detokenizer")
    x.extra_processes = [(idle.pid, idle.name)]
    rng = random.Random(0)
    h = gen.Host(x, p, rng, gen._t0(rng))
    for _ in range(20):
        gen.eager_decode_step(h, 8, swap=_TORCH_OPS, label="decode_step")
        x.nvtx(idle, h.t - 5_000, h.t, text="sglang detokenize")
        h.pause(400_000, 600_000)
    gen._finish(x, path)
    return path


@pytest.mark.slow
def test_an_idle_sglang_process_beside_a_pytorch_script_leaves_it_pytorch(tmp_path):
    """On a shared host an SGLang detokenizer that did no CUDA work is context: the stack is read from the
    process that launched the kernels, and its launch- and host-bound advice carries no SGLang flag."""
    facts, report = analysis(_decode_beside_an_idle_detokenizer(tmp_path / "torch.sqlite", "python3"))
    stack = report.profile.stack
    assert (stack.name, stack.also) == ("pytorch", [])
    assert stack.evidence[-1].startswith("also on the host, not counted (no GPU work): 1 process named like SGLang")
    assert {(r["stack"], r["source"]) for r in facts.rows("software_stack")} == {("pytorch", "kernels"),
                                                                                 ("sglang", "host")}
    found = {f.rule: f for f in report.findings}
    assert {"launch-bound", "host-bound"} <= set(found)
    for rule, torch_step in (("launch-bound", "torch.compile"), ("host-bound", "torch.compile(mode=")):
        assert torch_step in found[rule].remediation[0], rule        # PyTorch's own step comes first
        assert not [s for s in found[rule].remediation if SGLANG_FLAGS.search(s)], rule
    assert not SGLANG_FLAGS.search(render(report, "md"))


def test_the_sglang_scheduler_launching_the_kernels_stays_sglang(tmp_path):
    _, report = analysis(_decode_beside_an_idle_detokenizer(tmp_path / "sglang.sqlite", "sglang::scheduler"))
    stack = report.profile.stack
    assert (stack.name, stack.lineage, stack.also) == ("sglang", ["sglang", "pytorch"], ["pytorch"])
    assert stack.evidence[0] == "1 processes, e.g. sglang::scheduler"
    found = {f.rule: f for f in report.findings}
    assert "--max-running-requests" in found["launch-bound"].remediation[0]
    assert "--disable-overlap-schedule" in found["host-bound"].remediation[0]


@pytest.mark.parametrize("scenario, stack", [("nvtx_only", "tensorrt"), ("empty_capture", "cuda")])
def test_exports_without_gpu_work_read_every_process(scenario, stack):
    """No process launched GPU work (TensorRT layer ranges only, an empty capture): nothing is set aside."""
    facts, report = scenario_analysis(scenario)
    assert report.profile.stack.name == stack
    assert all(r["source"] != "host" for r in facts.rows("software_stack"))


def test_a_vllm_decode_gets_vllm_steps_first_then_the_generic_ones():
    _, report = scenario_analysis("eager_decode")
    assert report.profile.stack.name == "vllm"
    launch = next(f for f in report.findings if f.rule == "launch-bound")
    assert "--enforce-eager" in launch.remediation[0]
    assert "torch.compile" in launch.remediation[1]             # vLLM runs on PyTorch: its steps come next
    assert launch.remediation[2].startswith("Capture the repeated sequence of kernels in a CUDA graph")


@pytest.mark.parametrize("scenario, stack", slow_but(
    [("alloc_churn", "cuda"), ("graph_host_gaps", "cuda"), ("uvm_migration_storm", "cuda"),
     ("tiny_kernels_queued", "openacc")], "graph_host_gaps", "tiny_kernels_queued"))
def test_profiles_of_other_stacks_never_get_serving_advice(scenario, stack):
    _, report = scenario_analysis(scenario)
    assert report.profile.stack.name == stack
    steps = [s for f in report.findings for s in f.remediation]
    assert steps and not [s for s in steps if SERVING_ADVICE.search(s)]


def test_every_format_names_the_stack():
    _, report = scenario_analysis("tiny_kernels_queued")
    for fmt in ("md", "terminal", "html"):
        assert "OpenACC (NVHPC)" in render(report, fmt), fmt
    assert json.loads(render(report, "json"))["profile"]["stack"]["name"] == "openacc"


@pytest.mark.slow
def test_a_team_rule_adds_steps_for_one_stack_and_an_unknown_stack_is_named(tmp_path):
    rule = """\
id: acme/launches
title: Launch budget
category: launch-bound
severity: warning
fact: launch_overhead
when:
  - overhead_ratio > 0.1
message: "GPU {{ row.device_id }}"
why: Because.
remediation: [Generic step.]
stack_remediation:
  vllm: ["Acme vLLM step for GPU {{ row.device_id }}."]
  openacc: [Acme OpenACC step.]
"""
    d = tmp_path / "pack"
    d.mkdir()
    (d / "launches.yaml").write_text(rule)
    run = [sys.executable, "-m", "nsys_diagnose.cli.main"]
    p = subprocess.run([*run, str(EXAMPLE), "--rule-dir", str(d), "-f", "json", "--no-cache"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 1), p.stderr
    finding = next(f for f in json.loads(p.stdout)["findings"] if f["rule"] == "acme/launches")
    assert finding["remediation"] == ["Acme vLLM step for GPU 0.", "Generic step."]
    (d / "launches.yaml").write_text(rule.replace("  openacc:", "  openac:"))
    p = subprocess.run([*run, "rules", "check", "--rule-dir", str(d)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert "openac" in p.stdout + p.stderr and "openacc" in p.stdout + p.stderr


@requires_real
@pytest.mark.parametrize("export, stack", [("PolPuigPuy__OpenACC_Project", "openacc"),
                                           ("RajaATAli__SC23-OpenMP-GPU-tutorial", "openmp"),
                                           ("Sh1mwww__llama3-inference", "pytorch"),
                                           ("kmcho2019__Rodinia_Gaussian", "cuda")])
def test_real_exports_get_their_own_stack_and_no_serving_flags(export, stack):
    path = next(REAL_DIR.glob(f"{export}*.sqlite"))
    _, report = analysis(path)
    assert report.profile.stack.name == stack
    assert not SERVING_ADVICE.search(render(report, "md"))


def test_the_stack_example_is_the_same_name_on_every_run_when_names_tie():
    """Two kernels (or NVTX labels) with the same time: the example shown is the first by name, not whichever
    DuckDB met first, so reports and `compare` do not change between runs of one profile."""
    import duckdb

    from nsys_diagnose.facts.loading import load_facts
    from nsys_diagnose.facts.catalog import render_sql
    from nsys_diagnose.pack.stacks import define_stacks
    from nsys_diagnose.reading.canonical import VIEWS

    sql = render_sql(load_facts()["software_stack"])
    examples = set()
    for threads in (1, 4):
        for order in ("d", "c", "b", "a"), ("a", "b", "c", "d"), ("b", "d", "a", "c"):
            con = duckdb.connect(config={"threads": threads})
            for view in ("kernels", "nvtx_ranges", "processes", "memcpys", "memsets", "graph_launches"):
                con.execute(VIEWS[view].ddl())
            con.execute("CREATE TABLE _phase_ranges (phase VARCHAR)")  # the helper fact serves_tokens reads
            con.execute("CREATE VIEW _kernels_by_id AS SELECT * FROM kernels")  # as the runner defines it
            define_stacks(con, None)  # stack_of_kernel() ... and _stacks, as the runner defines them
            con.executemany("INSERT INTO kernels (name, start_ns, end_ns, pid) VALUES (?, ?, ?, 7)",
                            [(f"vllm::kernel_{c}", 1_000 * i, 1_000 * i + 500) for i, c in enumerate(order)])
            con.executemany("INSERT INTO nvtx_ranges (text, pid) VALUES (?, 7)", [(f"vllm step {c}",) for c in order])
            rows = con.execute(f"SELECT source, example FROM ({sql}) WHERE stack = 'vllm'").fetchall()
            examples.add(tuple(sorted(rows)))
            con.close()
    assert examples == {(("kernels", "vllm::kernel_a"), ("nvtx", " vllm step a"))}
