-- @fact kernel_gaps
-- @doc Idle time between consecutive kernels, one row per (device, stream) plus one row per device with
-- @doc stream_id NULL for the device as a whole (kernels and graph replays of all streams merged). A gap
-- @doc is host-wait (as in HTA) when the call that launched the next kernel was still running when the
-- @doc previous kernel ended: the GPU waited for the CPU.
-- @needs _ordered_ops _issuing_calls
-- @requires kernels
-- @param gap_threshold_ns 10000
-- @column device_id CUDA device index.
-- @column stream_id CUDA stream, NULL for the whole device.
-- @column kernel_count Kernels (and graph replays) on this device/stream.
-- @column gap_count Gaps between consecutive kernels.
-- @column total_gap_ns Sum of gaps (ns).
-- @column mean_gap_ns Mean gap (ns).
-- @column p50_gap_ns Median gap (ns).
-- @column p90_gap_ns 90th percentile gap (ns).
-- @column p99_gap_ns 99th percentile gap (ns).
-- @column gaps_over_threshold Gaps longer than gap_threshold_ns (default 10 µs).
-- @column host_wait_gap_ns Gap time where the next launch call had not returned when the GPU went idle (ns).
-- @column other_gap_ns Remaining gap time (ns).
WITH compute AS (
    SELECT device_id, stream_id, start_ns, end_ns, pid, correlation_id, prev_end_ns AS device_prev_end_ns
    FROM _ordered_ops WHERE scope = 'compute'
),
per_stream AS (
    SELECT device_id, stream_id, start_ns, pid, correlation_id,
           start_ns - max(end_ns) OVER (PARTITION BY device_id, stream_id ORDER BY start_ns, end_ns
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS gap_ns,
           max(end_ns) OVER (PARTITION BY device_id, stream_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM compute
),
per_device AS (
    SELECT device_id, NULL::BIGINT AS stream_id, start_ns, pid, correlation_id,
           start_ns - device_prev_end_ns AS gap_ns, device_prev_end_ns AS prev_end_ns
    FROM compute
),
all_gaps AS (
    SELECT g.device_id, g.stream_id, greatest(g.gap_ns, 0) AS gap_ns, g.gap_ns IS NOT NULL AS has_prev,
           l.api_end_ns >= g.prev_end_ns AS host_wait
    FROM (SELECT * FROM per_stream UNION ALL SELECT * FROM per_device) g
    LEFT JOIN _issuing_calls l ON l.pid = g.pid AND l.correlation_id = g.correlation_id
)
SELECT device_id, stream_id,
       count(*) AS kernel_count,
       count(*) FILTER (WHERE has_prev) AS gap_count,
       coalesce(sum(gap_ns), 0) AS total_gap_ns,
       avg(gap_ns) AS mean_gap_ns,
       quantile_cont(gap_ns, 0.5) AS p50_gap_ns,
       quantile_cont(gap_ns, 0.9) AS p90_gap_ns,
       quantile_cont(gap_ns, 0.99) AS p99_gap_ns,
       count(*) FILTER (WHERE gap_ns > ${gap_threshold_ns}) AS gaps_over_threshold,
       coalesce(sum(gap_ns) FILTER (WHERE host_wait), 0) AS host_wait_gap_ns,
       coalesce(sum(gap_ns) FILTER (WHERE NOT coalesce(host_wait, false)), 0) AS other_gap_ns
FROM all_gaps
GROUP BY device_id, stream_id
ORDER BY device_id, stream_id NULLS FIRST
