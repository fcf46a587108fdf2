-- @fact transfer_overview
-- @doc One row per GPU that did work: its data movement by traffic, and how much of its window went to
-- @doc transfers that left the compute engines idle. Host-device copies (HtoD, DtoH, HtoA, AtoH: the copies
-- @doc that cross PCIe, or NVLink-C2C on Grace Hopper) are split into pinned and pageable host memory and
-- @doc long copies (PCIe-bound); device-to-device copies, peer copies between GPUs, memsets and unified-
-- @doc memory page migrations are counted apart (docs/measures.md "What it measures"). A copy stalls the GPU only for
-- @doc the part of it with no kernel or graph replay running on the device (_copy_stalls): an asynchronous
-- @doc copy hidden under kernels costs nothing here.
-- @report
-- @per-phase
-- @needs _copy_stalls gpu_utilization _idle_gaps
-- @requires memcpys|memsets|kernels|graph_launches
-- @param long_copy_ns 100000
-- @column device_id CUDA device index.
-- @column window_ns Device window (ns).
-- @column pcie_count Host-device copies (HtoD, DtoH, HtoA, AtoH), not unified-memory migrations.
-- @column pcie_bytes Bytes in host-device copies.
-- @column pcie_ns Time in host-device copies (ns).
-- @column pcie_stall_ns Host-device copy time with no kernel running, summed over the copies (ns).
-- @column pcie_stall_fraction pcie_stall_ns / window_ns, at most 1 (0-1).
-- @column long_copy_count Host-device copies longer than long_copy_ns.
-- @column long_copy_stall_ns Stall time inside those long copies (ns).
-- @column long_copy_stall_fraction long_copy_stall_ns / window_ns, at most 1 (0-1).
-- @column main_direction Host-device direction (HtoD, DtoH ...) with the most stall time.
-- @column main_direction_gbps Effective bandwidth of the host-device copies in that direction (GB/s).
-- @column pinned_count Host-device copies whose host side is pinned (page-locked) memory.
-- @column pinned_bytes Bytes in those copies.
-- @column pinned_ns Time in those copies (ns).
-- @column pageable_count Host-device copies whose host side is pageable memory.
-- @column pageable_bytes Bytes in those copies.
-- @column pageable_ns Time in those copies (ns).
-- @column pageable_share pageable_bytes / pcie_bytes: the share of the host-device volume that is pageable (0-1).
-- @column pinned_share pinned_bytes / pcie_bytes: the share that is pinned; with pageable_share it need not make 1, as an export may record the host memory as managed or unknown (0-1).
-- @column pageable_stall_fraction Their stall time / window_ns, at most 1 (0-1).
-- @column dtod_count Device-to-device copies within the GPU (DtoD, DtoA, AtoD, AtoA).
-- @column dtod_bytes Bytes in those copies.
-- @column dtod_ns Time in those copies (ns).
-- @column peer_count Peer copies between GPUs (PtoP).
-- @column peer_bytes Bytes in those copies.
-- @column peer_ns Time in those copies (ns).
-- @column memset_count Memsets.
-- @column memset_bytes Bytes set.
-- @column memset_ns Time in memsets (ns).
-- @column stall_ns Time in copies and memsets of every traffic with no kernel running, summed over the operations (ns).
-- @column stall_fraction stall_ns / window_ns (0-1).
-- @column uvm_count Unified-memory migrations.
-- @column uvm_bytes Bytes migrated.
-- @column uvm_ns Time in migrations (ns).
-- @column uvm_fraction uvm_ns / window_ns (0-1).
-- @column uvm_prefetch_count Migrations the program asked for with cudaMemPrefetchAsync (user prefetches).
-- @column uvm_prefetch_bytes Bytes in those migrations.
-- @column uvm_fault_count Migrations driven by page faults: on-demand migrations after a fault, the driver's speculative prefetches around a fault, and access-counter migrations (CUPTI migration causes 2, 3, 5).
-- @column uvm_fault_bytes Bytes in those migrations.
-- @column uvm_fault_to_device_count Fault-driven migrations to the GPU (UVM HtoD): kernels touching pages that live on the host.
-- @column uvm_fault_to_host_count Fault-driven migrations to the host (UVM DtoH): host code touching pages that live on the GPU.
-- @column uvm_fault_to_host_bytes Bytes in the fault-driven migrations to the host.
-- @column uvm_eviction_count Migrations that evict pages from the GPU to make room (GPU memory oversubscribed).
-- @column uvm_unknown_cause_count Migrations whose cause the export does not record (older nsys, or cause 0).
-- @column uvm_idle_ns GPU idle time that ends in a migration: the GPU waiting on page faults (ns).
-- @column uvm_cost_fraction (migration stall time + uvm_idle_ns) / window_ns: what unified memory costs (0-1).
-- @column compute_utilization Kernel and graph-replay busy share of the window (0-1).
-- @check device_id not_null
-- @check device_id unique
-- @check pcie_count non_negative
-- @check pcie_bytes non_negative
-- @check pcie_ns non_negative
-- @check pcie_stall_ns non_negative
-- @check pcie_stall_fraction range 0 1
-- @check long_copy_stall_fraction range 0 1
-- @check pinned_bytes non_negative
-- @check pageable_bytes non_negative
-- @check dtod_count non_negative
-- @check peer_count non_negative
-- @check memset_count non_negative
-- @check stall_ns non_negative
-- @check stall_fraction range 0 1
-- @check pageable_stall_fraction range 0 1
-- @check uvm_fraction range 0 1
-- @check uvm_cost_fraction range 0 1
-- @check compute_utilization range 0 1
-- @check pageable_share range 0 1
-- @check pinned_share range 0 1
WITH dir AS (
    SELECT device_id, copy_kind, sum(stall_ns) AS s, sum(bytes) AS b, sum(dur_ns) AS d,
           row_number() OVER (PARTITION BY device_id ORDER BY sum(stall_ns) DESC, copy_kind) AS rk
    FROM _copy_stalls WHERE traffic = 'host_device' GROUP BY device_id, copy_kind
),
agg AS (
    SELECT device_id,
           count(*) FILTER (WHERE traffic = 'host_device') AS pcie_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'host_device'), 0) AS pcie_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE traffic = 'host_device'), 0) AS pcie_ns,
           coalesce(sum(stall_ns) FILTER (WHERE traffic = 'host_device'), 0) AS pcie_stall_ns,
           count(*) FILTER (WHERE traffic = 'host_device' AND dur_ns > ${long_copy_ns}) AS long_copy_count,
           coalesce(sum(stall_ns) FILTER (WHERE traffic = 'host_device' AND dur_ns > ${long_copy_ns}), 0)
               AS long_copy_stall_ns,
           count(*) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pinned') AS pinned_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pinned'), 0) AS pinned_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pinned'), 0) AS pinned_ns,
           count(*) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pageable') AS pageable_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pageable'), 0) AS pageable_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pageable'), 0) AS pageable_ns,
           coalesce(sum(stall_ns) FILTER (WHERE traffic = 'host_device' AND host_mem = 'pageable'), 0)
               AS pageable_stall_ns,
           count(*) FILTER (WHERE traffic = 'device') AS dtod_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'device'), 0) AS dtod_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE traffic = 'device'), 0) AS dtod_ns,
           count(*) FILTER (WHERE traffic = 'peer') AS peer_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'peer'), 0) AS peer_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE traffic = 'peer'), 0) AS peer_ns,
           count(*) FILTER (WHERE traffic = 'memset') AS memset_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'memset'), 0) AS memset_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE traffic = 'memset'), 0) AS memset_ns,
           sum(stall_ns) AS stall_ns,
           count(*) FILTER (WHERE traffic = 'uvm') AS uvm_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'uvm'), 0) AS uvm_bytes,
           coalesce(sum(dur_ns) FILTER (WHERE traffic = 'uvm'), 0) AS uvm_ns,
           coalesce(sum(stall_ns) FILTER (WHERE traffic = 'uvm'), 0) AS uvm_stall_ns,
           count(*) FILTER (WHERE traffic = 'uvm' AND migration_cause = 1) AS uvm_prefetch_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'uvm' AND migration_cause = 1), 0) AS uvm_prefetch_bytes,
           count(*) FILTER (WHERE traffic = 'uvm' AND migration_cause IN (2, 3, 5)) AS uvm_fault_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'uvm' AND migration_cause IN (2, 3, 5)), 0) AS uvm_fault_bytes,
           count(*) FILTER (WHERE traffic = 'uvm' AND migration_cause IN (2, 3, 5) AND copy_kind = 'UVM HtoD')
               AS uvm_fault_to_device_count,
           count(*) FILTER (WHERE traffic = 'uvm' AND migration_cause IN (2, 3, 5) AND copy_kind = 'UVM DtoH')
               AS uvm_fault_to_host_count,
           coalesce(sum(bytes) FILTER (WHERE traffic = 'uvm' AND migration_cause IN (2, 3, 5)
                                         AND copy_kind = 'UVM DtoH'), 0) AS uvm_fault_to_host_bytes,
           count(*) FILTER (WHERE traffic = 'uvm' AND migration_cause = 4) AS uvm_eviction_count,
           count(*) FILTER (WHERE traffic = 'uvm' AND coalesce(migration_cause, 0) NOT BETWEEN 1 AND 5)
               AS uvm_unknown_cause_count
    FROM _copy_stalls GROUP BY device_id
),
uvm_idle AS (
    SELECT device_id, coalesce(sum(gap_ns), 0) AS uvm_idle_ns FROM _idle_gaps WHERE cause = 'uvm' GROUP BY device_id
)
SELECT u.device_id, u.window_ns, a.pcie_count, a.pcie_bytes, a.pcie_ns, a.pcie_stall_ns,
       CASE WHEN u.window_ns > 0 THEN least(a.pcie_stall_ns / u.window_ns, 1.0) ELSE 0 END AS pcie_stall_fraction,
       a.long_copy_count, a.long_copy_stall_ns,
       CASE WHEN u.window_ns > 0 THEN least(a.long_copy_stall_ns / u.window_ns, 1.0) ELSE 0 END
           AS long_copy_stall_fraction,
       d.copy_kind AS main_direction, CASE WHEN d.d > 0 THEN d.b / d.d END AS main_direction_gbps,
       a.pinned_count, a.pinned_bytes, a.pinned_ns, a.pageable_count, a.pageable_bytes, a.pageable_ns,
       CASE WHEN a.pcie_bytes > 0 THEN least(a.pageable_bytes / a.pcie_bytes, 1.0) ELSE 0 END AS pageable_share,
       CASE WHEN a.pcie_bytes > 0 THEN least(a.pinned_bytes / a.pcie_bytes, 1.0) ELSE 0 END AS pinned_share,
       CASE WHEN u.window_ns > 0 THEN least(a.pageable_stall_ns / u.window_ns, 1.0) ELSE 0 END
           AS pageable_stall_fraction,
       a.dtod_count, a.dtod_bytes, a.dtod_ns, a.peer_count, a.peer_bytes, a.peer_ns,
       a.memset_count, a.memset_bytes, a.memset_ns,
       a.stall_ns, CASE WHEN u.window_ns > 0 THEN a.stall_ns / u.window_ns ELSE 0 END AS stall_fraction,
       a.uvm_count, a.uvm_bytes, a.uvm_ns,
       CASE WHEN u.window_ns > 0 THEN least(a.uvm_ns / u.window_ns, 1.0) ELSE 0 END AS uvm_fraction,
       a.uvm_prefetch_count, a.uvm_prefetch_bytes, a.uvm_fault_count, a.uvm_fault_bytes, a.uvm_fault_to_device_count,
       a.uvm_fault_to_host_count, a.uvm_fault_to_host_bytes, a.uvm_eviction_count, a.uvm_unknown_cause_count,
       coalesce(ui.uvm_idle_ns, 0) AS uvm_idle_ns,
       CASE WHEN u.window_ns > 0 THEN least((a.uvm_stall_ns + coalesce(ui.uvm_idle_ns, 0)) / u.window_ns, 1.0)
            ELSE 0 END AS uvm_cost_fraction,
       u.utilization AS compute_utilization
FROM gpu_utilization u JOIN agg a USING (device_id)
LEFT JOIN uvm_idle ui ON ui.device_id = u.device_id
LEFT JOIN dir d ON d.device_id = u.device_id AND d.rk = 1
ORDER BY u.device_id
