-- @fact kernel_gaps
-- @doc Idle time between consecutive kernels, one row per (device, stream) plus one row per device with
-- @doc stream_id NULL for the device as a whole (kernels and graph replays of all streams merged). A gap
-- @doc is host-wait (as in HTA) when the call that launched the next kernel was still running when the
-- @doc previous kernel ended: the GPU waited for the CPU.
-- @report rows=200
-- @per-phase
-- @needs _timeline
-- @requires kernels|graph_launches
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
-- @check device_id not_null
-- @check kernel_count non_negative
-- @check gap_count non_negative
-- @check total_gap_ns non_negative
-- @check gaps_over_threshold non_negative
-- @check host_wait_gap_ns non_negative
-- @check other_gap_ns non_negative
WITH compute AS (
    SELECT device_id, stream_id, start_ns, end_ns, api_end_ns, prev_compute_end_ns
    FROM _timeline WHERE is_compute
),
-- A device whose compute runs on one stream has the same gaps per stream as for the whole device: its stream
-- row is a copy of its device row, and only devices with several streams need a second sort.
streams AS (
    SELECT device_id, count(DISTINCT stream_id) AS n, any_value(stream_id) AS only_stream FROM compute GROUP BY device_id
),
gaps AS (
    SELECT device_id, stream_id, start_ns, api_end_ns,
           max(end_ns) OVER (PARTITION BY device_id, stream_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM compute WHERE device_id IN (SELECT device_id FROM streams WHERE n > 1)
    UNION ALL
    SELECT device_id, NULL::BIGINT, start_ns, api_end_ns, prev_compute_end_ns FROM compute
),
stats AS (
    SELECT device_id, stream_id,
           count(*) AS kernel_count,
           count(prev_end_ns) AS gap_count,
           coalesce(sum(greatest(start_ns - prev_end_ns, 0)), 0) AS total_gap_ns,
           -- the first kernel of a device or stream has no gap before it: DuckDB's greatest() skips a NULL, so
           -- without the filter it would count as a gap of 0
           avg(greatest(start_ns - prev_end_ns, 0)) FILTER (WHERE prev_end_ns IS NOT NULL) AS mean_gap_ns,
           -- one sorted state for the three percentiles
           quantile_cont(greatest(start_ns - prev_end_ns, 0), [0.5, 0.9, 0.99]) FILTER (WHERE prev_end_ns IS NOT NULL)
               AS q,
           count(*) FILTER (WHERE start_ns - prev_end_ns > ${gap_threshold_ns}) AS gaps_over_threshold,
           coalesce(sum(start_ns - prev_end_ns) FILTER (WHERE start_ns > prev_end_ns AND api_end_ns >= prev_end_ns), 0)
               AS host_wait_gap_ns
    FROM gaps GROUP BY device_id, stream_id
),
rows AS (
    SELECT * FROM stats
    UNION ALL
    SELECT s.device_id, d.only_stream, s.kernel_count, s.gap_count, s.total_gap_ns, s.mean_gap_ns, s.q,
           s.gaps_over_threshold, s.host_wait_gap_ns
    FROM stats s JOIN streams d ON d.device_id = s.device_id AND d.n = 1
    WHERE s.stream_id IS NULL
)
SELECT device_id, stream_id, kernel_count, gap_count, total_gap_ns, mean_gap_ns,
       q[1] AS p50_gap_ns, q[2] AS p90_gap_ns, q[3] AS p99_gap_ns, gaps_over_threshold,
       host_wait_gap_ns, total_gap_ns - host_wait_gap_ns AS other_gap_ns
FROM rows
ORDER BY device_id, stream_id NULLS FIRST
