-- @fact _call_phases
-- @whole-run
-- @materialize
-- @doc The inference phase of each CUDA API call made inside a phase range (_phase_ranges): the phase of the
-- @doc innermost phase range open on the calling thread when the call started, as for _phase_kernels. Calls of
-- @doc threads that opened no phase range, and calls outside every phase range, are not listed: they belong to
-- @doc the phase 'other'. The GPU operations a call issued share its process and correlation id, so this one
-- @doc table puts calls, kernels, copies and the idle gaps before them in their phase (engine/facts/scopes.py).
-- @needs _phase_ranges
-- @column global_tid Thread of the call.
-- @column pid Process.
-- @column start_ns Call start (ns).
-- @column correlation_id Correlation id of the call (and of the GPU work it issued).
-- @column phase Phase name.
WITH calls AS (
    SELECT global_tid, pid, start_ns, correlation_id FROM _api_calls_by_id
    WHERE global_tid IN (SELECT DISTINCT global_tid FROM _phase_ranges)
)
SELECT c.global_tid, c.pid, c.start_ns, c.correlation_id, r.phase
FROM calls c ASOF JOIN _phase_ranges r ON r.global_tid = c.global_tid AND c.start_ns >= r.start_ns
WHERE r.end_ns >= c.start_ns
