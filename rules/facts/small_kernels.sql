-- @fact small_kernels
-- @doc One row per GPU that ran kernels: the idle time between operations that were already queued
-- @doc (_idle_gaps cause 'gpu-side': the launch call had returned before the GPU went idle, and the gap is a few
-- @doc µs), the fixed per-kernel cost on the GPU side that short kernels cannot amortise, and the most frequent
-- @doc short kernels.
-- @per-phase
-- @needs _idle_gaps gpu_utilization launch_overhead _kernel_classes
-- @requires kernels
-- @param short_kernel_ns 10000
-- @param top_kernels 3 range 1 inf
-- @column device_id CUDA device index.
-- @column gpu_side_idle_ns Idle time between operations already queued (ns).
-- @column gpu_side_fraction gpu_side_idle_ns / the device window (0-1).
-- @column gpu_side_share gpu_side_idle_ns / all idle time of the device (0-1).
-- @column gpu_side_gap_count Such gaps.
-- @column median_gpu_side_gap_ns Their median length (ns).
-- @column kernel_count Kernels on the device.
-- @column median_kernel_ns Median kernel duration (ns).
-- @column short_kernel_count Kernels shorter than short_kernel_ns.
-- @column short_kernel_share short_kernel_count / kernel_count (0-1).
-- @column top_short_kernels The most frequent kernels shorter than short_kernel_ns: a list of {name, calls, mean_ns}.
-- @column short_kernel_classes The operation classes of the kernels shorter than short_kernel_ns (rules/vocabulary/operation_classes.yaml): a list of {op_class, calls, share} (share of those kernels), the most frequent first.
-- @column overhead_ratio Gap time / (kernel time + gap time) of the device (launch_overhead).
-- @column window_ns The device window (ns).
-- @check device_id not_null
-- @check device_id unique
-- @check gpu_side_idle_ns non_negative
-- @check gpu_side_fraction range 0 1
-- @check gpu_side_share range 0 1
-- @check short_kernel_share range 0 1
-- @check overhead_ratio range 0 1
WITH gaps AS (
    SELECT device_id, count(*) AS n, quantile_cont(gap_ns, 0.5) AS median_ns
    FROM _idle_gaps WHERE cause = 'gpu-side' GROUP BY device_id
),
k AS (
    SELECT device_id, count(*) AS n, quantile_cont(dur_ns, 0.5) AS median_ns,
           count(*) FILTER (WHERE dur_ns < ${short_kernel_ns}) AS short_n
    FROM _kernels_by_id GROUP BY device_id
),
-- Counted per name id first (an integer), then per base name, so templated variants of one kernel add up.
per_id AS (
    SELECT device_id, name_id, count(*) AS n, sum(dur_ns) AS ns
    FROM _kernels_by_id WHERE dur_ns < ${short_kernel_ns} GROUP BY device_id, name_id
),
names AS (SELECT name_id, coalesce(short_name, name) AS name, op_class FROM _kernel_classes
          WHERE name_id IN (SELECT name_id FROM per_id)),
short_classes AS (
    SELECT device_id, list({'op_class': op_class, 'calls': n, 'share': n / total} ORDER BY n DESC, op_class)
               AS short_kernel_classes
    FROM (SELECT p.device_id, n.op_class, sum(p.n) AS n, sum(sum(p.n)) OVER (PARTITION BY p.device_id) AS total
          FROM per_id p JOIN names n USING (name_id) GROUP BY p.device_id, n.op_class)
    GROUP BY device_id
),
short_names AS (
    SELECT p.device_id, n.name, sum(p.n) AS n, sum(p.ns) / sum(p.n) AS mean_ns,
           row_number() OVER (PARTITION BY p.device_id ORDER BY sum(p.n) DESC, n.name) AS rank
    FROM per_id p JOIN names n USING (name_id) GROUP BY p.device_id, n.name
),
top AS (
    SELECT device_id, list({'name': name, 'calls': n, 'mean_ns': mean_ns} ORDER BY rank) AS top_short_kernels
    FROM short_names WHERE rank <= ${top_kernels} GROUP BY device_id
)
SELECT u.device_id, u.idle_gpu_side_ns AS gpu_side_idle_ns,
       CASE WHEN u.window_ns > 0 THEN u.idle_gpu_side_ns / u.window_ns ELSE 0 END AS gpu_side_fraction,
       CASE WHEN u.idle_ns > 0 THEN least(u.idle_gpu_side_ns / u.idle_ns, 1) ELSE 0 END AS gpu_side_share,
       coalesce(g.n, 0) AS gpu_side_gap_count, g.median_ns AS median_gpu_side_gap_ns,
       coalesce(k.n, 0) AS kernel_count, k.median_ns AS median_kernel_ns, coalesce(k.short_n, 0) AS short_kernel_count,
       CASE WHEN k.n > 0 THEN k.short_n / k.n ELSE 0 END AS short_kernel_share,
       coalesce(t.top_short_kernels, []) AS top_short_kernels, coalesce(c.short_kernel_classes, []) AS short_kernel_classes,
       l.overhead_ratio, u.window_ns
FROM gpu_utilization u
JOIN launch_overhead l USING (device_id)
LEFT JOIN gaps g USING (device_id)
LEFT JOIN k USING (device_id)
LEFT JOIN top t USING (device_id)
LEFT JOIN short_classes c USING (device_id)
ORDER BY u.device_id
