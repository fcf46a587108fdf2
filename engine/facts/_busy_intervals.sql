-- @fact _busy_intervals
-- @materialize
-- @doc Union of GPU busy intervals per device and timeline: overlapping work (several streams, copies
-- @doc beside kernels) counts once.
-- @needs _ordered_ops
-- @column scope 'all' or 'compute'.
-- @column device_id CUDA device index.
-- @column start_ns Start of the merged busy interval (ns).
-- @column end_ns End of the merged busy interval (ns).
WITH flagged AS (
    SELECT scope, device_id, start_ns, end_ns,
           sum(CASE WHEN prev_end_ns IS NULL OR start_ns > prev_end_ns THEN 1 ELSE 0 END)
               OVER (PARTITION BY scope, device_id ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS grp
    FROM _ordered_ops
)
SELECT scope, device_id, min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM flagged GROUP BY scope, device_id, grp
