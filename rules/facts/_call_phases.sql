-- @fact _call_phases
-- @whole-run
-- @materialize
-- @doc The inference phase of each CUDA API call made inside a phase range (_phase_ranges): the phase of the
-- @doc innermost phase range open on the calling thread when the call started, as for _phase_kernels. Calls of
-- @doc threads that opened no phase range, and calls outside every phase range, are not listed: they belong to
-- @doc the phase 'other'. The GPU operations a call issued share its process and correlation id, so this one
-- @doc table puts calls, kernels, copies and the idle gaps before them in their phase (engine/facts/scopes.py).
-- @doc Each call keeps every stored column of api_calls (its name as an id), so a named phase reads its calls
-- @doc here through a filter instead of a copy.
-- @needs _phase_ranges
-- @column start_ns Call start (ns).
-- @column end_ns Call end (ns).
-- @column dur_ns end_ns - start_ns (ns).
-- @column pid Process.
-- @column tid Thread id.
-- @column global_tid Thread of the call.
-- @column correlation_id Correlation id of the call (and of the GPU work it issued).
-- @column name_id StringIds id of the API name (see api_calls.name_id).
-- @column return_value CUDA return code (0 = success).
-- @column event_class nsys eventClass: 0 CUDA runtime, 1 CUDA driver, NULL when not recorded.
-- @column phase Phase name.
-- Each call's phase from a narrow as-of join (thread and start only: the join sorts what it carries), then the
-- calls' columns joined back, in the order the stored api_calls table has them (engine/reading/canonical.py). Calls
-- of one thread that start at the same nanosecond share their phase, so (global_tid, start_ns) names one row of it.
WITH starts AS (
    SELECT DISTINCT global_tid, start_ns FROM _api_calls_by_id
    WHERE global_tid IN (SELECT DISTINCT global_tid FROM _phase_ranges)
),
phased AS (
    SELECT s.global_tid, s.start_ns, r.phase
    FROM starts s ASOF JOIN _phase_ranges r ON r.global_tid = s.global_tid AND s.start_ns >= r.start_ns
    WHERE r.end_ns >= s.start_ns
)
SELECT c.start_ns, c.end_ns, c.dur_ns, c.pid, c.tid, c.global_tid, c.correlation_id, c.name_id, c.return_value,
       c.event_class, p.phase
FROM _api_calls_by_id c JOIN phased p ON p.global_tid = c.global_tid AND p.start_ns = c.start_ns
