-- @fact sync_summary
-- @doc One row per synchronising API (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize,
-- @doc cudaThreadSynchronize, cudaStreamWaitEvent, their driver twins, and synchronous cudaMemcpy/
-- @doc cudaMemset): how often it was called and how long the CPU was blocked in it.
-- @report
-- @needs _sync_calls _active_span
-- @requires api_calls
-- @column name API name.
-- @column kind sync (explicit synchronisation), wait (stream waits an event) or sync_copy (synchronous copy/memset).
-- @column call_count Calls.
-- @column calls_per_s Calls per second of active work: the span of API activity less the server's idle stretches in it (_active_span).
-- @column calls_per_kernel Calls per kernel (or graph replay) in the profile.
-- @column blocked_ns CPU time inside the calls (ns).
-- @column mean_blocked_ns Mean CPU time per call (ns).
-- @check name not_null
-- @check name unique
-- @check kind accepted_values sync wait sync_copy
-- @check call_count non_negative
-- @check blocked_ns non_negative
WITH totals AS (
    SELECT (SELECT count(*) FROM _kernels_by_id) + (SELECT count(*) FROM graph_launches) AS kernels,
           (SELECT active_ns FROM _active_span) AS active_ns
)
SELECT s.name, any_value(s.kind) AS kind, count(*) AS call_count,
       count(*) / (any_value(t.active_ns) / 1e9) AS calls_per_s,
       CASE WHEN any_value(t.kernels) > 0 THEN count(*) / any_value(t.kernels) END AS calls_per_kernel,
       sum(s.end_ns - s.start_ns) AS blocked_ns, avg(s.end_ns - s.start_ns) AS mean_blocked_ns
FROM _sync_calls s CROSS JOIN totals t
GROUP BY s.name ORDER BY call_count DESC, s.name
