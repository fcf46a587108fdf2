-- @fact summary
-- @doc One row with the headline numbers for the whole profile (docs/measures.md "What it measures"): GPU
-- @doc utilisation, mean kernel duration, mean and median gap between kernels, launch overhead ratio,
-- @doc launch-call count and latency, GPU active time (sum of kernel and graph-replay durations), CPU time in CUDA API calls,
-- @doc copy time, and data movement by traffic: host-device copies (the PCIe volume, pinned and pageable),
-- @doc device-to-device and peer copies, memsets (_copy_stalls).
-- @report
-- @needs gpu_utilization kernel_gaps launch_api _timeline _api_classes _copy_stalls
-- @column used_devices GPUs that did work.
-- @column duration_ns Span of all traced activity (ns).
-- @column gpu_utilization Share of the used GPUs' windows with a kernel or graph replay running (0-1).
-- @column copy_only_fraction Share of the used GPUs' windows with only copies or memsets running (0-1).
-- @column gpu_active_fraction Share of the used GPUs' windows with any GPU activity: kernels, copies, memsets (0-1).
-- @column kernel_count Kernels (and graph replays).
-- @column mean_kernel_ns Mean duration of the kernels and graph replays that kernel_count counts, a graph-mode replay counting as one (ns).
-- @column mean_gap_ns Mean gap between consecutive kernels on a GPU (ns).
-- @column median_gap_ns Median gap between consecutive kernels on a GPU (ns).
-- @column overhead_ratio Gap time / (kernel busy time + gap time), over all GPUs.
-- @column launch_calls cudaLaunchKernel, cuLaunchKernel(Ex) and graph-launch calls.
-- @column launch_mean_ns Mean duration of those calls (ns).
-- @column launch_p50_ns Median duration of cudaLaunchKernel/cuLaunchKernel calls (ns).
-- @column gpu_active_ns Sum of the durations of kernels and graph replays: with --cuda-graph-trace=graph the replays hold the graphs' kernels (ns).
-- @column cpu_api_ns CPU time inside CUDA API calls (ns).
-- @column memcpy_ns Time in every copy, whatever it moves: host-device, device-to-device, peer, unified-memory migration or other; not memsets (ns).
-- @column memcpy_bytes Bytes in those copies.
-- @column pcie_count Host-device copies (HtoD, DtoH, HtoA, AtoH), the copies that cross PCIe; not unified-memory migrations.
-- @column pcie_ns Time in host-device copies (ns).
-- @column pcie_bytes Bytes in host-device copies: the PCIe volume.
-- @column pinned_bytes Bytes in host-device copies whose host side is pinned memory.
-- @column pageable_bytes Bytes in host-device copies whose host side is pageable memory.
-- @column dtod_count Device-to-device copies within a GPU (DtoD, DtoA, AtoD, AtoA).
-- @column dtod_bytes Bytes in those copies.
-- @column peer_count Peer copies between GPUs (PtoP).
-- @column peer_bytes Bytes in those copies.
-- @column memset_count Memsets.
-- @column memset_bytes Bytes set.
-- @check used_devices not_null
-- @check used_devices non_negative
-- @check kernel_count not_null
-- @check kernel_count non_negative
-- @check gpu_utilization range 0 1
-- @check copy_only_fraction range 0 1
-- @check gpu_active_fraction range 0 1
-- @check overhead_ratio range 0 1
-- @check launch_calls non_negative
-- @check gpu_active_ns non_negative
-- @check cpu_api_ns non_negative
-- @check memcpy_ns non_negative
-- @check memcpy_bytes non_negative
-- @check pcie_count non_negative
-- @check pcie_ns non_negative
-- @check pcie_bytes non_negative
-- @check pinned_bytes non_negative
-- @check pageable_bytes non_negative
-- @check dtod_count non_negative
-- @check peer_count non_negative
-- @check memset_count non_negative
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
    FROM launch_api WHERE name IN (SELECT name FROM _api_classes WHERE is_launch)
),
kernel_launch_ids AS (SELECT name_id FROM _api_classes WHERE api_family = 'kernel_launch'),
lp AS (
    SELECT quantile_cont(dur_ns, 0.5) AS p50 FROM _api_calls_by_id
    WHERE name_id IN (SELECT name_id FROM kernel_launch_ids)
),
c AS (
    SELECT count(*) FILTER (WHERE traffic = 'host_device') AS pcie_count,
           coalesce(sum(dur_ns) FILTER (WHERE traffic = 'host_device'), 0) AS pcie_ns,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'host_device'), 0) AS pcie_bytes,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pinned'), 0) AS pinned_bytes,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pageable'), 0) AS pageable_bytes,
           count(*) FILTER (WHERE traffic = 'device') AS dtod_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'device'), 0) AS dtod_bytes,
           count(*) FILTER (WHERE traffic = 'peer') AS peer_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'peer'), 0) AS peer_bytes,
           count(*) FILTER (WHERE traffic = 'memset') AS memset_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'memset'), 0) AS memset_bytes
    FROM _copy_stalls
)
SELECT coalesce(u.n, 0) AS used_devices,
       coalesce((SELECT CAST(value AS BIGINT) FROM profile_info WHERE key = 'duration_ns'), 0) AS duration_ns,
       CASE WHEN u.win > 0 THEN u.cbusy / u.win END AS gpu_utilization,
       CASE WHEN u.win > 0 THEN greatest(u.busy - u.cbusy, 0) / u.win END AS copy_only_fraction,
       CASE WHEN u.win > 0 THEN u.busy / u.win END AS gpu_active_fraction,
       coalesce(u.kernels, 0) AS kernel_count,
       (SELECT avg(dur_ns) FROM (SELECT dur_ns FROM _kernels_by_id UNION ALL SELECT dur_ns FROM graph_launches))
           AS mean_kernel_ns,
       (SELECT avg(greatest(gap_ns, 0)) FROM dev_gaps) AS mean_gap_ns,
       (SELECT quantile_cont(greatest(gap_ns, 0), 0.5) FROM dev_gaps) AS median_gap_ns,
       CASE WHEN u.cbusy + g.gaps > 0 THEN g.gaps / (u.cbusy + g.gaps) END AS overhead_ratio,
       coalesce(l.calls, 0) AS launch_calls, l.mean_ns AS launch_mean_ns, lp.p50 AS launch_p50_ns,
       coalesce(u.ktime, 0) + (SELECT coalesce(sum(dur_ns), 0) FROM graph_launches) AS gpu_active_ns,
       (SELECT coalesce(sum(dur_ns), 0) FROM _api_calls_by_id) AS cpu_api_ns,
       (SELECT coalesce(sum(dur_ns), 0) FROM memcpys) AS memcpy_ns,
       (SELECT coalesce(sum(bytes), 0) FROM memcpys) AS memcpy_bytes,
       c.pcie_count, c.pcie_ns, c.pcie_bytes, c.pinned_bytes, c.pageable_bytes, c.dtod_count, c.dtod_bytes,
       c.peer_count, c.peer_bytes, c.memset_count, c.memset_bytes
FROM u, g, l, lp, c
