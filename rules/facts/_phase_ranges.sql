-- @fact _phase_ranges
-- @whole-run
-- @materialize
-- @doc The ranges that put work in an inference phase: the NVTX ranges whose text names a phase (_nvtx_phases),
-- @doc and, when no NVTX text names one, the steps whose phase was inferred from their shape (_steps). An inferred
-- @doc step counts from its start to the end of its iteration of the loop (_steps.span_end_ns), so the ranges that
-- @doc follow a step's forward pass on its thread (vLLM V1's `gpu_model_runner: sample`) go with it.
-- @needs _nvtx_phases _steps
-- @column global_tid Thread that opened the range (or made the step's calls).
-- @column pid Process.
-- @column start_ns Range start (ns).
-- @column end_ns Range end (ns).
-- @column phase Phase name (prefill, decode, or a configured one).
-- @column text The range's text; for an inferred step found from calls, '<source> step' (sync step, graph-launch step).
-- @column inferred True for a step whose phase was inferred from its shape.
SELECT global_tid, pid, start_ns, end_ns, phase, text, false AS inferred FROM _nvtx_phases
UNION ALL
SELECT global_tid, pid, start_ns, span_end_ns, phase, coalesce(text, source || ' step'), true
FROM _steps WHERE phase_source = 'inferred'
