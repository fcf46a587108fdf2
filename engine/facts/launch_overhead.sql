-- @fact launch_overhead
-- @doc One row per GPU that ran kernels: the launch-overhead numbers (README "What it measures"). The
-- @doc overhead ratio is total gap time between consecutive kernels / (kernel busy time + that gap time);
-- @doc above 0.3 the GPU spends a third of its kernel window waiting. host_idle_share tells how much of the
-- @doc GPU's idle time the CPU caused by launching late (versus synchronisations and other waits).
-- @needs gpu_utilization kernel_gaps
-- @requires kernels
-- @column device_id CUDA device index.
-- @column kernel_count Kernels (and graph replays).
-- @column mean_kernel_ns Mean kernel duration (ns).
-- @column mean_gap_ns Mean gap between consecutive kernels (ns).
-- @column median_gap_ns Median gap between consecutive kernels (ns).
-- @column total_gap_ns Sum of gaps between consecutive kernels (ns).
-- @column overhead_ratio total_gap_ns / (compute busy time + total_gap_ns).
-- @column host_idle_ns GPU idle time caused by late launches (ns).
-- @column host_idle_share host_idle_ns / all idle time between GPU operations (0-1).
-- @column host_idle_fraction host_idle_ns / the device window: the share of time late launches cost (0-1).
-- @column window_ns The device window (ns).
-- @check device_id not_null
-- @check device_id unique
-- @check kernel_count non_negative
-- @check total_gap_ns non_negative
-- @check overhead_ratio range 0 1
-- @check host_idle_ns non_negative
-- @check host_idle_share range 0 1
-- @check host_idle_fraction range 0 1
SELECT u.device_id, g.kernel_count, u.mean_kernel_ns, g.mean_gap_ns, g.p50_gap_ns AS median_gap_ns,
       g.total_gap_ns,
       CASE WHEN u.compute_busy_ns + g.total_gap_ns > 0
            THEN g.total_gap_ns / (u.compute_busy_ns + g.total_gap_ns) END AS overhead_ratio,
       u.idle_host_ns AS host_idle_ns,
       CASE WHEN u.idle_host_ns + u.idle_sync_ns + u.idle_uvm_ns + u.idle_other_ns > 0
            THEN u.idle_host_ns / (u.idle_host_ns + u.idle_sync_ns + u.idle_uvm_ns + u.idle_other_ns) ELSE 0 END AS host_idle_share,
       CASE WHEN u.window_ns > 0 THEN u.idle_host_ns / u.window_ns ELSE 0 END AS host_idle_fraction,
       u.window_ns
FROM gpu_utilization u
JOIN kernel_gaps g ON g.device_id = u.device_id AND g.stream_id IS NULL
WHERE u.kernel_count + u.graph_replay_count > 0
ORDER BY u.device_id
