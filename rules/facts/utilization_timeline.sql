-- @fact utilization_timeline
-- @doc GPU utilisation over time for charts: the profile's GPU window cut into equal bins, one row per
-- @doc (device, bin) with the share of the bin with a kernel or graph replay running (gpu_utilization's
-- @doc utilization, bin by bin; copies and memsets alone do not count).
-- @report
-- @needs _timeline
-- @requires kernels|graph_launches
-- @param timeline_bins 100 range 1 10000
-- @column device_id CUDA device index.
-- @column bin Bin index, 0-based.
-- @column bin_start_ns Bin start (ns).
-- @column bin_end_ns Bin end (ns).
-- @column busy_fraction Share of the bin with a kernel or graph replay running (0-1).
-- @check device_id not_null
-- @check bin non_negative
-- @check busy_fraction not_null
-- @check busy_fraction range 0 1
WITH span AS (
    SELECT min(start_ns) AS t0, greatest(max(end_ns) - min(start_ns), 1) AS len FROM _timeline
),
bins AS (
    SELECT d.device_id, b.bin,
           s.t0 + (s.len * b.bin) // ${timeline_bins} AS bin_start_ns,
           s.t0 + (s.len * (b.bin + 1)) // ${timeline_bins} AS bin_end_ns
    FROM (SELECT DISTINCT device_id FROM _timeline) d
    CROSS JOIN span s
    CROSS JOIN (SELECT range AS bin FROM range(${timeline_bins})) b
),
-- The disjoint pieces each kernel or graph replay adds to the union of compute time (see _timeline), cut at
-- bin edges.
busy AS (
    SELECT device_id, greatest(start_ns, coalesce(prev_compute_end_ns, start_ns)) AS start_ns, end_ns FROM _timeline
    WHERE is_compute AND end_ns > greatest(start_ns, coalesce(prev_compute_end_ns, start_ns))
),
placed AS (
    SELECT i.device_id, i.start_ns, i.end_ns,
           CAST(least((i.start_ns - s.t0) * ${timeline_bins} // s.len, ${timeline_bins} - 1) AS BIGINT) AS first_bin,
           CAST(least((i.end_ns - s.t0) * ${timeline_bins} // s.len, ${timeline_bins} - 1) AS BIGINT) AS last_bin
    FROM busy i CROSS JOIN span s
),
-- Most pieces lie inside one bin and are summed directly; only the few that cross a bin edge are cut.
within AS (
    SELECT device_id, first_bin AS bin, sum(end_ns - start_ns) AS ns FROM placed WHERE first_bin = last_bin
    GROUP BY ALL
),
crossing AS (
    SELECT device_id, bin, sum(greatest(least(end_ns, bin_end_ns) - greatest(start_ns, bin_start_ns), 0)) AS ns
    FROM (SELECT p.device_id, p.start_ns, p.end_ns, b.bin, b.bin_start_ns, b.bin_end_ns
          FROM (SELECT *, unnest(range(first_bin, last_bin + 1)) AS bin FROM placed WHERE first_bin < last_bin) p
          JOIN bins b ON b.device_id = p.device_id AND b.bin = p.bin)
    GROUP BY ALL
)
SELECT b.device_id, b.bin, b.bin_start_ns, b.bin_end_ns,
       (coalesce(w.ns, 0) + coalesce(c.ns, 0)) / greatest(b.bin_end_ns - b.bin_start_ns, 1) AS busy_fraction
FROM bins b
LEFT JOIN within w ON w.device_id = b.device_id AND w.bin = b.bin
LEFT JOIN crossing c ON c.device_id = b.device_id AND c.bin = b.bin
ORDER BY b.device_id, b.bin
