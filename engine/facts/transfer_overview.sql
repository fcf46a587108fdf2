-- @fact transfer_overview
-- @doc One row per GPU that did work: how much of its window went to data movement that left the
-- @doc compute engines idle, split into long copies (PCIe-bound), pageable-memory copies and unified-
-- @doc memory page migrations.
-- @needs _copy_stalls gpu_utilization _idle_gaps
-- @param long_copy_ns 100000
-- @column device_id CUDA device index.
-- @column window_ns Device window (ns).
-- @column copy_count Copies and memsets.
-- @column copy_ns Time in copies and memsets (ns).
-- @column copy_bytes Bytes moved.
-- @column stall_ns Copy time with no kernel running (ns).
-- @column stall_fraction stall_ns / window_ns (0-1).
-- @column long_copy_count Copies longer than long_copy_ns.
-- @column long_copy_stall_ns Stall time inside those long copies (ns).
-- @column long_copy_stall_fraction long_copy_stall_ns / window_ns (0-1).
-- @column main_direction Copy direction with the most stall time.
-- @column main_direction_gbps Effective bandwidth of that direction (GB/s).
-- @column pageable_count Copies from or to pageable host memory.
-- @column pageable_bytes Bytes in those copies.
-- @column pageable_ns Time in those copies (ns).
-- @column pageable_stall_fraction Their stall time / window_ns (0-1).
-- @column uvm_count Unified-memory migrations.
-- @column uvm_bytes Bytes migrated.
-- @column uvm_ns Time in migrations (ns).
-- @column uvm_fraction uvm_ns / window_ns (0-1).
-- @column uvm_idle_ns GPU idle time that ends in a migration: the GPU waiting on page faults (ns).
-- @column uvm_cost_fraction (migration stall time + uvm_idle_ns) / window_ns: what unified memory costs (0-1).
-- @column compute_utilization Kernel and graph-replay busy share of the window (0-1).
-- @check device_id not_null
-- @check device_id unique
-- @check copy_count non_negative
-- @check copy_ns non_negative
-- @check stall_ns non_negative
-- @check stall_fraction range 0 1
-- @check long_copy_stall_fraction range 0 1
-- @check pageable_stall_fraction range 0 1
-- @check uvm_fraction range 0 1
-- @check uvm_cost_fraction range 0 1
-- @check compute_utilization range 0 1
WITH dir AS (
    SELECT device_id, copy_kind, sum(stall_ns) AS s, sum(bytes) AS b, sum(dur_ns) AS d,
           row_number() OVER (PARTITION BY device_id ORDER BY sum(stall_ns) DESC, copy_kind) AS rk
    FROM _copy_stalls WHERE op = 'memcpy' GROUP BY device_id, copy_kind
),
agg AS (
    SELECT device_id, count(*) AS copy_count, sum(dur_ns) AS copy_ns, coalesce(sum(bytes), 0) AS copy_bytes,
           sum(stall_ns) AS stall_ns,
           count(*) FILTER (WHERE dur_ns > ${long_copy_ns} AND op = 'memcpy') AS long_copy_count,
           coalesce(sum(stall_ns) FILTER (WHERE dur_ns > ${long_copy_ns} AND op = 'memcpy'), 0) AS long_copy_stall_ns,
           count(*) FILTER (WHERE op = 'memcpy' AND (src_mem = 'pageable' OR dst_mem = 'pageable')) AS pageable_count,
           coalesce(sum(bytes) FILTER (WHERE op = 'memcpy' AND (src_mem = 'pageable' OR dst_mem = 'pageable')), 0)
               AS pageable_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE op = 'memcpy' AND (src_mem = 'pageable' OR dst_mem = 'pageable')), 0)
               AS pageable_ns,
           coalesce(sum(stall_ns) FILTER (WHERE op = 'memcpy' AND (src_mem = 'pageable' OR dst_mem = 'pageable')), 0)
               AS pageable_stall_ns,
           count(*) FILTER (WHERE is_uvm) AS uvm_count,
           coalesce(sum(bytes) FILTER (WHERE is_uvm), 0) AS uvm_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE is_uvm), 0) AS uvm_ns
           , coalesce(sum(stall_ns) FILTER (WHERE is_uvm), 0) AS uvm_stall_ns
    FROM _copy_stalls GROUP BY device_id
),
uvm_idle AS (
    SELECT device_id, coalesce(sum(gap_ns), 0) AS uvm_idle_ns FROM _idle_gaps WHERE cause = 'uvm' GROUP BY device_id
)
SELECT u.device_id, u.window_ns, a.copy_count, a.copy_ns, a.copy_bytes, a.stall_ns,
       CASE WHEN u.window_ns > 0 THEN a.stall_ns / u.window_ns ELSE 0 END AS stall_fraction,
       a.long_copy_count, a.long_copy_stall_ns,
       CASE WHEN u.window_ns > 0 THEN a.long_copy_stall_ns / u.window_ns ELSE 0 END AS long_copy_stall_fraction,
       d.copy_kind AS main_direction, CASE WHEN d.d > 0 THEN d.b / d.d END AS main_direction_gbps,
       a.pageable_count, a.pageable_bytes, a.pageable_ns,
       CASE WHEN u.window_ns > 0 THEN a.pageable_stall_ns / u.window_ns ELSE 0 END AS pageable_stall_fraction,
       a.uvm_count, a.uvm_bytes, a.uvm_ns,
       CASE WHEN u.window_ns > 0 THEN least(a.uvm_ns / u.window_ns, 1.0) ELSE 0 END AS uvm_fraction,
       coalesce(ui.uvm_idle_ns, 0) AS uvm_idle_ns,
       CASE WHEN u.window_ns > 0 THEN least((a.uvm_stall_ns + coalesce(ui.uvm_idle_ns, 0)) / u.window_ns, 1.0)
            ELSE 0 END AS uvm_cost_fraction,
       u.compute_utilization
FROM gpu_utilization u JOIN agg a USING (device_id)
LEFT JOIN uvm_idle ui ON ui.device_id = u.device_id
LEFT JOIN dir d ON d.device_id = u.device_id AND d.rk = 1
ORDER BY u.device_id
