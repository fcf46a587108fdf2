-- @fact _phase_ranges
-- @materialize
-- @doc The ranges that put work in an inference phase: the NVTX ranges whose text names a phase (_nvtx_phases),
-- @doc and, when no NVTX text names one, the steps whose phase was inferred from their shape (_steps). An inferred
-- @doc step counts over its period, from its start to the next step's, so the ranges that follow a step's forward
-- @doc pass on its thread (vLLM V1's `gpu_model_runner: sample`, `postprocess`) go with it.
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
SELECT global_tid, pid, start_ns, start_ns + period_ns, phase, coalesce(text, source || ' step'), true
FROM _steps WHERE phase_source = 'inferred'
