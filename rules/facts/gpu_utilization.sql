-- @fact gpu_utilization
-- @doc One row per GPU that did work: how its own window (first GPU operation to the last) splits into time
-- @doc with a kernel or CUDA-graph replay running (utilization, as nvidia-smi's and the key metric "GPU
-- @doc utilisation"), time with only copies or memsets running (copy_only_ns), and idle time by cause
-- @doc (_idle_gaps; docs/measures.md "Where the idle time goes"). Overlapping streams count once; the parts add up to the
-- @doc window. Each operation owns the idle gap before it, so the window is what the operations own: stretches
-- @doc in which the server was idle (_server_idle: no GPU work and no CUDA call anywhere) are not part of it,
-- @doc and per phase it is the phase's operations and the gaps before them.
-- @report per-phase
-- @needs _timeline _idle_gaps
-- @per-phase
-- @requires kernels|graph_launches
-- @column device_id CUDA device index.
-- @column window_start_ns First GPU operation on the device (ns).
-- @column window_end_ns End of the last GPU operation on the device (ns).
-- @column window_ns Length of that window, less what no operation of it owns (excluded_ns) (ns).
-- @column compute_busy_ns Union of kernels and graph replays (ns).
-- @column utilization compute_busy_ns / window_ns: share of the window with a kernel or graph replay running (0-1).
-- @column copy_only_ns Time with a copy or memset running and no kernel (ns).
-- @column copy_only_fraction copy_only_ns / window_ns (0-1).
-- @column busy_ns Union of all GPU work: kernels, graph replays, copies, memsets (ns).
-- @column active_fraction busy_ns / window_ns: share of the window with any GPU activity (0-1).
-- @column idle_ns Window minus busy time: nothing running (ns).
-- @column idle_fraction idle_ns / window_ns (0-1).
-- @column op_count GPU operations of every kind (kernels, graph replays, copies, memsets).
-- @column kernel_count Kernels executed.
-- @column graph_replay_count CUDA-graph replays traced in graph mode.
-- @column kernel_time_ns Sum of kernel durations, the "GPU active time" of docs/measures.md "What it measures" (ns).
-- @column mean_kernel_ns Mean kernel duration (ns).
-- @column idle_sync_ns Idle time caused by blocking synchronisations (ns).
-- @column idle_allocation_ns Idle time while the host allocated or freed memory (ns).
-- @column idle_launch_ns Idle time while the host issued the next operation: launch cost (ns).
-- @column idle_host_ns Idle time while the host worked outside CUDA calls (ns).
-- @column idle_gpu_side_ns Idle time with the next operation already queued: per-operation GPU cost (ns).
-- @column idle_uvm_ns Idle time that ends in a unified-memory migration (ns).
-- @column idle_other_ns Idle time with no traced cause: dependencies, events, untraced work (ns).
-- @column excluded_ns Time between the first operation and the last that is not part of the window: the server's idle stretches, and per phase the other phases (ns).
-- @check device_id not_null
-- @check device_id unique
-- @check window_ns non_negative
-- @check busy_ns non_negative
-- @check idle_ns non_negative
-- @check utilization range 0 1
-- @check copy_only_fraction range 0 1
-- @check active_fraction range 0 1
-- @check idle_fraction range 0 1
-- @check kernel_count non_negative
-- @check idle_sync_ns non_negative
-- @check idle_allocation_ns non_negative
-- @check idle_launch_ns non_negative
-- @check idle_host_ns non_negative
-- @check idle_gpu_side_ns non_negative
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
           -- ... and with the idle gap before it, what it owns of the window: the sum telescopes to last end -
           -- first start, less what no operation owns (the server's idle stretches; in a per-phase computation,
           -- the other phases' operations and gaps)
           sum(greatest(end_ns - coalesce(prev_end_ns, start_ns), 0)) AS n,
           coalesce(sum(greatest(end_ns - greatest(start_ns, coalesce(prev_compute_end_ns, start_ns)), 0))
                        FILTER (WHERE is_compute), 0) AS compute_busy_ns
    FROM _timeline GROUP BY device_id
),
idle AS (
    SELECT device_id,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'sync'), 0) AS idle_sync_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'allocation'), 0) AS idle_allocation_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'launch'), 0) AS idle_launch_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'host'), 0) AS idle_host_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'gpu-side'), 0) AS idle_gpu_side_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'uvm'), 0) AS idle_uvm_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'other'), 0) AS idle_other_ns
    FROM _idle_gaps GROUP BY device_id
)
SELECT w.device_id, w.s AS window_start_ns, w.e AS window_end_ns, w.n AS window_ns,
       CAST(w.compute_busy_ns AS BIGINT) AS compute_busy_ns,
       CASE WHEN w.n > 0 THEN w.compute_busy_ns / w.n END AS utilization,
       CAST(greatest(w.busy_ns - w.compute_busy_ns, 0) AS BIGINT) AS copy_only_ns,
       CASE WHEN w.n > 0 THEN greatest(w.busy_ns - w.compute_busy_ns, 0) / w.n END AS copy_only_fraction,
       CAST(w.busy_ns AS BIGINT) AS busy_ns,
       CASE WHEN w.n > 0 THEN w.busy_ns / w.n END AS active_fraction,
       CAST(w.n - w.busy_ns AS BIGINT) AS idle_ns,
       CASE WHEN w.n > 0 THEN 1 - w.busy_ns / w.n END AS idle_fraction,
       w.op_count, w.kernel_count, w.graph_replay_count, w.kernel_time_ns, w.mean_kernel_ns,
       coalesce(i.idle_sync_ns, 0) AS idle_sync_ns, coalesce(i.idle_allocation_ns, 0) AS idle_allocation_ns,
       coalesce(i.idle_launch_ns, 0) AS idle_launch_ns, coalesce(i.idle_host_ns, 0) AS idle_host_ns,
       coalesce(i.idle_gpu_side_ns, 0) AS idle_gpu_side_ns, coalesce(i.idle_uvm_ns, 0) AS idle_uvm_ns,
       coalesce(i.idle_other_ns, 0) AS idle_other_ns, CAST(w.e - w.s - w.n AS BIGINT) AS excluded_ns
FROM win w LEFT JOIN idle i USING (device_id)
ORDER BY w.device_id
