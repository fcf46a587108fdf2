-- @fact summary
-- @doc One row with the headline numbers for the whole profile (README "What it measures"): GPU
-- @doc utilisation, mean kernel duration, mean and median gap between kernels, launch overhead ratio,
-- @doc launch-call count and latency, GPU active time (sum of kernel durations), CPU time in CUDA API calls,
-- @doc memcpy time.
-- @needs gpu_utilization kernel_gaps launch_api _timeline _api_names
-- @column used_devices GPUs that did work.
-- @column duration_ns Span of all traced activity (ns).
-- @column gpu_utilization Busy share of the used GPUs' windows, union of all GPU work (0-1).
-- @column kernel_count Kernels (and graph replays).
-- @column mean_kernel_ns Mean kernel duration (ns).
-- @column mean_gap_ns Mean gap between consecutive kernels on a GPU (ns).
-- @column median_gap_ns Median gap between consecutive kernels on a GPU (ns).
-- @column overhead_ratio Gap time / (kernel busy time + gap time), over all GPUs.
-- @column launch_calls cudaLaunchKernel, cuLaunchKernel(Ex) and graph-launch calls.
-- @column launch_mean_ns Mean duration of those calls (ns).
-- @column launch_p50_ns Median duration of cudaLaunchKernel/cuLaunchKernel calls (ns).
-- @column gpu_active_ns Sum of kernel durations (ns).
-- @column cpu_api_ns CPU time inside CUDA API calls (ns).
-- @column memcpy_ns Sum of memcpy durations (ns).
-- @column memcpy_bytes Bytes copied.
-- @check used_devices not_null
-- @check used_devices non_negative
-- @check kernel_count not_null
-- @check kernel_count non_negative
-- @check gpu_utilization range 0 1
-- @check overhead_ratio range 0 1
-- @check launch_calls non_negative
-- @check gpu_active_ns non_negative
-- @check cpu_api_ns non_negative
-- @check memcpy_ns non_negative
-- @check memcpy_bytes non_negative
WITH dev_gaps AS (
    SELECT start_ns - prev_compute_end_ns AS gap_ns FROM _timeline
    WHERE is_compute AND prev_compute_end_ns IS NOT NULL
),
u AS (
    SELECT count(*) AS n, sum(busy_ns) AS busy, sum(window_ns) AS win, sum(compute_busy_ns) AS cbusy,
           sum(kernel_count + graph_replay_count) AS kernels, sum(kernel_time_ns) AS ktime
    FROM gpu_utilization
),
g AS (SELECT sum(total_gap_ns) AS gaps FROM kernel_gaps WHERE stream_id IS NULL),
l AS (
    SELECT sum(call_count) AS calls, sum(total_ns) / nullif(sum(call_count), 0) AS mean_ns
    FROM launch_api WHERE name NOT LIKE '%HostFunc%'
),
kernel_launch_ids AS (
    SELECT name_id FROM _api_names
    WHERE name IN ('cudaLaunchKernel', 'cuLaunchKernel', 'cuLaunchKernelEx', 'cudaLaunchKernelExC')
),
lp AS (
    SELECT quantile_cont(dur_ns, 0.5) AS p50 FROM api_calls
    WHERE name_id IN (SELECT name_id FROM kernel_launch_ids)
)
SELECT coalesce(u.n, 0) AS used_devices,
       coalesce((SELECT CAST(value AS BIGINT) FROM profile_info WHERE key = 'duration_ns'), 0) AS duration_ns,
       CASE WHEN u.win > 0 THEN u.busy / u.win END AS gpu_utilization,
       coalesce(u.kernels, 0) AS kernel_count,
       (SELECT avg(dur_ns) FROM kernels) AS mean_kernel_ns,
       (SELECT avg(greatest(gap_ns, 0)) FROM dev_gaps) AS mean_gap_ns,
       (SELECT quantile_cont(greatest(gap_ns, 0), 0.5) FROM dev_gaps) AS median_gap_ns,
       CASE WHEN u.cbusy + g.gaps > 0 THEN g.gaps / (u.cbusy + g.gaps) END AS overhead_ratio,
       coalesce(l.calls, 0) AS launch_calls, l.mean_ns AS launch_mean_ns, lp.p50 AS launch_p50_ns,
       coalesce(u.ktime, 0) AS gpu_active_ns,
       (SELECT coalesce(sum(dur_ns), 0) FROM api_calls) AS cpu_api_ns,
       (SELECT coalesce(sum(dur_ns), 0) FROM memcpys) AS memcpy_ns,
       (SELECT coalesce(sum(bytes), 0) FROM memcpys) AS memcpy_bytes
FROM u, g, l, lp
