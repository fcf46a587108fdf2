"""The default NVTX phase patterns: which range texts count as a prefill or a decode step. A phase word counts
only as a whole word (non-letters around it), so compiler and model-module ranges that merely contain the
letters are no steps, and every label the serving stacks write still is."""

from __future__ import annotations

import duckdb
import pytest

from nsys_diagnose.facts.compute import _define_phases

from conftest import analysis, real, requires_real

CASES = [
    # the serving stacks' step labels and hand-written ones
    ("prefill", "prefill"), ("Prefill", "prefill"), ("prefill_step", "prefill"), ("chunked prefill 3", "prefill"),
    ("extend", "prefill"), ("forward_extend", "prefill"), ("prompt", "prefill"),
    ("context_phase", "prefill"), ("context phase", "prefill"), ("context", "prefill"),
    ("[Executor] _forward_step 12: 2 ctx reqs, 30 gen reqs", "prefill"),
    ("[Executor] _forward_step 13: 0 ctx reqs, 32 gen reqs", "decode"),
    ("decode", "decode"), ("DECODE", "decode"), ("decode_step", "decode"), ("forward_decode", "decode"),
    ("LLM@decode_all", "decode"), ("decode 12", "decode"), ("speculative decoding", "decode"),
    ("generation", "decode"), ("generation_phase", "decode"), ("generation step", "decode"),
    ("prefill_decode", "prefill"),  # names both: the first phase wins
    # ranges that only contain the letters: nvFuser's compiler passes, model modules, other work
    ("LoopNestGenerator", None), ("GpuLower::Lower::LoopNestGenerator::loweredExprs", None),
    ("generateCudaKernel", None), ("CodeGenerator", None), ("LlamaDecoderLayer", None),
    ("TransformerDecoder.forward", None), ("ExecutionContext::execute", None), ("create_context", None),
    ("code_generation", None), ("extended_attention", None), ("execute_model", None), ("aten::mm", None),
    # Hugging Face's generate() is the whole loop, prefill and every decode step: not one step
    ("generate", None), ("model.generate", None),
]


@pytest.fixture(scope="module")
def phase_of():
    con = duckdb.connect()
    _define_phases(con, None)  # the defaults, as DuckDB runs them on every export
    yield lambda text: con.execute("SELECT phase_of(?)", [text]).fetchone()[0]
    con.close()


@pytest.mark.parametrize(("text", "phase"), CASES, ids=[t for t, _ in CASES])
def test_a_range_text_is_in_the_phase_its_words_name(phase_of, text, phase) -> None:
    assert phase_of(text) == phase


@requires_real
def test_nvfuser_compiler_ranges_are_no_decode_steps() -> None:
    # NVIDIA__Fuser__report1__2025.1.1_H200_pytorch-nvfuser.sqlite: 6 `LoopNestGenerator` and 6
    # `generateCudaKernel` ranges once read as 12 decode steps, and fed the step time a compare gate checks.
    facts, report = analysis(real("NVIDIA__Fuser__report1__2025.1.1_H200"))
    assert [p for p in facts.rows("phases") if p["range_count"]] == []
    assert report.throughput is None or report.throughput.decode_steps is None
    assert facts.phases == {}
