-- @fact gemm_precision
-- @doc One row per GPU and GEMM precision: how the GPU's GEMM kernels (operation class gemm) run, read from
-- @doc their names without GPU metrics (gemm_precision_of(), the gemm_precisions of rules/vocabulary/operation_classes.yaml):
-- @doc fp32 on the CUDA cores (sgemm, simt, FFMA math), tf32, fp16/bf16, fp8 or int8 on the tensor cores, or
-- @doc unknown. With the GPU's compute capability, so a rule can tell whether the GPU has tensor cores (7.0 and
-- @doc later). Computed per phase too.
-- @report
-- @per-phase
-- @needs gpu_utilization _kernel_classes
-- @requires kernels
-- @param top_precision_kernels 3 range 1 inf
-- @column device_id CUDA device index.
-- @column precision fp32, tf32, fp16/bf16, fp8, int8 (or a team's own), or unknown.
-- @column tensor_cores True when the precision runs on tensor cores, false for fp32 on the CUDA cores, NULL when unknown.
-- @column kernel_count GEMM kernels of this precision.
-- @column total_ns Their time (sum of durations, ns).
-- @column share_of_gemm_time total_ns / the GPU's GEMM kernel time (0-1).
-- @column share total_ns / the GPU's kernel time (0-1).
-- @column window_fraction total_ns / the device window (0-1): what these GEMMs cost the GPU, at most.
-- @column compute_capability The GPU's compute capability as a number (8.0 for an A100, 9.0 for an H100). When the export does not record it, the least the GEMM kernels' names require: cuBLAS names a kernel after the architecture it was built for (sm80_xmma_*, ampere_*, volta_*), and such a kernel runs only on that architecture or a later one; NULL when neither says.
-- @column compute_capability_source Where compute_capability comes from: 'export' (the GPU table, TARGET_INFO_GPU computeMajor.computeMinor), 'kernel names' (a lower bound: an H100 running sm80 kernels reads 8.0), or NULL.
-- @column gpu_name The GPU's name.
-- @column top_kernels The heaviest GEMM kernels of this precision, at most top_precision_kernels: a list of {name, calls, total_ns}.
-- @check device_id not_null
-- @check precision not_null
-- @check kernel_count non_negative
-- @check total_ns non_negative
-- @check share_of_gemm_time range 0 1
-- @check share range 0 1
-- @check window_fraction range 0 1
WITH per_name AS (
    SELECT device_id, name_id, count(*) AS n, sum(dur_ns) AS ns FROM _kernels_by_id WHERE device_id IS NOT NULL
    GROUP BY device_id, name_id
),
names AS (
    SELECT name_id, name, gemm_precision_of(name) AS precision
    FROM _kernel_classes WHERE name_id IN (SELECT name_id FROM per_name) AND op_class = 'gemm'
),
device_ns AS (SELECT device_id, sum(ns) AS kernel_ns FROM per_name GROUP BY device_id),
gemms AS (
    SELECT p.device_id, n.precision, n.name, p.n, p.ns,
           row_number() OVER (PARTITION BY p.device_id, n.precision ORDER BY p.ns DESC, n.name) AS rank
    FROM per_name p JOIN names n USING (name_id)
),
grouped AS (
    SELECT device_id, precision, sum(n) AS n, sum(ns) AS ns,
           list({'name': name, 'calls': n, 'total_ns': ns} ORDER BY rank)
               FILTER (WHERE rank <= ${top_precision_kernels}) AS top_kernels
    FROM gemms GROUP BY device_id, precision
),
-- What the kernel names say of the architecture: the highest one a kernel was built for.
arch AS (
    SELECT p.device_id,
           max(coalesce(TRY_CAST(regexp_extract(n.name, '^sm([0-9]{2,3})_', 1) AS INTEGER) / 10.0,
                        CASE WHEN regexp_matches(n.name, '^(hopper|sm90)_') THEN 9.0
                             WHEN regexp_matches(n.name, '^ampere_') THEN 8.0
                             WHEN regexp_matches(n.name, '^turing_') THEN 7.5
                             WHEN regexp_matches(n.name, '^volta_') THEN 7.0 END)) AS cc
    FROM per_name p JOIN names n USING (name_id) GROUP BY p.device_id
),
dev AS (
    SELECT device_id, any_value(TRY_CAST(compute_capability AS DOUBLE)) AS cc, any_value(name) AS gpu_name
    FROM devices GROUP BY device_id
)
SELECT g.device_id, g.precision, p.tensor_cores, g.n AS kernel_count, CAST(g.ns AS BIGINT) AS total_ns,
       g.ns / nullif(sum(g.ns) OVER (PARTITION BY g.device_id), 0) AS share_of_gemm_time,
       CASE WHEN d.kernel_ns > 0 THEN g.ns / d.kernel_ns ELSE 0 END AS share,
       CASE WHEN u.window_ns > 0 THEN least(g.ns / u.window_ns, 1) ELSE 0 END AS window_fraction,
       coalesce(v.cc, a.cc) AS compute_capability,
       CASE WHEN v.cc IS NOT NULL THEN 'export' WHEN a.cc IS NOT NULL THEN 'kernel names' END
           AS compute_capability_source,
       v.gpu_name, g.top_kernels
FROM grouped g JOIN device_ns d USING (device_id)
LEFT JOIN arch a ON a.device_id = g.device_id
LEFT JOIN gpu_utilization u ON u.device_id = g.device_id
LEFT JOIN _gemm_precisions p ON p.precision = g.precision
LEFT JOIN dev v ON v.device_id = g.device_id
ORDER BY g.device_id, g.ns DESC
