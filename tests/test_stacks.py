"""The report names the software stack it read from the export, and advice is written for that stack: serving
flags reach vLLM and SGLang profiles only, OpenACC code gets data-region advice, plain CUDA gets neither."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REAL_DIR, analysis, requires_real, scenario_analysis
from nsys_diagnose.diagnosis.stacks import detect_stack
from nsys_diagnose.facts.compute import FactResult, FactSet
from nsys_diagnose.facts import Fact
from nsys_diagnose.reports.render import render

# Advice that only means something to an LLM-serving engine.
SERVING_ADVICE = re.compile(r"enforce-eager|cuda-graph-max-bs|max_num_seqs|max-num-seqs|max-running-requests|"
                            r"\bvLLM\b|\bSGLang\b")
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


def test_a_vllm_decode_gets_vllm_steps_first_then_the_generic_ones():
    _, report = scenario_analysis("eager_decode")
    assert report.profile.stack.name == "vllm"
    launch = next(f for f in report.findings if f.rule == "launch-bound")
    assert "--enforce-eager" in launch.remediation[0]
    assert "torch.compile" in launch.remediation[1]             # vLLM runs on PyTorch: its steps come next
    assert launch.remediation[2].startswith("Capture the repeated sequence of kernels in a CUDA graph")


@pytest.mark.parametrize("scenario, stack", [("alloc_churn", "cuda"), ("graph_host_gaps", "cuda"),
                                             ("uvm_migration_storm", "cuda"), ("tiny_kernels_queued", "openacc")])
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

    from nsys_diagnose.facts import load_facts, render_sql

    sql = render_sql(load_facts()["software_stack"])
    examples = set()
    for threads in (1, 4):
        for order in ("d", "c", "b", "a"), ("a", "b", "c", "d"), ("b", "d", "a", "c"):
            con = duckdb.connect(config={"threads": threads})
            con.execute("CREATE TABLE kernels (name VARCHAR, start_ns BIGINT, end_ns BIGINT)")
            con.executemany("INSERT INTO kernels VALUES (?, ?, ?)",
                            [(f"vllm::kernel_{c}", 1_000 * i, 1_000 * i + 500) for i, c in enumerate(order)])
            con.execute("CREATE TABLE nvtx_ranges (text VARCHAR, domain VARCHAR)")
            con.executemany("INSERT INTO nvtx_ranges VALUES (?, NULL)", [(f"vllm step {c}",) for c in order])
            con.execute("CREATE TABLE processes (name VARCHAR)")
            rows = con.execute(f"SELECT source, example FROM ({sql}) WHERE stack = 'vllm'").fetchall()
            examples.add(tuple(sorted(rows)))
            con.close()
    assert examples == {(("kernels", "vllm::kernel_a"), ("nvtx", " vllm step a"))}
