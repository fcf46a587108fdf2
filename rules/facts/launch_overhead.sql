-- @fact launch_overhead
-- @doc One row per GPU that ran kernels: the launch-overhead numbers (docs/measures.md "What it measures"). The
-- @doc overhead ratio is total gap time between consecutive kernels / (kernel busy time + that gap time);
-- @doc above 0.3 the GPU spends a third of its kernel window waiting. launch_idle_share tells how much of the
-- @doc GPU's idle time is launch cost: the host issuing the next operation (_idle_gaps 'launch'), versus
-- @doc synchronisations, allocation, host work outside CUDA, GPU-side gaps and the rest.
-- @report per-phase
-- @per-phase
-- @needs _idle_gaps gpu_utilization kernel_gaps
-- @requires kernels|graph_launches
-- @column device_id CUDA device index.
-- @column kernel_count Kernels (and graph replays).
-- @column mean_kernel_ns Mean kernel duration (ns).
-- @column mean_gap_ns Mean gap between consecutive kernels (ns).
-- @column median_gap_ns Median gap between consecutive kernels (ns).
-- @column total_gap_ns Sum of gaps between consecutive kernels (ns).
-- @column overhead_ratio total_gap_ns / (compute busy time + total_gap_ns).
-- @column launch_idle_ns GPU idle time while the host issued the next operation (ns).
-- @column launch_idle_share launch_idle_ns / all idle time between GPU operations (0-1).
-- @column launch_idle_fraction launch_idle_ns / the device window: the share of time launch cost takes (0-1).
-- @column graph_share Share of the device's kernel time run from CUDA graphs (graph replays in graph trace mode, graph-node kernels in node mode): near 1 when the work is already launched as CUDA graphs (0-1).
-- @column window_ns The device window (ns).
-- @column launch_gap_allocation_ns Of the launch-cost idle time, the part the issuing thread spent inside allocation and free calls (cudaMalloc, cuMemAlloc ...): allocation done between launches, too short a share of each gap to make it an allocation gap (ns).
-- @column launch_gap_allocation_share launch_gap_allocation_ns / launch_idle_ns (0-1).
-- @column launch_gap_sync_ns Of the launch-cost idle time, the part spent inside blocking calls (ns).
-- @column launch_gap_sync_share launch_gap_sync_ns / launch_idle_ns (0-1).
-- @check device_id not_null
-- @check device_id unique
-- @check kernel_count non_negative
-- @check total_gap_ns non_negative
-- @check overhead_ratio range 0 1
-- @check launch_idle_ns non_negative
-- @check launch_idle_share range 0 1
-- @check launch_idle_fraction range 0 1
-- @check graph_share range 0 1
-- @check launch_gap_allocation_share range 0 1
-- @check launch_gap_sync_share range 0 1
WITH launch_gaps AS (
    SELECT device_id, sum(least(allocation_ns, gap_ns)) AS allocation_ns, sum(least(sync_ns, gap_ns)) AS sync_ns
    FROM _idle_gaps WHERE cause = 'launch' GROUP BY device_id
),
graph_time AS (
    SELECT device_id, sum(graph_ns) AS graph_ns, sum(eager_ns) AS eager_ns FROM (
        SELECT device_id, sum(dur_ns) FILTER (WHERE graph_node_id IS NOT NULL) AS graph_ns,
               sum(dur_ns) FILTER (WHERE graph_node_id IS NULL) AS eager_ns
        FROM _kernels_by_id GROUP BY device_id
        UNION ALL
        SELECT device_id, sum(end_ns - start_ns), 0 FROM graph_launches GROUP BY device_id
    ) GROUP BY device_id
)
SELECT u.device_id, g.kernel_count, u.mean_kernel_ns, g.mean_gap_ns, g.p50_gap_ns AS median_gap_ns,
       g.total_gap_ns,
       CASE WHEN u.compute_busy_ns + g.total_gap_ns > 0
            THEN g.total_gap_ns / (u.compute_busy_ns + g.total_gap_ns) END AS overhead_ratio,
       u.idle_launch_ns AS launch_idle_ns,
       CASE WHEN u.idle_ns > 0 THEN least(u.idle_launch_ns / u.idle_ns, 1) ELSE 0 END AS launch_idle_share,
       CASE WHEN u.window_ns > 0 THEN u.idle_launch_ns / u.window_ns ELSE 0 END AS launch_idle_fraction,
       coalesce(gr.graph_ns / nullif(gr.graph_ns + gr.eager_ns, 0), 0) AS graph_share,
       u.window_ns,
       coalesce(lg.allocation_ns, 0) AS launch_gap_allocation_ns,
       CASE WHEN u.idle_launch_ns > 0 THEN least(coalesce(lg.allocation_ns, 0) / u.idle_launch_ns, 1) ELSE 0 END
           AS launch_gap_allocation_share,
       coalesce(lg.sync_ns, 0) AS launch_gap_sync_ns,
       CASE WHEN u.idle_launch_ns > 0 THEN least(coalesce(lg.sync_ns, 0) / u.idle_launch_ns, 1) ELSE 0 END
           AS launch_gap_sync_share
FROM gpu_utilization u
JOIN kernel_gaps g ON g.device_id = u.device_id AND g.stream_id IS NULL
LEFT JOIN graph_time gr ON gr.device_id = u.device_id
LEFT JOIN launch_gaps lg ON lg.device_id = u.device_id
WHERE u.kernel_count + u.graph_replay_count > 0
ORDER BY u.device_id
