"""Where GPU time goes by operation: the classes of rules/vocabulary/operation_classes.yaml on real kernel names, the
breakdown of the LLM-shaped fixtures, the rules that read it (unfused-elementwise, fp32-gemms) and the reports."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from nsys_diagnose.pack.opclasses import OpClassError, define_op_classes, load_operation_classes
from nsys_diagnose.fixtures.generator import SCENARIOS
from nsys_diagnose.reports.charts import CLASS_COLOURS

from cli_in_process import run_cli
from conftest import analysis, real, scenario_analysis, scenario_path, slow_but

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "fixtures" / "examples"
needs_real = pytest.mark.real_exports

# Real kernel names (from the real exports the tests read and the public sources the class file cites) and
# the class each must get; every class of the bundled file appears.
NAMES = {
    "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)": "communication",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)": "communication",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, (int)2>(vllm::RankData *, vllm::RankSignals, "
    "vllm::Signal *, __nv_bfloat16 *, int, int)": "communication",
    "fused_moe_kernel": "moe",
    "void vllm::moe::topkGatingSoftmax<(int)8, (int)128, (int)4, (int)16, int>(const float *, const bool *, float *, "
    "int, int *, int *, int, int, int)": "moe",
    "void vllm::moe::moe_align_block_size_kernel<int>(int *, int *, int *, int *, int, int, int, int, unsigned long)":
        "moe",
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, "
    "cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, cutlass::bfloat16_t>>, (bool)0, "
    "(bool)1, (bool)0, (bool)0, (bool)0, (bool)1, (bool)0, (bool)0>(flash::Flash_fwd_params)": "attention",
    "void vllm::paged_attention_v2_kernel<__nv_bfloat16, __nv_bfloat16, (int)128, (int)16, (int)128, "
    "(vllm::Fp8KVCacheDataType)0, (bool)0, (int)512>(float *)": "attention",
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, (unsigned int)2>(void)":
        "attention",
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel"
    "__5x_cublas": "gemm",
    "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN": "gemm",
    "ampere_sgemm_128x64_nn": "gemm",
    "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn": "gemm",
    "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaPipelined<cutlass::gemm::"
    "GemmShape<(int)128, (int)128, (int)32>>>>(T1::Params)": "gemm",
    "sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_"
    "tensor16x8x16_t1r3s3_aACCESS_execute_kernel_trt": "gemm",
    "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, (int)128, (int)16, (int)4, (int)4, "
    "(bool)0, (bool)0>(T12, T5, T5)": "gemm",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
    "(const T1 *, const T1 *, T2 *, T2 *, const long *, int, int, int, int, int, const float *, const float *)":
        "kv-cache",
    "void vllm::scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(T2 *, const T1 *, const float *, long)":
        "quantize",
    "void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(T2 *, float *)":
        "quantize",
    "void at::native::<unnamed>::vectorized_layer_norm_kernel<float, float, (bool)0>(int, T2, const T1 *, "
    "const T1 *, const T1 *, T2 *, T2 *, T1 *)": "norm",
    "std::enable_if<(T2 > 0) && vllm::_typeConvert<T1>::exists, void>::type vllm::fused_add_rms_norm_kernel"
    "<c10::BFloat16, (int)8>(T1 *, T1 *, const T1 *, float, int, int)": "norm",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0": "norm",
    "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, (bool)1>(T1 *, const T1 *, int)":
        "activation",
    "void at::native::vectorized_elementwise_kernel<(int)8, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase &, "
    "at::native::GeluType)::[lambda() (instance 2)], std::array<char *, (unsigned long)2>>(int, T2, T3)": "activation",
    "void vllm::rotary_embedding_kernel<c10::BFloat16, (bool)1>(const long *, T1 *, T1 *, const T1 *, int, long, "
    "long, int, int, int)": "rotary",
    "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
    "unsigned int, long, (int)4, (int)4>>(T3)": "sampling",
    "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<(unsigned int)1024>(float *)": "sampling",
    "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::DeviceRadixSortPolicy>(void)":
        "sampling",
    "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
    "float, float>, unsigned int, float, (int)4>>(T3)": "reduction",
    "void <unnamed>::softmax_warp_forward<float, float, float, (int)10, (bool)0, (bool)0>(T2 *, const T1 *, int, int, "
    "int, const bool *, int, bool)": "reduction",
    "triton_red_fused_sum_0": "reduction",
    "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, std::array<char *, "
    "(unsigned long)3>>(int, T2, T3)": "elementwise",
    "void at::native::<unnamed>::CatArrayBatchedCopy_vectorized<at::native::<unnamed>::OpaqueType<(unsigned int)2>, "
    "unsigned int, (int)1, (int)128, (int)1, (int)16, (int)8>(char *)": "elementwise",
    "triton_poi_fused_add_mul_0": "elementwise",
    "<unnamed>::nvfuser_pointwise_f0_c1_r0_g0(<unnamed>::Tensor<float, (int)2, (int)2>)": "elementwise",
    # torch.randn: random-number generation, not glue to fuse
    "void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4, void at::native::"
    "templates::cuda::normal_and_transform<float, float, at::CUDAGeneratorImpl *>(T1)>(long, at::PhiloxCudaState)":
        "random",
    "Fan2(float *, float *, float *, int, int, int)": "other",
    "__pgi_uacc_cuda_fill_42_gpu": "other",
}
PRECISIONS = {
    "ampere_sgemm_128x64_tn": "fp32",
    "cutlass_80_simt_sgemm_128x128_8x4_nn_align1": "fp32",
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel"
    "__5x_cublas": "fp32",
    "volta_sgemm_128x64_nn": "fp32",
    "ampere_s1688gemm_128x128_ldg8_stages_32x3_tn": "tf32",
    "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn": "fp16/bf16",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
    "__5x_cublas": "fp16/bf16",
    "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN": "fp16/bf16",
    "volta_h884gemm_64x64_ldg8_nn": "fp16/bf16",
    "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_kernel__5x_cublas": "fp8",
    "sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize128x128x64_stage3_warpsize2x2x1_tensor16x8x32_execute_kernel": "int8",
}


def _classify(names: list[str], rule_dirs: list[Path] | None = None) -> tuple[list[str], list[str]]:
    con = duckdb.connect()
    define_op_classes(con, load_operation_classes(rule_dirs))
    con.execute("CREATE TABLE n AS SELECT * FROM unnest(?::VARCHAR[]) t(name)", [names])
    rows = con.execute("SELECT op_class_of(name), gemm_precision_of(name) FROM n").fetchall()
    return [r[0] for r in rows], [r[1] for r in rows]


def test_real_kernel_names_get_their_class_and_every_class_is_covered():
    classes, _ = _classify(list(NAMES))
    assert dict(zip(NAMES, classes)) == NAMES
    bundled = {c.name for c in load_operation_classes().classes}
    assert bundled | {"other"} == set(NAMES.values())


def test_gemm_names_say_their_precision():
    _, precisions = _classify(list(PRECISIONS))
    assert dict(zip(PRECISIONS, precisions)) == PRECISIONS


# The LLM-shaped exports: the bundled examples and the generated LLM scenarios.
LLM_SCENARIOS = ("eager_decode", "graph_decode_node", "prefill_decode_nvtx", "prefill_heavy_eager_decode",
                 "healthy_prefill", "latency_bound_decode", "small_grid_decode", "nvlink_saturated_tp2",
                 "eager_unfused_glue", "long_context_decode", "fp32_sgemm_a100", "bf16_xmma_a100")


def _classified(rows: list[dict]) -> float:
    kernel_ns = sum(r["total_ns"] for r in rows if r["share_of_kernel_time"] is not None)
    other = sum(r["total_ns"] for r in rows if r["op_class"] == "other")
    return 1 - other / kernel_ns


@pytest.mark.parametrize("example", slow_but(sorted(p.name for p in EXAMPLES.glob("*.sqlite")), "eager_decode.sqlite"))
def test_bundled_examples_are_at_least_90_percent_classified(example):
    facts, _ = analysis(EXAMPLES / example)
    assert _classified(facts.rows("operation_classes")) >= 0.9


@pytest.mark.parametrize("name", slow_but(LLM_SCENARIOS, "prefill_decode_nvtx"))
def test_llm_scenarios_are_at_least_90_percent_classified(name):
    facts, _ = scenario_analysis(name)
    rows = facts.rows("operation_classes")
    assert _classified(rows) >= 0.9
    for device in {r["device_id"] for r in rows}:  # the shares of one GPU add up to its whole time
        assert sum(r["share"] for r in rows if r["device_id"] == device) == pytest.approx(1.0)


def _shares(rows: list[dict], device: int = 0) -> dict[str, float]:
    return {r["op_class"]: r["share"] for r in rows if r["device_id"] == device}


def test_eager_glue_run_makes_unfused_elementwise_primary_with_the_right_share():
    facts, report = scenario_analysis("eager_unfused_glue")
    truth = SCENARIOS["eager_unfused_glue"].truth
    assert report.verdict.rule == "unfused-elementwise" and report.verdict.primary == "fusion"
    shares = _shares(facts.rows("operation_classes"))
    lo, hi = truth["norm_elementwise_share"]
    assert lo <= shares["norm"] + shares["elementwise"] <= hi
    finding = next(f for f in report.findings if f.rule == "unfused-elementwise")
    lo, hi = truth["glue_share"]
    assert lo <= finding.row["glue_share"] <= hi
    assert f"{finding.row['glue_share'] * 100:.1f} %" in finding.message
    # the fusion candidates are the runs that repeat in every layer: residual add + LayerNorm (twice per layer),
    # then the eager rotary embedding
    top, second = finding.row["top_sequences"][:2]
    assert top["sequence"] == "CUDAFunctor_add → vectorized_layer_norm_kernel"
    assert top["repeats"] == 2 * truth["steps"] * 32
    assert second["sequence"] == ("MulFunctor → neg_kernel_cuda → CatArrayBatchedCopy_vectorized → MulFunctor → "
                                  "CUDAFunctor_add → direct_copy_kernel_cuda")
    assert second["repeats"] == truth["steps"] * 32
    assert any("torch.compile" in step for step in finding.remediation)


@pytest.mark.parametrize("name", slow_but(["graph_decode_node", "healthy_graph_decode", "long_context_decode",
                                           "healthy_prefill"], "graph_decode_node", "healthy_graph_decode"))
def test_healthy_runs_keep_unfused_elementwise_quiet(name):
    _, report = scenario_analysis(name)
    assert "unfused-elementwise" not in {f.rule for f in report.findings}


def test_long_context_decode_breakdown_leads_with_attention():
    facts, report = scenario_analysis("long_context_decode")
    lo, hi = SCENARIOS["long_context_decode"].truth["attention_share"]
    first = facts.rows("operation_classes")[0]
    assert first["op_class"] == "attention" and lo <= first["share"] <= hi
    assert report.operations[0].line.startswith("run: attention ")
    assert "vllm::paged_attention_v2_kernel" in first["top_kernels"][0]["name"]


def test_fp32_sgemm_run_on_an_a100_gets_fp32_gemms_with_tf32_and_bf16_advice():
    _, report = scenario_analysis("fp32_sgemm_a100")
    finding = next(f for f in report.findings if f.rule == "fp32-gemms")
    assert report.verdict.rule == "fp32-gemms"
    assert finding.row["compute_capability"] == 8.0 and finding.row["precision"] == "fp32"
    lo, hi = SCENARIOS["fp32_sgemm_a100"].truth["gemm_share"]
    assert lo <= finding.row["share"] <= hi
    assert "ampere_sgemm_128x64_tn" in finding.message
    advice = " ".join(finding.remediation)
    assert "TF32" in advice and "bf16" in advice


@pytest.mark.slow
def test_bf16_xmma_run_gets_no_fp32_gemms():
    facts, report = scenario_analysis("bf16_xmma_a100")
    assert "fp32-gemms" not in {f.rule for f in report.findings}
    assert {r["precision"] for r in facts.rows("gemm_precision")} == {"fp16/bf16"}


def test_fp32_gemms_and_tensor_cores_idle_become_one_finding():
    """With GPU metrics, both rules see the same idle tensor cores: one finding carries both proofs."""
    _, report = scenario_analysis("tensor_idle_fp32_prefill")
    rules = [f.rule for f in report.findings]
    assert "fp32-gemms" in rules and "tensor-cores-idle" not in rules
    finding = next(f for f in report.findings if f.rule == "fp32-gemms")
    assert finding.agrees == ["tensor-cores-idle"]
    assert any(e.column == "tensor_active_pct" and "(tensor-cores-idle)" in e.label for e in finding.evidence)


def test_tensor_cores_idle_names_the_gemm_kernels():
    facts, _ = scenario_analysis("tensor_idle_fp32_prefill")
    kernels = facts.first("gpu_metrics_summary")["gemm_kernels"]
    assert {k["name"] for k in kernels} == set(SCENARIOS["tensor_idle_fp32_prefill"].truth["gemm_kernels"])
    assert {k["precision"] for k in kernels} == {"fp32"}


def test_memory_bound_says_which_classes_ran_during_the_dram_bound_samples():
    _, report = scenario_analysis("memory_bound_metrics")
    finding = next(f for f in report.findings if f.rule == "memory-bound")
    classes = {c["op_class"] for c in finding.row["dram_bound_classes"]}
    assert classes <= {"gemm", "attention"} and finding.row["dram_bound_samples"] > 0
    assert "by operation class" in finding.message


@pytest.mark.slow
def test_per_phase_breakdown_gives_one_terminal_line_per_phase(tmp_path):
    _, report = scenario_analysis("prefill_heavy_eager_decode")
    assert [b.phase for b in report.operations] == ["prefill", "decode"]
    assert report.operations[0].line.startswith("prefill: gemm ")
    path = tmp_path / "phed.sqlite"
    from nsys_diagnose.fixtures.generator import generate
    generate("prefill_heavy_eager_decode", path)
    text = run_cli(path, "--no-cache").stdout
    assert "BY OPERATION" in text and "\n  prefill: gemm " in text and "\n  decode: gemm " in text


@pytest.mark.slow
def test_reports_show_the_breakdown_in_every_format(tmp_path):
    from nsys_diagnose.fixtures.generator import generate
    path = tmp_path / "lcd.sqlite"
    generate("long_context_decode", path)
    md = run_cli(path, "--no-cache", "-f", "md").stdout
    assert "### Where the GPU time goes by operation" in md and "| attention | 6" in md
    html = run_cli(path, "--no-cache", "-f", "html").stdout
    assert 'id="operations"' in html and f'fill="{CLASS_COLOURS["attention"]}"' in html
    data = json.loads(run_cli(path, "--no-cache", "-f", "json").stdout)
    assert data["operations"][0]["classes"][0]["op_class"] == "attention"
    assert data["facts"]["operation_classes"][0]["op_class"] == "attention"


def _pack(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "pack"
    d.mkdir(exist_ok=True)
    (d / "operation_classes.yaml").write_text(text)
    return d


def test_a_team_pack_adds_and_overrides_classes(tmp_path):
    pack = _pack(tmp_path, 'classes:\n'
                           '  - {name: acme-fused-mlp, patterns: ["Fan[12]"]}\n'
                           '  - {name: gemm, patterns: ["sgemm"]}\n')
    classes, _ = _classify(["Fan2(float *, float *, float *, int, int, int)", "ampere_sgemm_128x64_nn",
                            "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN"], [pack])
    # the new class is matched first; the overridden gemm class no longer knows nvjet
    assert classes == ["acme-fused-mlp", "gemm", "other"]
    names = [c.name for c in load_operation_classes([pack]).classes]
    assert names[0] == "acme-fused-mlp" and names.index("gemm") == [c.name for c in
                                                                     load_operation_classes().classes].index("gemm") + 1


def test_a_team_class_reaches_the_run_and_every_phase(tmp_path):
    """Each kernel name is classified once per run (_kernel_classes) and every phase reads that classification: a
    team's class that claims every kernel takes all kernel time, in the run and in prefill and decode alike."""
    from nsys_diagnose.facts.compute import compute_facts
    from nsys_diagnose.reading.export import open_export

    pack = _pack(tmp_path, 'classes:\n  - {name: acme-everything, patterns: ["."]}\n')
    with open_export(scenario_path("prefill_decode_nvtx"), cache_dir=tmp_path / "cache") as export:
        facts = compute_facts(export, op_classes=load_operation_classes([pack]), helpers=["_kernel_classes"])
        names = export.con.execute("SELECT count(DISTINCT name_id) FROM kernels").fetchone()[0]
    assert len(facts.rows("_kernel_classes")) == names
    assert {r["op_class"] for r in facts.rows("_kernel_classes")} == {"acme-everything"}
    assert sorted(facts.phases) == ["decode", "prefill"]
    for scope in [facts, *facts.phases.values()]:
        kernel_rows = [r for r in scope.rows("operation_classes") if r["share_of_kernel_time"] is not None]
        assert [r["op_class"] for r in kernel_rows] == ["acme-everything"]
        assert kernel_rows[0]["share_of_kernel_time"] == pytest.approx(1.0)


@pytest.mark.parametrize("text, message", [
    ('classes:\n  - {name: acme, patterns: ["(unclosed"]}\n', "is not a regular expression DuckDB accepts"),
    ('classes:\n  - {name: acme, patterns: ["x"], colour: red}\n', "unknown key 'colour'"),
    ('class:\n  - {name: acme, patterns: ["x"]}\n', "unknown key 'class'"),
    ('classes:\n  - {name: other, patterns: ["x"]}\n', "built-in class"),
    ('classes:\n  - {name: acme, patterns: ["x"], glue: maybe}\n', "glue must be true or false"),
])
def test_a_broken_class_file_is_one_sentence_and_exit_2(tmp_path, text, message):
    pack = _pack(tmp_path, text)
    with pytest.raises(OpClassError, match=message.replace("(", r"\(")):
        load_operation_classes([pack])
    result = run_cli(EXAMPLES / "eager_decode.sqlite", "--no-cache", "--rule-dir", pack)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@needs_real
def test_real_fp32_h100_export_gets_fp32_gemms_from_the_kernel_names():
    """The nsys-ai H100 export runs 86 % of its kernel time in sm80_xmma FFMA (FP32) GEMMs; it records no compute
    capability, and the sm80 kernel names say the GPU has tensor cores."""
    facts, report = analysis(real("h100_2gpu_1s"))
    rows = [r for r in facts.rows("gemm_precision") if r["precision"] == "fp32"]
    assert rows and all(r["share"] > 0.8 and r["compute_capability"] == 8.0 for r in rows)
    assert "fp32-gemms" in {f.rule for f in report.findings}


@needs_real
def test_real_eager_torchrun_export_names_its_unfused_glue():
    facts, report = analysis(real("mfu_2gpu_before"))
    finding = next(f for f in report.findings if f.rule == "unfused-elementwise")
    assert finding.row["glue_share"] > 0.3
    # the eager RMSNorm chain (pow, mean, add, rsqrt, mul) is among the fusion candidates
    chain = "pow_tensor_scalar_kernel_impl → MeanOps → CUDAFunctorOnSelf_add → rsqrt_kernel_cuda"
    assert any(chain in s["sequence"] for s in finding.row["top_sequences"])


def test_a_packs_classes_reach_its_rule_tests(tmp_path):
    """`diagnose rules test PACK` computes the facts with the pack's classes: norm and elementwise patterns that
    match nothing leave the eager glue run with too little glue to fire."""
    pack = _pack(tmp_path, 'classes:\n'
                           '  - {name: norm, glue: true, patterns: ["acme_no_such_kernel"]}\n'
                           '  - {name: elementwise, glue: true, patterns: ["acme_no_such_kernel"]}\n')
    (pack / "glue.test.yaml").write_text("rule: unfused-elementwise\ncases:\n"
                                         "  - {name: no glue by the pack's classes, scenario: eager_unfused_glue, "
                                         "expect: []}\n")
    result = run_cli("rules", "test", pack)
    assert result.returncode == 0 and "1 passed, 0 failed" in result.stdout
