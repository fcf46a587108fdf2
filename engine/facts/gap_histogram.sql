-- @fact gap_histogram
-- @doc Histogram of the idle gaps between consecutive kernels on each GPU (kernels and graph replays of
-- @doc all streams merged, the device rows of kernel_gaps): one row per (device, log-spaced length bucket)
-- @doc with the number of gaps and the idle time they add up to. Every bucket is listed, empty ones too;
-- @doc back-to-back or overlapping kernels leave no gap and are not counted. Many gaps in the few-µs
-- @doc buckets holding most of the idle time is the signature of launch overhead; a few gaps over 1 ms
-- @doc point at the host (Python, scheduling, I/O) or at synchronisation.
-- @needs _timeline
-- @requires kernels|graph_launches
-- @column device_id CUDA device index.
-- @column bucket Bucket index, 0-based, shortest gaps first.
-- @column lower_ns Shortest gap in the bucket (inclusive, ns).
-- @column upper_ns Longest gap in the bucket (exclusive, ns); NULL for the last, open-ended bucket.
-- @column gap_count Gaps in the bucket.
-- @column total_gap_ns Idle time of the gaps in the bucket (ns).
-- @column count_share Share of the device's gaps in this bucket (0-1).
-- @column time_share Share of the device's idle time between kernels in this bucket (0-1).
-- @check device_id not_null
-- @check bucket non_negative
-- @check gap_count non_negative
-- @check total_gap_ns non_negative
-- @check count_share range 0 1
-- @check time_share range 0 1
WITH buckets(bucket, lower_ns, upper_ns) AS (
    VALUES (0, 0, 1000), (1, 1000, 2000), (2, 2000, 5000), (3, 5000, 10000), (4, 10000, 20000),
           (5, 20000, 50000), (6, 50000, 100000), (7, 100000, 1000000), (8, 1000000, 10000000),
           (9, 10000000, NULL)
),
gaps AS (
    SELECT device_id, start_ns - prev_compute_end_ns AS gap_ns
    FROM _timeline
    WHERE is_compute AND start_ns > prev_compute_end_ns
),
devices AS (
    SELECT DISTINCT device_id FROM _timeline WHERE is_compute
),
-- The bucket of each gap is computed, not joined: a range join of millions of gaps against the buckets is slow.
binned AS (
    SELECT device_id,
           CASE WHEN gap_ns < 1000 THEN 0 WHEN gap_ns < 2000 THEN 1 WHEN gap_ns < 5000 THEN 2
                WHEN gap_ns < 10000 THEN 3 WHEN gap_ns < 20000 THEN 4 WHEN gap_ns < 50000 THEN 5
                WHEN gap_ns < 100000 THEN 6 WHEN gap_ns < 1000000 THEN 7 WHEN gap_ns < 10000000 THEN 8
                ELSE 9 END AS bucket,
           count(*) AS gap_count, sum(gap_ns) AS total_gap_ns
    FROM gaps GROUP BY ALL
),
totals AS (
    SELECT device_id, count(*) AS n, sum(gap_ns) AS ns FROM gaps GROUP BY device_id
)
-- Shares from a joined aggregate, not a window: DuckDB 1.5.5 windows over small aggregates can fail.
SELECT d.device_id, b.bucket, CAST(b.lower_ns AS BIGINT) AS lower_ns, CAST(b.upper_ns AS BIGINT) AS upper_ns,
       coalesce(x.gap_count, 0) AS gap_count, CAST(coalesce(x.total_gap_ns, 0) AS BIGINT) AS total_gap_ns,
       coalesce(x.gap_count / nullif(t.n, 0), 0) AS count_share,
       coalesce(x.total_gap_ns / nullif(t.ns, 0), 0) AS time_share
FROM devices d CROSS JOIN buckets b
LEFT JOIN binned x ON x.device_id = d.device_id AND x.bucket = b.bucket
LEFT JOIN totals t ON t.device_id = d.device_id
ORDER BY d.device_id, b.bucket
