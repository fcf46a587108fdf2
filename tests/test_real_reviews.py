"""The real exports read as a performance engineer reads them: a cause that costs tens of percent is named whatever
its event count, the advice beside the evidence never contradicts it, and rules whose input was not captured are skipped
with the reason. Each test names the export it reads (SOURCES.md describes them)."""

from __future__ import annotations

import json
import shutil

import pytest

from cli_in_process import run_cli
from conftest import REAL_DIR, analysis, real, requires_real
from nsys_diagnose.base.vocabulary import IDLE_CAUSES

pytestmark = requires_real


def _finding(report, rule):
    found = [f for f in report.findings if f.rule == rule]
    assert found, f"{rule} did not fire; findings: {[f.rule for f in report.findings]}"
    return found[0]


def _advice(finding) -> str:
    return "\n".join(finding.remediation)


def test_clue_host_work_formatting_output_is_the_verdict_not_page_migrations():
    """mariamiiiiii…clue-clustering: the gaps end in migrations, but its CPU samples there are the program's own
    printf formatting: host work, not page-fault waits (migrations cost ~3 % of the window)."""
    r = analysis(real("clue-clustering"))[1]
    assert r.verdict.primary == "host-bound" and r.verdict.rule == "host-bound"
    host = _finding(r, "host-bound")
    assert host.severity == "warning" and host.impact > 0.6
    assert "printf" in host.message
    assert all(f.rule != "uvm-migration-storm" or f.impact < 0.1 for f in r.findings)


def test_one_kernel_of_one_block_and_fault_migrations_back_to_the_host():
    """ayanamesu…um-memcpy-storm: its 2,048 HtoD migrations are the program's own prefetches; the cost is 12,288
    fault-driven migrations back to the host. Its one kernel runs one 256-thread block on a 108-SM A100."""
    r = analysis(real("um-memcpy-storm"))[1]
    uvm = _finding(r, "uvm-migration-storm")
    assert (uvm.row["uvm_prefetch_count"], uvm.row["uvm_fault_to_host_count"]) == (2048, 12288)
    assert uvm.row["uvm_fault_to_device_count"] == 0
    assert "12,288 of them are driven by page faults, all back to the host" in uvm.message
    advice = _advice(uvm)
    assert "cudaCpuDeviceId" in advice
    assert "to the GPU with cudaMemPrefetchAsync" not in advice and "(to the GPU before kernels" not in advice
    grids = _finding(r, "small-grids")
    assert grids.row["device_kernel_count"] == 1 and grids.row["sm_count"] == 108
    assert grids.severity == "warning"


def test_pinned_copies_are_not_told_to_pin():
    """GindaChen…h100_2gpu_1s: PCIe-bound with 23.7 GiB pinned and 1.5 KiB pageable per GPU."""
    r = analysis(real("h100_2gpu_1s"))[1]
    pcie = _finding(r, "pcie-bound")
    assert pcie.row["pageable_share"] < 1e-6
    advice = _advice(pcie)
    assert "Pin host tensors" not in advice and "Use pinned (page-locked) host buffers" not in advice
    assert advice.startswith("The copies are already pinned")


def test_openmp_copies_lead_with_a_target_data_region():
    """RajaATAli…openmp-offload: 95 GiB of pageable copies from OpenMP target regions."""
    r = analysis(real("openmp-offload"))[1]
    pageable = _finding(r, "pageable-memory-copies")
    assert "pcie-bound" in pageable.agrees  # the same copies at the same cost: one finding
    first = pageable.remediation[0]
    assert "target data" in first and "cudaHostAlloc" not in first, first


def test_openacc_launch_gaps_name_the_allocation_inside_them():
    """PolPuigPuy…openacc: each ~50 µs gap holds a cuMemAlloc (1,948 calls, no free): per-iteration data-region
    overhead, which the finding names and the first step fixes."""
    r = analysis(real("PolPuigPuy"))[1]
    launch = _finding(r, "launch-bound")
    assert 0.1 < launch.row["launch_gap_allocation_share"] < 0.2
    assert "inside allocation calls (cudaMalloc, cuMemAlloc ...) between the launches" in launch.message
    assert "data region" in launch.remediation[0]
    assert not [ref for ref in launch.references if "vllm" in ref or "sglang" in ref]


def test_absent_tables_skip_their_rules_instead_of_passing():
    """YoonKyonghwan…tensorrt-nvtx-only: no CUDA tables at all."""
    r = analysis(real("nvtx-only"))[1]
    skipped = {o.rule: o.reason for o in r.skipped}
    passed = {o.rule for o in r.passed}
    for rule in ("pcie-bound", "uvm-migration-storm", "pageable-memory-copies", "gpu-starvation"):
        assert rule in skipped and rule not in passed, rule
        assert "the export has no CUPTI_ACTIVITY_KIND" in skipped[rule]


def test_headline_and_finding_print_the_same_share():
    """florianmattana…gemm: nothing in flight for 99.8 % of a 617 s capture (one 616 s stretch; the 0.34 s and 92 ms
    of CPU work around it are no wait, its steps being found from its syncs); the headline must not say 100 %."""
    r = analysis(real("florianmattana"))[1]
    idle = _finding(r, "server-idle")
    assert "99.8 %" in idle.message
    assert "100 % of the capture" not in r.verdict.headline and "Nothing in flight for 99.8 %" in r.verdict.headline


@pytest.mark.parametrize("path", sorted(REAL_DIR.glob("*.sqlite")) if REAL_DIR.is_dir() else [],
                         ids=lambda p: p.name.split("__")[0])
def test_the_idle_symptom_is_never_the_verdict_when_a_traced_cause_explains_it(path):
    r = analysis(path)[1]
    if r.verdict.primary != "low-utilization":
        return
    gpus = r.facts.get("gpu_utilization", [])
    for g in gpus:
        idle = sum(g.get(c.column) or 0 for c in IDLE_CAUSES)
        traced = max((g.get(c.column) or 0 for c in IDLE_CAUSES if c.key != "other"), default=0)
        assert idle == 0 or traced / idle <= 0.5, g


@pytest.mark.skipif(shutil.which("nsys") is None, reason="no nsys on PATH to convert the .nsys-rep report")
def test_openacc_cublas_report_is_start_up_then_a_busy_gpu():
    """teektonik…openacc-cublas.nsys-rep: 735 ms of one-off set-up before the first kernel (cudaFree 434.5 ms, the
    context's creation, a second cudaFree 243 ms, cuMemHostAlloc 25 ms, the cudaMalloc of the data), then 209
    kernels in 9.8 ms that keep the GPU ~93 % busy. The allocations all come before the loop, so no data region
    would remove them: the start-up is reported apart and the loop has no bottleneck."""
    report = next(REAL_DIR.glob("teektonik*.nsys-rep"))
    done = run_cli(str(report), "--no-cache", "-f", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    startup = data["startup"]
    assert startup["found_by"] == "shape" and startup["startup_fraction"] > 0.95, startup
    assert "cudaFree 434.5 ms" in startup["line"]
    assert data["verdict"]["rule"] is None and data["metrics"]["gpu_utilization"] > 0.9, data["verdict"]
    assert not any(f["rule"] == "allocator-churn" for f in data["findings"])
