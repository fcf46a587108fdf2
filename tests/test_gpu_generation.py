"""Tensor-core advice follows the GPU's generation (rules fp32-gemms and tensor-cores-idle): FP16 tensor cores from
compute capability 7.0 (Volta, Turing), TF32 and BF16 only from 8.0 (Ampere), as the NVIDIA "Matrix Multiplication
Background" guide lists them; the compute capability is read from the export's GPU table, the kernel names only a
fallback."""

from __future__ import annotations

import re

from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.diagnosis.config import Config, Setting
from nsys_diagnose.fixtures.generator import SCENARIOS

from conftest import real, scenario_analysis, scenario_path

# Advice that needs compute capability 8.0: TF32 matmuls, bf16 (autocast, --dtype bfloat16, model.to(bfloat16)).
AMPERE_ONLY = re.compile(r"tf32|tensorfloat|bf16|bfloat16|float32_matmul_precision", re.IGNORECASE)
FP16 = re.compile(r"float16|fp16|half", re.IGNORECASE)


def _advice(finding) -> str:
    return "\n".join(finding.remediation)


def test_fp32_gemms_on_a_turing_gpu_get_fp16_autocast_advice_and_nothing_ampere_only():
    _, report = scenario_analysis("fp32_gemm_turing")
    assert (report.verdict.primary, report.verdict.rule) == ("compute-bound", "fp32-gemms")
    finding = next(f for f in report.findings if f.rule == "fp32-gemms")
    # cuBLAS's volta_sgemm names say only "7.0 or later"; the GPU table says 7.5
    assert finding.row["compute_capability"] == 7.5 and finding.row["compute_capability_source"] == "export"
    lo, hi = SCENARIOS["fp32_gemm_turing"].truth["gemm_share"]
    assert lo <= finding.row["share"] <= hi
    advice = _advice(finding)
    assert "torch.autocast(device_type='cuda', dtype=torch.float16)" in advice
    assert not AMPERE_ONLY.search(advice), advice
    assert "FP16 tensor cores" in finding.message
    # the share of the GEMM time is a share like the others, not a bare 1
    shown = {e.label: e.display for e in finding.evidence}
    assert shown["Share of the GEMM time"] == "100.0 %"


def test_tensor_cores_idle_on_turing_advises_fp16_not_tf32():
    """With GPU metrics and fp32-gemms switched off, tensor-cores-idle speaks alone and must know Turing too."""
    report = diagnose(scenario_path("metrics_2022_tu10x"),
                      Config(disabled={"fp32-gemms": Setting(True, "test")}), cache=False)
    finding = next(f for f in report.findings if f.rule == "tensor-cores-idle")
    assert finding.row["compute_capability"] == 7.5
    advice = _advice(finding)
    assert FP16.search(advice) and not AMPERE_ONLY.search(advice), advice


def test_the_gpu_metrics_summary_reads_the_compute_capability_from_the_export():
    """tensor-cores-idle conditions its advice on it: an H100 (9.0) keeps TF32 and bf16."""
    _, report = scenario_analysis("tensor_idle_fp32_prefill")
    row = next(r for r in report.facts["gpu_metrics_summary"] if r["device_id"] == 0)
    assert row["compute_capability"] == 9.0


def test_the_real_rtx_2070_super_export_is_told_fp16_not_tf32():
    """MohanadOdema…RTX2070S: a PyTorch CNN whose cuDNN convolutions run FP32 on a Turing GPU (7.5 in its
    TARGET_INFO_GPU)."""
    report = diagnose(real("RTX2070S"), cache=False)
    finding = next(f for f in report.findings if f.rule == "fp32-gemms")
    assert finding.row["compute_capability"] == 7.5 and finding.row["compute_capability_source"] == "export"
    advice = _advice(finding)
    assert FP16.search(advice) and not AMPERE_ONLY.search(advice), advice


def test_a_compute_capability_guessed_from_kernel_names_says_so():
    """GindaChen…h100_2gpu: a time slice without TARGET_INFO_GPU; its sm80 kernels on H100s give only a lower bound."""
    report = diagnose(real("h100_2gpu_1s"), cache=False)
    rows = report.facts["gemm_precision"]
    assert rows and all(r["compute_capability_source"] == "kernel names" for r in rows)
    finding = next((f for f in report.findings if f.rule == "fp32-gemms"), None)
    if finding is not None:
        assert "at least 8.0, guessed from its kernel names" in finding.message
