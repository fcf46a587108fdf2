-- @fact kernel_summary
-- @doc One row per kernel name (demangled), heaviest first: count and GPU time, comparable with
-- @doc `nsys stats --report cuda_gpu_kern_sum` summed per name.
-- @report rows=50
-- @requires kernels
-- @needs _kernel_classes
-- @column name Demangled kernel name.
-- @column short_name Base name.
-- @column count Executions.
-- @column total_ns Sum of durations (ns).
-- @column mean_ns Mean duration (ns).
-- @column p50_ns Median duration (ns).
-- @column min_ns Shortest (ns).
-- @column max_ns Longest (ns).
-- @column share_of_kernel_time total_ns / all kernel time (0-1).
-- @column is_communication A communication kernel (NCCL and friends): its op_class is communication.
-- @column op_class Operation class of the kernel (rules/vocabulary/operation_classes.yaml): gemm, attention, norm ... or other.
-- @column gemm_precision For a GEMM, the precision its name says it runs in (fp32 on CUDA cores, tf32, fp16/bf16, fp8, int8, unknown); NULL for other classes.
-- @column grid_size CTAs per launch (gridX*gridY*gridZ) of the dominant launch configuration: the grid and block of the executions with the most time (NULL when the export records no grid).
-- @column block_size Threads per CTA (blockX*blockY*blockZ) of the dominant launch configuration.
-- @column config_count Distinct launch configurations (grid, block) the kernel ran with.
-- @column config_share Share of the kernel's time spent in the dominant configuration (0-1).
-- @check name not_null
-- @check count non_negative
-- @check total_ns non_negative
-- @check min_ns non_negative
-- @check share_of_kernel_time range 0 1
-- @check is_communication not_null
-- @check grid_size non_negative
-- @check block_size non_negative
-- @check config_count non_negative
-- @check config_share range 0 1
-- Grouped on the integer name id (one per distinct name), the text is looked at once per group. The median only per
-- name: DuckDB keeps every value of a quantile's group in memory, outside its memory limit, so a median per launch
-- configuration too (the two groupings of one scan) held every duration twice.
WITH by_name AS (
    SELECT g.*, c.name, c.short_name
    FROM (SELECT name_id, count(*) AS count, sum(dur_ns) AS total_ns, avg(dur_ns) AS mean_ns,
                 quantile_cont(dur_ns, 0.5) AS p50_ns, min(dur_ns) AS min_ns, max(dur_ns) AS max_ns
          FROM _kernels_by_id GROUP BY name_id) g
    -- the names once per id (kernels without a name id keep their short name there too)
    LEFT JOIN _kernel_classes c ON c.name_id IS NOT DISTINCT FROM g.name_id
),
by_config AS (
    SELECT name_id, grid_size, block_size, sum(dur_ns) AS total_ns FROM _kernels_by_id GROUP BY name_id, grid_size, block_size
),
per_name AS (
    SELECT g.name_id, g.name, g.short_name, g.count, g.total_ns, g.mean_ns, g.p50_ns, g.min_ns, g.max_ns,
           coalesce(c.op_class, 'other') AS op_class  -- 'other' for kernels without a name (name_id NULL)
    FROM by_name g LEFT JOIN _kernel_classes c ON c.name_id = g.name_id
),
configs AS (
    SELECT name_id, count(*) AS config_count,
           arg_max({'grid_size': grid_size, 'block_size': block_size, 'ns': total_ns},
                   (total_ns, -coalesce(grid_size, 0), -coalesce(block_size, 0))) AS dominant
    FROM by_config GROUP BY name_id
)
SELECT p.name, p.short_name, p.count, p.total_ns, p.mean_ns, p.p50_ns, p.min_ns, p.max_ns,
       p.total_ns / nullif((SELECT sum(total_ns) FROM per_name), 0) AS share_of_kernel_time,
       coalesce(p.op_class = 'communication', false) AS is_communication, p.op_class,
       CASE WHEN p.op_class = 'gemm' THEN gemm_precision_of(p.name) END AS gemm_precision,
       c.dominant.grid_size AS grid_size, c.dominant.block_size AS block_size, c.config_count,
       CASE WHEN p.total_ns > 0 THEN c.dominant.ns / p.total_ns END AS config_share
FROM per_name p JOIN configs c USING (name_id)
ORDER BY p.total_ns DESC, p.name
