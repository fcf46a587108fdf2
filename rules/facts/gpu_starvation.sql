-- @fact gpu_starvation
-- @doc One row per GPU that did work: idle gaps longer than the threshold (default 500 ms, as nsys
-- @doc analyze's gpu_gaps rule) between two GPU operations.
-- @report
-- @needs _idle_gaps gpu_utilization
-- @requires kernels|graph_launches|memcpys|memsets
-- @param starvation_gap_ns 500000000
-- @column device_id CUDA device index.
-- @column op_count GPU operations on the device.
-- @column long_gap_count Gaps longer than starvation_gap_ns.
-- @column long_gap_ns Their total length (ns).
-- @column longest_gap_ns The longest gap (ns).
-- @column longest_gap_start_ns When it began (ns on the capture timeline).
-- @column long_gap_fraction long_gap_ns / device window (0-1).
-- @check device_id not_null
-- @check device_id unique
-- @check long_gap_count non_negative
-- @check long_gap_ns non_negative
-- @check long_gap_fraction range 0 1
SELECT u.device_id, any_value(u.op_count) AS op_count,
       count(g.gap_ns) AS long_gap_count,
       coalesce(sum(g.gap_ns), 0) AS long_gap_ns,
       coalesce(max(g.gap_ns), 0) AS longest_gap_ns,
       arg_max(g.gap_start_ns, g.gap_ns) AS longest_gap_start_ns,
       CASE WHEN any_value(u.window_ns) > 0 THEN coalesce(sum(g.gap_ns), 0) / any_value(u.window_ns) ELSE 0 END
           AS long_gap_fraction
FROM gpu_utilization u
LEFT JOIN _idle_gaps g ON g.device_id = u.device_id AND g.gap_ns > ${starvation_gap_ns}
GROUP BY u.device_id
ORDER BY u.device_id
