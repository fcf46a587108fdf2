-- @fact invalid_timestamps
-- @doc One row: how many traced events had impossible times (an end before their start, or a start before the
-- @doc capture's time origin) and were therefore left out of every other fact. Such records cannot be placed on
-- @doc the timeline; a report that silently dropped them would describe less work than was captured. The same row
-- @doc counts the GPU work whose device is NULL (only post-processed exports hold such rows: nsys declares deviceId
-- @doc NOT NULL): the reader puts a row on the GPU of its CUDA context or stream, or on the only GPU, when the
-- @doc export says which (device_recovered_count), and leaves the rest out of every other fact (no_device_*).
-- @column kernel_count Kernels left out.
-- @column memcpy_count Memory copies left out.
-- @column memset_count Memsets left out.
-- @column sync_count Synchronisation records left out.
-- @column graph_replay_count CUDA-graph replays (graph trace mode) left out.
-- @column api_call_count CUDA API calls left out.
-- @column event_count All of them.
-- @column no_device_kernel_count Kernels without a device, left out.
-- @column no_device_kernel_share Their share of the kernel time (of the kernels kept and left out).
-- @column no_device_memcpy_count Memory copies without a device, left out.
-- @column no_device_memset_count Memsets without a device, left out.
-- @column no_device_graph_replay_count CUDA-graph replays without a device, left out.
-- @column no_device_count All GPU work without a device, left out.
-- @column device_recovered_count GPU work recorded without a device and put on the GPU of its context or stream, or the only GPU.
-- @column source_format What was read: 'nsys' (an export) or 'kineto' (a PyTorch-profiler trace, whose events without a valid time or duration are counted here).
-- @check event_count not_null
-- @check event_count non_negative
-- @check no_device_count not_null
-- @check no_device_count non_negative
-- @check no_device_kernel_share range 0 1
WITH dropped AS (
    SELECT replace(key, 'invalid_times:', '') AS view, CAST(value AS BIGINT) AS n
    FROM profile_info WHERE key LIKE 'invalid_times:%'
),
placement AS (
    SELECT split_part(key, ':', 1) AS what, split_part(key, ':', 2) AS view, CAST(value AS BIGINT) AS n
    FROM profile_info WHERE key LIKE 'no\_device%:%' ESCAPE '\' OR key LIKE 'device\_recovered:%' ESCAPE '\'
),
unplaced AS (
    SELECT coalesce(sum(n) FILTER (WHERE what = 'no_device' AND view = 'kernels'), 0) AS kernel_count,
           coalesce(sum(n) FILTER (WHERE what = 'no_device_ns' AND view = 'kernels'), 0) AS kernel_ns,
           coalesce(sum(n) FILTER (WHERE what = 'no_device' AND view = 'memcpys'), 0) AS memcpy_count,
           coalesce(sum(n) FILTER (WHERE what = 'no_device' AND view = 'memsets'), 0) AS memset_count,
           coalesce(sum(n) FILTER (WHERE what = 'no_device' AND view = 'graph_launches'), 0) AS graph_replay_count,
           coalesce(sum(n) FILTER (WHERE what = 'no_device'), 0) AS event_count,
           coalesce(sum(n) FILTER (WHERE what = 'device_recovered'), 0) AS recovered_count
    FROM placement
),
kept AS (SELECT coalesce(sum(dur_ns), 0) AS kernel_ns FROM _kernels_by_id)
SELECT coalesce(sum(n) FILTER (WHERE view = 'kernels'), 0) AS kernel_count,
       coalesce(sum(n) FILTER (WHERE view = 'memcpys'), 0) AS memcpy_count,
       coalesce(sum(n) FILTER (WHERE view = 'memsets'), 0) AS memset_count,
       coalesce(sum(n) FILTER (WHERE view = 'syncs'), 0) AS sync_count,
       coalesce(sum(n) FILTER (WHERE view = 'graph_launches'), 0) AS graph_replay_count,
       coalesce(sum(n) FILTER (WHERE view = 'api_calls'), 0) AS api_call_count,
       coalesce(sum(n), 0) AS event_count,
       (SELECT kernel_count FROM unplaced) AS no_device_kernel_count,
       (SELECT CASE WHEN u.kernel_ns > 0 THEN u.kernel_ns / (u.kernel_ns + k.kernel_ns) ELSE 0.0 END
        FROM unplaced u, kept k) AS no_device_kernel_share,
       (SELECT memcpy_count FROM unplaced) AS no_device_memcpy_count,
       (SELECT memset_count FROM unplaced) AS no_device_memset_count,
       (SELECT graph_replay_count FROM unplaced) AS no_device_graph_replay_count,
       (SELECT event_count FROM unplaced) AS no_device_count,
       (SELECT recovered_count FROM unplaced) AS device_recovered_count,
       coalesce((SELECT any_value(value) FROM profile_info WHERE key = 'source_format'), 'nsys') AS source_format
FROM dropped
