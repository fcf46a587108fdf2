-- @fact operation_classes
-- @doc Where each GPU's time goes by operation: one row per GPU and operation class (gemm, attention, norm,
-- @doc elementwise, communication ... in the order of rules/vocabulary/operation_classes.yaml, then memcpy, memset and
-- @doc other), with the class's GPU time, its share, kernel count, mean kernel time and top kernels. A kernel's
-- @doc class is the first class whose pattern matches its demangled name (op_class_of()); copies and memsets come
-- @doc from their own tables; kernels no pattern matches are `other`, listed with their top names so a user sees
-- @doc what to classify. Times are sums of durations (overlapping streams count twice), so the shares of one GPU
-- @doc add up to 1. Kernels inside CUDA-graph replays traced as whole graphs (graph trace mode) are not seen.
-- @doc Computed per phase too.
-- @report per-phase
-- @per-phase
-- @requires kernels|memcpys|memsets
-- @needs _kernel_classes
-- @param top_class_kernels 3 range 1 inf
-- @column device_id CUDA device index.
-- @column op_class Operation class.
-- @column class_rank Position of the class in the display order (the order of the class file, then memcpy, memset, other).
-- @column op_count Kernels (or copies, memsets) of the class.
-- @column total_ns Sum of their durations (ns).
-- @column mean_ns Mean duration (ns).
-- @column share total_ns / the GPU's time in kernels, copies and memsets (0-1).
-- @column share_of_kernel_time total_ns / the GPU's kernel time (0-1); NULL for memcpy and memset.
-- @column top_kernels The heaviest kernels of the class, at most top_class_kernels: a list of {name, calls, total_ns, share} (share of the class's time); empty for memcpy and memset.
-- @check device_id not_null
-- @check op_class not_null
-- @check op_count non_negative
-- @check total_ns non_negative
-- @check share range 0 1
-- @check share_of_kernel_time range 0 1
-- Each distinct name is classified once, on its integer id: the regular expressions never run per kernel.
WITH per_name AS (
    SELECT device_id, name_id, count(*) AS n, sum(dur_ns) AS ns FROM _kernels_by_id WHERE device_id IS NOT NULL
    GROUP BY device_id, name_id
),
names AS (
    SELECT name_id, name, op_class FROM _kernel_classes WHERE name_id IN (SELECT name_id FROM per_name)
),
named AS (
    SELECT p.device_id, n.op_class, n.name, sum(p.n) AS n, sum(p.ns) AS ns
    FROM per_name p JOIN names n USING (name_id) GROUP BY p.device_id, n.op_class, n.name
),
ops AS (
    SELECT device_id, op_class, sum(n) AS n, sum(ns) AS ns, true AS is_kernel FROM named GROUP BY device_id, op_class
    UNION ALL
    SELECT device_id, 'memcpy', count(*), sum(greatest(end_ns - start_ns, 0)), false FROM memcpys
    WHERE device_id IS NOT NULL GROUP BY device_id
    UNION ALL
    SELECT device_id, 'memset', count(*), sum(greatest(end_ns - start_ns, 0)), false FROM memsets
    WHERE device_id IS NOT NULL GROUP BY device_id
),
totals AS (
    SELECT device_id, sum(ns) AS all_ns, sum(ns) FILTER (WHERE is_kernel) AS kernel_ns FROM ops GROUP BY device_id
),
ranked AS (
    SELECT device_id, op_class, name, n, ns,
           row_number() OVER (PARTITION BY device_id, op_class ORDER BY ns DESC, name) AS rank
    FROM named
),
top AS (
    SELECT r.device_id, r.op_class,
           list({'name': r.name, 'calls': r.n, 'total_ns': r.ns, 'share': CASE WHEN o.ns > 0 THEN r.ns / o.ns END}
                ORDER BY r.rank) AS top_kernels
    FROM ranked r JOIN ops o ON o.device_id = r.device_id AND o.op_class = r.op_class AND o.is_kernel
    WHERE r.rank <= ${top_class_kernels} GROUP BY r.device_id, r.op_class
)
SELECT o.device_id, o.op_class, coalesce(c.rank, -1) AS class_rank, o.n AS op_count, CAST(o.ns AS BIGINT) AS total_ns,
       CASE WHEN o.n > 0 THEN o.ns / o.n END AS mean_ns,
       CASE WHEN t.all_ns > 0 THEN o.ns / t.all_ns ELSE 0 END AS share,
       CASE WHEN o.is_kernel THEN CASE WHEN t.kernel_ns > 0 THEN o.ns / t.kernel_ns ELSE 0 END END
           AS share_of_kernel_time,
       coalesce(p.top_kernels, []) AS top_kernels
FROM ops o JOIN totals t USING (device_id)
LEFT JOIN _op_classes c ON c.op_class = o.op_class
LEFT JOIN top p ON p.device_id = o.device_id AND p.op_class = o.op_class
ORDER BY o.device_id, o.ns DESC, class_rank
