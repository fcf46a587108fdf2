-- @fact _issuing_calls
-- @doc The CPU call behind each correlation id of a process: the API call that issued GPU work (kernel,
-- @doc graph launch, copy, memset). GPU activity joins it on (pid, correlation_id). CUPTI numbers every
-- @doc runtime and driver call of a process with its own correlation id, so the pair is unique (checked on
-- @doc every real export in tests/test_source_real.py) and no deduplication pass is needed.
-- @whole-run
-- @column pid Process.
-- @column correlation_id Correlation id (never 0 or NULL).
-- @column global_tid Thread that made the call.
-- @column name_id StringIds id of the API name (see api_calls.name_id).
-- @column api_start_ns When the call started (ns).
-- @column api_end_ns When the call returned (ns).
SELECT pid, correlation_id, global_tid, name_id, start_ns AS api_start_ns, end_ns AS api_end_ns
FROM _api_calls_by_id
WHERE correlation_id IS NOT NULL AND correlation_id <> 0
