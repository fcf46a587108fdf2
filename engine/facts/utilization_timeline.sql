-- @fact utilization_timeline
-- @doc GPU utilisation over time for charts: the profile's GPU window cut into equal bins, one row per
-- @doc (device, bin) with the busy share of the bin (union of all GPU work).
-- @needs _busy_intervals _gpu_ops
-- @requires kernels
-- @param timeline_bins 100
-- @column device_id CUDA device index.
-- @column bin Bin index, 0-based.
-- @column bin_start_ns Bin start (ns).
-- @column bin_end_ns Bin end (ns).
-- @column busy_fraction Busy share of the bin (0-1).
WITH span AS (
    SELECT min(start_ns) AS t0, greatest(max(end_ns) - min(start_ns), 1) AS len FROM _gpu_ops
),
bins AS (
    SELECT d.device_id, b.bin,
           s.t0 + (s.len * b.bin) // ${timeline_bins} AS bin_start_ns,
           s.t0 + (s.len * (b.bin + 1)) // ${timeline_bins} AS bin_end_ns
    FROM (SELECT DISTINCT device_id FROM _gpu_ops) d
    CROSS JOIN span s
    CROSS JOIN (SELECT range AS bin FROM range(${timeline_bins})) b
),
pieces AS (
    SELECT i.device_id, unnest(range(
               CAST(least((i.start_ns - s.t0) * ${timeline_bins} // s.len, ${timeline_bins} - 1) AS BIGINT),
               CAST(least((i.end_ns - s.t0) * ${timeline_bins} // s.len, ${timeline_bins} - 1) + 1 AS BIGINT))) AS bin,
           i.start_ns, i.end_ns
    FROM _busy_intervals i CROSS JOIN span s WHERE i.scope = 'all'
)
SELECT b.device_id, b.bin, b.bin_start_ns, b.bin_end_ns,
       coalesce(sum(greatest(least(p.end_ns, b.bin_end_ns) - greatest(p.start_ns, b.bin_start_ns), 0)), 0)
           / greatest(b.bin_end_ns - b.bin_start_ns, 1) AS busy_fraction
FROM bins b LEFT JOIN pieces p ON p.device_id = b.device_id AND p.bin = b.bin
GROUP BY b.device_id, b.bin, b.bin_start_ns, b.bin_end_ns
ORDER BY b.device_id, b.bin
