-- @fact _issuing_calls
-- @materialize
-- @doc The CPU call behind each correlation id of a process: the API call that issued GPU work (kernel,
-- @doc graph launch, copy, memset). GPU activity joins it on (pid, correlation_id).
-- @column pid Process.
-- @column correlation_id Correlation id (never 0 or NULL).
-- @column global_tid Thread that made the call.
-- @column api_start_ns When the call started (ns).
-- @column api_end_ns When the call returned (ns).
SELECT pid, correlation_id, any_value(global_tid) AS global_tid, min(start_ns) AS api_start_ns,
       min(end_ns) AS api_end_ns
FROM api_calls
WHERE correlation_id IS NOT NULL AND correlation_id <> 0
GROUP BY pid, correlation_id
