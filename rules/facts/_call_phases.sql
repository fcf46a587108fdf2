-- @fact _call_phases
-- @whole-run
-- @materialize
-- @doc The inference phase of each CUDA API call made inside a phase range: the phase of the latest phase range
-- @doc to begin on the calling thread at or before the call's start, while that range is open (_phase_stretches
-- @doc says how nested ranges count). Calls of threads that opened no phase range, and calls outside every phase
-- @doc range, are not listed: they belong to the phase 'other'. The GPU operations a call issued share its process
-- @doc and correlation id, so this one table puts calls, kernels, copies and the idle gaps before them in their
-- @doc phase (engine/facts/scopes.py).
-- @doc Each call keeps every stored column of api_calls (its name as an id), so a named phase reads its calls
-- @doc here through a filter instead of a copy.
-- @needs _phase_stretches
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
-- Each call meets the stretch of its thread's time its start falls in by an equi-join on thread and time bucket: the
-- millions of calls are neither sorted nor joined back.
WITH calls AS (
    -- The bucket is a column before the join: as an expression in the ON clause DuckDB joins on the thread alone.
    SELECT c.*, (c.start_ns - w.origin_ns) // w.bucket_ns AS bucket
    FROM _api_calls_by_id c
    CROSS JOIN (SELECT any_value(origin_ns) AS origin_ns, any_value(bucket_ns) AS bucket_ns FROM _phase_stretches) w
)
-- The columns in the order the stored api_calls table has them (engine/reading/canonical.py).
SELECT c.start_ns, c.end_ns, c.dur_ns, c.pid, c.tid, c.global_tid, c.correlation_id, c.name_id, c.return_value,
       c.event_class, s.phase
FROM calls c JOIN _phase_stretches s ON s.global_tid = c.global_tid AND s.bucket = c.bucket
WHERE c.start_ns >= s.start_ns AND c.start_ns <= s.end_ns
