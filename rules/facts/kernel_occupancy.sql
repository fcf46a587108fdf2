-- @fact kernel_occupancy
-- @doc One row per (GPU, kernel name) for the kernels that take the most time on each GPU: how many CTAs
-- @doc (thread blocks) a launch has against the GPU's SM count, and the share of the SMs such a grid can use
-- @doc at all (least(CTAs / SMs, 1): a grid of 8 CTAs keeps at most 8 of 132 SMs busy, whatever each CTA does).
-- @doc Every row also carries the device's aggregates over all its kernels: the share of kernel time in
-- @doc launches with fewer CTAs than SMs ("small grids"; collective-communication kernels such as NCCL's are
-- @doc left out, they launch few CTAs by design) and the SM time those launches leave unused.
-- @doc Theoretical occupancy (resident warps per SM) is not computed: it needs per-SM register, shared-memory
-- @doc and warp limits that the canonical views do not carry. Kernels without a grid size, and GPUs whose SM
-- @doc count the export does not give, have no rows.
-- @per-phase
-- @needs gpu_utilization _kernel_classes
-- @requires kernels devices.sm_count kernels.grid_size
-- @param top_kernels 20 range 1 inf
-- @param top_small_grid_kernels 3 range 1 inf
-- @column device_id CUDA device index.
-- @column sm_count Streaming multiprocessors of the device.
-- @column kernel_rank Rank of the kernel by GPU time on the device (1 = most time).
-- @column name Demangled kernel name.
-- @column short_name Base kernel name.
-- @column launches Executions of the kernel on the device.
-- @column total_ns Sum of its durations (ns).
-- @column kernel_time_share total_ns / the device's kernel time (0-1).
-- @column ctas_per_launch Median CTAs (thread blocks, gridX*gridY*gridZ) per launch.
-- @column threads_per_cta Median threads per CTA.
-- @column registers_per_thread Median registers per thread.
-- @column ctas_per_sm ctas_per_launch / sm_count.
-- @column sm_share Share of the SMs a median launch can use: least(ctas_per_sm, 1) (0-1).
-- @column is_small_grid The median launch has fewer CTAs than the device has SMs.
-- @column is_communication Communication kernel, class communication of rules/vocabulary/operation_classes.yaml (not counted as a small grid).
-- @column device_kernel_ns Sum of all kernel durations on the device (ns).
-- @column device_kernel_count Kernels executed on the device.
-- @column window_ns The device window (ns).
-- @column small_grid_ns Kernel time of launches with fewer CTAs than SMs, collectives aside (ns).
-- @column small_grid_time_share small_grid_ns / device_kernel_ns (0-1).
-- @column small_grid_sm_share Time-weighted mean share of the SMs those launches can use (0-1).
-- @column small_grid_unused_fraction SM time those launches leave unused, sum(duration * (1 - sm share)), as a share of the device window (0-1).
-- @column small_grid_kernel_count Distinct kernels with such launches.
-- @column small_grid_gemm_share Share of small_grid_ns in GEMM kernels (class gemm of rules/vocabulary/operation_classes.yaml): split-K advice needs GEMMs (0-1).
-- @column small_grid_kernels The small-grid kernels with the most time: a list of {name, launches, ctas, sm_share, time_share}.
-- @check device_id not_null
-- @check sm_count not_null
-- @check kernel_rank not_null
-- @check launches non_negative
-- @check total_ns non_negative
-- @check device_kernel_count non_negative
-- @check kernel_time_share range 0 1
-- @check ctas_per_sm non_negative
-- @check sm_share range 0 1
-- @check small_grid_time_share range 0 1
-- @check small_grid_sm_share range 0 1
-- @check small_grid_unused_fraction range 0 1
-- @check small_grid_gemm_share range 0 1
WITH dev AS (
    SELECT device_id, any_value(sm_count) AS sm_count FROM devices WHERE sm_count > 0 GROUP BY device_id
),
launch AS (
    SELECT k.device_id, k.name_id, k.dur_ns, k.grid_size, k.block_size, k.registers_per_thread, d.sm_count,
           least(k.grid_size / d.sm_count, 1.0) AS sm_share
    FROM _kernels_by_id k JOIN dev d USING (device_id)
    WHERE k.grid_size > 0
),
-- A kernel repeats a few launch configurations millions of times: one row per configuration, with its launches,
-- and the medians below read from these counts instead of sorting every launch.
configs AS (
    SELECT device_id, name_id, grid_size, block_size, registers_per_thread, any_value(sm_count) AS sm_count,
           count(*) AS n, sum(dur_ns) AS ns, sum(dur_ns * sm_share) AS used_ns
    FROM launch GROUP BY device_id, name_id, grid_size, block_size, registers_per_thread
),
-- Grouped on the integer name id, the text is looked at once per name.
names AS (
    SELECT name_id, name, short_name, op_class = 'communication' AS is_communication, op_class = 'gemm' AS is_gemm
    FROM _kernel_classes WHERE name_id IN (SELECT DISTINCT name_id FROM configs)
),
device_time AS (
    SELECT device_id, sum(dur_ns) AS device_kernel_ns, count(*) AS device_kernel_count
    FROM _kernels_by_id GROUP BY device_id
),
small_configs AS (
    SELECT c.*, n.is_gemm FROM configs c JOIN names n USING (name_id)
    WHERE c.grid_size < c.sm_count AND NOT n.is_communication
),
-- The median of a column over launches, as quantile_disc(x, 0.5) takes it: the value at index (n - 1) // 2 of the
-- n launches in order (NULLs left out), that is the least value whose running count of launches passes it.
medians AS (
    SELECT device_id, name_id, which, min(v) AS median FROM (
        SELECT *, sum(n) OVER (PARTITION BY which, device_id, name_id ORDER BY v ROWS UNBOUNDED PRECEDING) AS upto,
               sum(n) OVER (PARTITION BY which, device_id, name_id) AS total
        FROM (SELECT 'grid' AS which, device_id, name_id, grid_size AS v, n FROM configs
              UNION ALL SELECT 'block', device_id, name_id, block_size, n FROM configs
              UNION ALL SELECT 'registers', device_id, name_id, registers_per_thread, n FROM configs
              UNION ALL SELECT 'small grid', device_id, name_id, grid_size, n FROM small_configs)
        WHERE v IS NOT NULL
    )
    WHERE upto > (total - 1) // 2
    GROUP BY device_id, name_id, which
),
small AS (
    SELECT device_id, sum(ns) AS small_ns, sum(used_ns) AS used_ns, sum(ns) - sum(used_ns) AS unused_ns,
           count(DISTINCT name_id) AS kernel_n, coalesce(sum(ns) FILTER (WHERE is_gemm), 0) AS gemm_ns
    FROM small_configs GROUP BY device_id
),
small_per_name AS (
    SELECT c.device_id, c.name_id, sum(c.n) AS n, sum(c.ns) AS ns, any_value(m.median) AS ctas,
           sum(c.used_ns) / nullif(sum(c.ns), 0) AS sm_share
    FROM small_configs c
    LEFT JOIN medians m ON m.device_id = c.device_id AND m.name_id = c.name_id AND m.which = 'small grid'
    GROUP BY c.device_id, c.name_id
),
small_top AS (
    SELECT s.device_id,
           list({'name': coalesce(n.short_name, n.name), 'launches': s.n, 'ctas': s.ctas, 'sm_share': s.sm_share,
                 'time_share': s.ns / nullif(t.device_kernel_ns, 0)} ORDER BY s.ns DESC, n.name) AS kernels
    FROM (SELECT *, row_number() OVER (PARTITION BY device_id ORDER BY ns DESC, name_id) AS rank
          FROM small_per_name) s
    JOIN names n USING (name_id) JOIN device_time t USING (device_id)
    WHERE s.rank <= ${top_small_grid_kernels}
    GROUP BY s.device_id
),
per_name AS (
    SELECT c.device_id, c.name_id, any_value(c.sm_count) AS sm_count, sum(c.n) AS launches, sum(c.ns) AS total_ns,
           any_value(g.median) AS ctas_per_launch, any_value(b.median) AS threads_per_cta,
           any_value(r.median) AS registers_per_thread,
           row_number() OVER (PARTITION BY c.device_id ORDER BY sum(c.ns) DESC, c.name_id) AS kernel_rank
    FROM configs c
    LEFT JOIN medians g ON g.device_id = c.device_id AND g.name_id = c.name_id AND g.which = 'grid'
    LEFT JOIN medians b ON b.device_id = c.device_id AND b.name_id = c.name_id AND b.which = 'block'
    LEFT JOIN medians r ON r.device_id = c.device_id AND r.name_id = c.name_id AND r.which = 'registers'
    GROUP BY c.device_id, c.name_id
)
SELECT p.device_id, p.sm_count, p.kernel_rank, n.name, n.short_name, p.launches, p.total_ns,
       least(p.total_ns / nullif(t.device_kernel_ns, 0), 1) AS kernel_time_share,
       p.ctas_per_launch, p.threads_per_cta, p.registers_per_thread,
       p.ctas_per_launch / p.sm_count AS ctas_per_sm,
       least(p.ctas_per_launch / p.sm_count, 1.0) AS sm_share,
       p.ctas_per_launch < p.sm_count AS is_small_grid, n.is_communication,
       t.device_kernel_ns, t.device_kernel_count, u.window_ns,
       coalesce(s.small_ns, 0) AS small_grid_ns,
       least(coalesce(s.small_ns, 0) / nullif(t.device_kernel_ns, 0), 1) AS small_grid_time_share,
       s.used_ns / nullif(s.small_ns, 0) AS small_grid_sm_share,
       CASE WHEN u.window_ns > 0 THEN least(coalesce(s.unused_ns, 0) / u.window_ns, 1) ELSE 0 END
           AS small_grid_unused_fraction,
       coalesce(s.kernel_n, 0) AS small_grid_kernel_count,
       least(s.gemm_ns / nullif(s.small_ns, 0), 1) AS small_grid_gemm_share,
       coalesce(st.kernels, []) AS small_grid_kernels
FROM per_name p
JOIN names n USING (name_id)
JOIN device_time t USING (device_id)
LEFT JOIN gpu_utilization u USING (device_id)
LEFT JOIN small s USING (device_id)
LEFT JOIN small_top st USING (device_id)
WHERE p.kernel_rank <= ${top_kernels}
ORDER BY p.device_id, p.kernel_rank
