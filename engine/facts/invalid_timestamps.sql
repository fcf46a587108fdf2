-- @fact invalid_timestamps
-- @doc One row: how many traced events had impossible times (an end before their start, or a start before the
-- @doc capture's time origin) and were therefore left out of every other fact. Such records cannot be placed on
-- @doc the timeline; a report that silently dropped them would describe less work than was captured.
-- @column kernel_count Kernels left out.
-- @column memcpy_count Memory copies left out.
-- @column memset_count Memsets left out.
-- @column sync_count Synchronisation records left out.
-- @column graph_replay_count CUDA-graph replays (graph trace mode) left out.
-- @column api_call_count CUDA API calls left out.
-- @column event_count All of them.
-- @check event_count not_null
-- @check event_count non_negative
WITH dropped AS (
    SELECT replace(key, 'invalid_times:', '') AS view, CAST(value AS BIGINT) AS n
    FROM profile_info WHERE key LIKE 'invalid_times:%'
)
SELECT coalesce(sum(n) FILTER (WHERE view = 'kernels'), 0) AS kernel_count,
       coalesce(sum(n) FILTER (WHERE view = 'memcpys'), 0) AS memcpy_count,
       coalesce(sum(n) FILTER (WHERE view = 'memsets'), 0) AS memset_count,
       coalesce(sum(n) FILTER (WHERE view = 'syncs'), 0) AS sync_count,
       coalesce(sum(n) FILTER (WHERE view = 'graph_launches'), 0) AS graph_replay_count,
       coalesce(sum(n) FILTER (WHERE view = 'api_calls'), 0) AS api_call_count,
       coalesce(sum(n), 0) AS event_count
FROM dropped
