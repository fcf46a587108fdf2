-- @fact gap_histogram
-- @doc Histogram of the gaps between consecutive kernels on each GPU (kernels and graph replays of all
-- @doc streams merged, the device rows of kernel_gaps): one row per (device, log-spaced length bucket) with
-- @doc the number of gaps and the time they add up to, split into idle time (nothing running on the GPU, the
-- @doc _idle_gaps inside the gap) and time in which only copies or memsets ran. Every bucket is listed, empty
-- @doc ones too; back-to-back or overlapping kernels leave no gap and are not counted. Many gaps in the few-µs
-- @doc buckets holding most of the idle time is the signature of launch overhead; a few idle gaps over 1 ms
-- @doc point at the host (Python, scheduling, I/O) or at synchronisation; gaps filled by copies point at the
-- @doc transfers (pcie-bound), not at idle time.
-- @report
-- @needs _timeline
-- @requires kernels|graph_launches
-- @column device_id CUDA device index.
-- @column bucket Bucket index, 0-based, shortest gaps first.
-- @column lower_ns Shortest gap in the bucket (inclusive, ns).
-- @column upper_ns Longest gap in the bucket (exclusive, ns); NULL for the last, open-ended bucket.
-- @column gap_count Gaps in the bucket.
-- @column total_gap_ns Time between kernels of the gaps in the bucket (ns): idle_ns + copy_ns.
-- @column idle_ns Of total_gap_ns, the time nothing ran on the GPU (ns).
-- @column copy_ns Of total_gap_ns, the time only copies or memsets ran, no kernel (ns).
-- @column count_share Share of the device's gaps in this bucket (0-1).
-- @column time_share Share of the device's time between kernels (its total_gap_ns) in this bucket (0-1).
-- @check device_id not_null
-- @check bucket non_negative
-- @check gap_count non_negative
-- @check total_gap_ns non_negative
-- @check idle_ns non_negative
-- @check copy_ns non_negative
-- @check count_share range 0 1
-- @check time_share range 0 1
WITH buckets(bucket, lower_ns, upper_ns) AS (
    VALUES (0, 0, 1000), (1, 1000, 2000), (2, 2000, 5000), (3, 5000, 10000), (4, 10000, 20000),
           (5, 20000, 50000), (6, 50000, 100000), (7, 100000, 1000000), (8, 1000000, 10000000),
           (9, 10000000, NULL)
),
-- Each device's kernels that close a gap, with the idle time just before them (nothing running), and its first
-- kernel (prev_compute_end_ns NULL: it closes no gap). A gap in which no copy or memset ran is idle throughout:
-- the idle time before its kernel is the whole gap (prev_end_ns = prev_compute_end_ns).
ends AS (
    SELECT device_id, start_ns AS end_ns, start_ns - prev_compute_end_ns AS gap_ns,
           greatest(start_ns - coalesce(prev_end_ns, start_ns), 0) AS idle_before_ns
    FROM _timeline
    WHERE is_compute AND (start_ns > prev_compute_end_ns OR prev_compute_end_ns IS NULL)
),
-- The kernels closing a gap in which copies or memsets ran, and the first kernel.
copied AS (SELECT * FROM ends WHERE gap_ns IS NULL OR idle_before_ns < gap_ns),
-- The other idle time of those gaps: the idle gaps (as in _idle_gaps) that a copy or memset closes. Each lies
-- inside the gap that the first kernel starting at or after it closes (no kernel runs in it, and copies ran in
-- that gap); those before the first kernel join the first kernel and belong to no gap, those after the last
-- kernel join none. Only these idle gaps and these kernels are joined, so a run of launches with no copy
-- between them costs no join.
copy_idle AS (
    SELECT e.device_id, e.end_ns, sum(c.gap_ns) AS idle_ns
    FROM (SELECT device_id, start_ns, start_ns - prev_end_ns AS gap_ns FROM _timeline
          WHERE NOT is_compute AND start_ns > prev_end_ns) c
    ASOF JOIN copied e ON e.device_id = c.device_id AND e.end_ns >= c.start_ns
    GROUP BY e.device_id, e.end_ns
),
gaps AS (
    SELECT e.device_id, e.gap_ns, least(e.idle_before_ns + coalesce(i.idle_ns, 0), e.gap_ns) AS idle_ns
    FROM ends e LEFT JOIN copy_idle i ON i.device_id = e.device_id AND i.end_ns = e.end_ns
    WHERE e.gap_ns > 0
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
           count(*) AS gap_count, sum(gap_ns) AS total_gap_ns, sum(idle_ns) AS idle_ns
    FROM gaps GROUP BY ALL
),
totals AS (
    SELECT device_id, count(*) AS n, sum(gap_ns) AS ns FROM gaps GROUP BY device_id
)
-- Shares from a joined aggregate, not a window: DuckDB 1.5.5 windows over small aggregates can fail.
SELECT d.device_id, b.bucket, CAST(b.lower_ns AS BIGINT) AS lower_ns, CAST(b.upper_ns AS BIGINT) AS upper_ns,
       coalesce(x.gap_count, 0) AS gap_count, CAST(coalesce(x.total_gap_ns, 0) AS BIGINT) AS total_gap_ns,
       CAST(coalesce(x.idle_ns, 0) AS BIGINT) AS idle_ns,
       CAST(coalesce(x.total_gap_ns - x.idle_ns, 0) AS BIGINT) AS copy_ns,
       coalesce(x.gap_count / nullif(t.n, 0), 0) AS count_share,
       coalesce(x.total_gap_ns / nullif(t.ns, 0), 0) AS time_share
FROM devices d CROSS JOIN buckets b
LEFT JOIN binned x ON x.device_id = d.device_id AND x.bucket = b.bucket
LEFT JOIN totals t ON t.device_id = d.device_id
ORDER BY d.device_id, b.bucket
