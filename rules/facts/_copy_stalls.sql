-- @fact _copy_stalls
-- @materialize
-- @doc Every copy and memset with the part of it during which no kernel or graph replay ran on its device
-- @doc (the GPU's compute engines were stalled waiting for the transfer).
-- @needs _timeline
-- @column device_id CUDA device index.
-- @column op memcpy or memset.
-- @column copy_kind Direction (memcpys.copy_kind; 'memset' for memsets).
-- @column src_mem Source memory kind.
-- @column dst_mem Destination memory kind.
-- @column is_uvm Unified-memory migration.
-- @column migration_cause Why a unified-memory migration ran (ENUM_CUDA_UNIF_MEM_MIGRATION, CUPTI CUpti_ActivityUnifiedMemoryMigrationCause): 1 user prefetch (cudaMemPrefetchAsync), 2 page fault, 3 speculative prefetch by the driver after a fault, 4 eviction, 5 access counters; NULL for other operations and for exports that do not record it.
-- @column traffic What the operation moves, from its copy kind (CUPTI CUpti_ActivityMemcpyKind): host_device (HtoD, DtoH, HtoA, AtoH: host memory to or from the GPU, over PCIe, or NVLink-C2C on Grace Hopper), device (DtoD, DtoA, AtoD, AtoA: within one GPU), peer (PtoP: between GPUs), uvm (unified-memory migrations, whatever their direction), memset, or other (HtoH, unknown).
-- @column host_mem Host side of a host_device copy, the source of HtoD and HtoA and the destination of DtoH and AtoH: pageable or pinned (else managed or unknown); NULL for other traffic.
-- @column bytes Bytes moved.
-- @column dur_ns Duration (ns).
-- @column stall_ns Part of the duration with no compute on the device (ns).
WITH ops AS (
    SELECT row_number() OVER (ORDER BY device_id, start_ns, end_ns, op) AS op_id, * FROM (
        SELECT device_id, 'memcpy' AS op, copy_kind, src_mem, dst_mem, is_uvm, migration_cause, bytes, start_ns,
               end_ns
        FROM memcpys WHERE end_ns >= start_ns
        UNION ALL
        SELECT device_id, 'memset', 'memset', mem_kind, mem_kind, false, NULL, bytes, start_ns, end_ns
        FROM memsets WHERE end_ns >= start_ns)
),
-- The disjoint pieces of compute busy time (see _timeline), on devices that have copies.
pieces AS (
    SELECT device_id, greatest(start_ns, coalesce(prev_compute_end_ns, start_ns)) AS s, end_ns AS e
    FROM _timeline
    WHERE is_compute AND end_ns > greatest(start_ns, coalesce(prev_compute_end_ns, start_ns))
      AND device_id IN (SELECT device_id FROM ops)
),
-- One sweep over pieces and copy edges in time order instead of an interval join (which degenerates to a
-- comparison of every copy with every kernel of its device): compute time up to t is the length of the
-- pieces begun by t minus the part of the last one after t.
events AS (
    SELECT device_id, s AS t, 0 AS edge, e - s AS len, e, NULL::BIGINT AS op_id FROM pieces
    UNION ALL SELECT device_id, start_ns, 1, 0, NULL, op_id FROM ops
    UNION ALL SELECT device_id, end_ns, 2, 0, NULL, op_id FROM ops
),
swept AS (
    SELECT op_id, edge,
           coalesce(sum(len) OVER w, 0) - greatest(coalesce(max(e) OVER w, t) - t, 0) AS busy_before_ns
    FROM events
    WINDOW w AS (PARTITION BY device_id ORDER BY t, edge ROWS UNBOUNDED PRECEDING)
),
overlap AS (
    SELECT op_id, max(busy_before_ns) FILTER (WHERE edge = 2) - max(busy_before_ns) FILTER (WHERE edge = 1)
               AS overlap_ns
    FROM swept WHERE op_id IS NOT NULL GROUP BY op_id
)
SELECT o.device_id, o.op, o.copy_kind, o.src_mem, o.dst_mem, o.is_uvm, o.migration_cause,
       CASE WHEN o.op = 'memset' THEN 'memset'
            WHEN o.is_uvm THEN 'uvm'
            WHEN o.copy_kind IN ('HtoD', 'DtoH', 'HtoA', 'AtoH') THEN 'host_device'
            WHEN o.copy_kind IN ('DtoD', 'DtoA', 'AtoD', 'AtoA') THEN 'device'
            WHEN o.copy_kind = 'PtoP' THEN 'peer'
            ELSE 'other' END AS traffic,
       CASE WHEN o.copy_kind IN ('HtoD', 'HtoA') THEN o.src_mem
            WHEN o.copy_kind IN ('DtoH', 'AtoH') THEN o.dst_mem END AS host_mem,
       o.bytes, o.end_ns - o.start_ns AS dur_ns,
       CAST(greatest(o.end_ns - o.start_ns - coalesce(v.overlap_ns, 0), 0) AS BIGINT) AS stall_ns
FROM ops o LEFT JOIN overlap v USING (op_id)
