-- @fact gpu_utilization
-- @doc One row per GPU that did work: how busy it was over its own window (first GPU operation to the
-- @doc last). Busy time is the union of kernels, graph replays, copies and memsets, so overlapping
-- @doc streams count once.
-- @needs _timeline _idle_gaps
-- @requires kernels
-- @column device_id CUDA device index.
-- @column window_start_ns First GPU operation on the device (ns).
-- @column window_end_ns End of the last GPU operation on the device (ns).
-- @column window_ns Length of that window (ns).
-- @column busy_ns Union of all GPU work (ns).
-- @column compute_busy_ns Union of kernels and graph replays only (ns).
-- @column idle_ns Window minus busy time (ns).
-- @column utilization busy_ns / window_ns (0-1).
-- @column compute_utilization compute_busy_ns / window_ns (0-1).
-- @column idle_fraction 1 - utilization: share of the window with nothing running (0-1).
-- @column op_count GPU operations of every kind (kernels, graph replays, copies, memsets).
-- @column kernel_count Kernels executed.
-- @column graph_replay_count CUDA-graph replays traced in graph mode.
-- @column kernel_time_ns Sum of kernel durations, the "GPU active time" of README "What it measures" (ns).
-- @column mean_kernel_ns Mean kernel duration (ns).
-- @column idle_host_ns Idle time whose next operation was issued after the GPU went idle (ns).
-- @column idle_sync_ns Idle time that follows a blocking synchronisation (ns).
-- @column idle_uvm_ns Idle time that ends in a unified-memory migration (ns).
-- @column idle_other_ns Remaining idle time between operations (ns).
-- @check device_id not_null
-- @check device_id unique
-- @check window_ns non_negative
-- @check busy_ns non_negative
-- @check idle_ns non_negative
-- @check utilization range 0 1
-- @check compute_utilization range 0 1
-- @check idle_fraction range 0 1
-- @check kernel_count non_negative
-- @check idle_host_ns non_negative
-- @check idle_sync_ns non_negative
-- @check idle_uvm_ns non_negative
-- @check idle_other_ns non_negative
WITH win AS (
    SELECT device_id, min(start_ns) AS s, max(end_ns) AS e, count(*) AS op_count,
           count(*) FILTER (WHERE is_compute AND NOT is_graph) AS kernel_count,
           count(*) FILTER (WHERE is_graph) AS graph_replay_count,
           coalesce(sum(end_ns - start_ns) FILTER (WHERE is_compute AND NOT is_graph), 0) AS kernel_time_ns,
           avg(end_ns - start_ns) FILTER (WHERE is_compute AND NOT is_graph) AS mean_kernel_ns,
           -- each operation adds what sticks out past the earlier ones: the union of busy intervals
           sum(greatest(end_ns - greatest(start_ns, coalesce(prev_end_ns, start_ns)), 0)) AS busy_ns,
           coalesce(sum(greatest(end_ns - greatest(start_ns, coalesce(prev_compute_end_ns, start_ns)), 0))
                        FILTER (WHERE is_compute), 0) AS compute_busy_ns
    FROM _timeline GROUP BY device_id
),
idle AS (
    SELECT device_id,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'host'), 0) AS idle_host_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'sync'), 0) AS idle_sync_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'uvm'), 0) AS idle_uvm_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'other'), 0) AS idle_other_ns
    FROM _idle_gaps GROUP BY device_id
)
SELECT w.device_id, w.s AS window_start_ns, w.e AS window_end_ns, w.e - w.s AS window_ns,
       CAST(w.busy_ns AS BIGINT) AS busy_ns, CAST(w.compute_busy_ns AS BIGINT) AS compute_busy_ns,
       CAST((w.e - w.s) - w.busy_ns AS BIGINT) AS idle_ns,
       CASE WHEN w.e > w.s THEN w.busy_ns / (w.e - w.s) END AS utilization,
       CASE WHEN w.e > w.s THEN w.compute_busy_ns / (w.e - w.s) END AS compute_utilization,
       CASE WHEN w.e > w.s THEN 1 - w.busy_ns / (w.e - w.s) END AS idle_fraction,
       w.op_count, w.kernel_count, w.graph_replay_count, w.kernel_time_ns, w.mean_kernel_ns,
       coalesce(i.idle_host_ns, 0) AS idle_host_ns, coalesce(i.idle_sync_ns, 0) AS idle_sync_ns,
       coalesce(i.idle_uvm_ns, 0) AS idle_uvm_ns, coalesce(i.idle_other_ns, 0) AS idle_other_ns
FROM win w LEFT JOIN idle i USING (device_id)
ORDER BY w.device_id
