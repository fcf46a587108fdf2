-- @fact capture_health
-- @doc One row describing what the capture holds, so capture problems are reported instead of being
-- @doc mistaken for performance problems: empty, CPU-only or NVTX-only captures, graph-mode CUDA graphs,
-- @doc profiles too short to judge.
-- @report
-- @needs _timeline gpu_utilization _api_classes
-- @param replay_fill_share 0.5 range 0 1
-- @column nsys_version nsys version that wrote the export (NULL for very old exports).
-- @column kernel_count Kernels in the kernel table.
-- @column graph_replays CUDA-graph replays traced in graph mode.
-- @column kernel_and_replay_count Kernels plus graph replays: the units of GPU work the capture shows.
-- @column gpu_op_count GPU operations of every kind (kernels, graph replays, copies, memsets).
-- @column api_call_count CUDA API calls.
-- @column launch_call_count Kernel and graph launch calls (_api_classes is_launch: cudaLaunchKernel, cuLaunchKernel(Ex), cudaGraphLaunch ...; not cudaLaunchHostFunc).
-- @column memcpy_count Copies.
-- @column nvtx_range_count NVTX ranges.
-- @column gpu_metric_samples GPU-metrics rows.
-- @column used_device_count GPUs that did work.
-- @column gpu_window_ns From the first GPU operation to the last, over all GPUs (ns).
-- @column duration_ns Span of all traced activity (ns).
-- @column graph_trace_mode graph, node or NULL.
-- @column graph_replay_share GPU time of the CUDA-graph replays traced in graph mode over the used GPUs' windows, at most 1: the share of the window the replays fill (0-1).
-- @column sparse_op_count GPU operations of every kind (kernels, graph replays, copies, memsets); NULL where CUDA-graph replays fill at least replay_fill_share of the GPU window: each replay is then a whole step of GPU work in one record, so counting records says nothing about how much work the capture holds.
-- @check kernel_count not_null
-- @check kernel_count non_negative
-- @check gpu_op_count not_null
-- @check gpu_op_count non_negative
-- @check api_call_count non_negative
-- @check launch_call_count non_negative
-- @check used_device_count non_negative
-- @check gpu_window_ns non_negative
-- @check duration_ns non_negative
-- @check graph_trace_mode accepted_values graph node
-- @check graph_replay_share range 0 1
-- @check sparse_op_count non_negative
WITH replays AS (
    -- least() skips NULLs, so a capture without a GPU window is tested apart
    SELECT CASE WHEN (SELECT sum(window_ns) FROM gpu_utilization) > 0
                THEN least(coalesce((SELECT sum(dur_ns) FROM graph_launches), 0)
                           / (SELECT sum(window_ns) FROM gpu_utilization), 1.0)
           END AS share
)
SELECT (SELECT value FROM profile_info WHERE key = 'nsys_version') AS nsys_version,
       (SELECT count(*) FROM _kernels_by_id) AS kernel_count,
       (SELECT count(*) FROM graph_launches) AS graph_replays,
       (SELECT count(*) FROM _kernels_by_id) + (SELECT count(*) FROM graph_launches) AS kernel_and_replay_count,
       (SELECT count(*) FROM _timeline) AS gpu_op_count,
       (SELECT count(*) FROM _api_calls_by_id) AS api_call_count,
       (SELECT count(*) FROM _api_calls_by_id
        WHERE name_id IN (SELECT name_id FROM _api_classes WHERE is_launch)) AS launch_call_count,
       (SELECT count(*) FROM memcpys) AS memcpy_count,
       (SELECT count(*) FROM nvtx_ranges) AS nvtx_range_count,
       (SELECT count(*) FROM gpu_metrics) AS gpu_metric_samples,
       (SELECT count(*) FROM devices WHERE used) AS used_device_count,
       coalesce((SELECT max(window_end_ns) - min(window_start_ns) FROM gpu_utilization), 0) AS gpu_window_ns,
       coalesce((SELECT CAST(value AS BIGINT) FROM profile_info WHERE key = 'duration_ns'), 0) AS duration_ns,
       (SELECT value FROM profile_info WHERE key = 'graph_trace_mode') AS graph_trace_mode,
       coalesce(replays.share, 0) AS graph_replay_share,
       CASE WHEN coalesce(replays.share, 0) < ${replay_fill_share} THEN (SELECT count(*) FROM _timeline)
       END AS sparse_op_count
FROM replays
