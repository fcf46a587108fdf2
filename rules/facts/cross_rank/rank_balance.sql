-- @fact rank_balance
-- @doc One row per rank of a multi-rank run (one export per rank), compared with the other ranks: compute
-- @doc (non-communication) kernel time, NCCL time, and how far the rank is behind the busiest one. Collectives
-- @doc end only when every rank has arrived, so the rank with the most compute is the straggler and the others
-- @doc wait for it inside their NCCL kernels. Ranks are compared by durations and totals, never by timestamps:
-- @doc the clocks of different nodes need not agree.
-- @column rank Rank number (from the file name, else the position in sorted order).
-- @column path The rank's export as given.
-- @column file Its file name.
-- @column pid Process that ran most kernels on the rank's GPU.
-- @column device_id The rank's GPU in its export (the one with the most kernel time).
-- @column gpu_name Its name as the export records it.
-- @column gpus_used GPUs that ran kernels in the rank's export.
-- @column verdict Category of the rank's own verdict (NULL: no bottleneck found on that rank).
-- @column window_ns The GPU's window, first GPU operation to the end of the last (ns).
-- @column utilization Busy share of that window (0-1).
-- @column kernel_time_ns Sum of the GPU's kernel durations (ns).
-- @column compute_ns Union of its compute (non-communication) kernels (ns).
-- @column comm_ns Union of its communication (NCCL) kernels (ns).
-- @column exposed_comm_ns Communication with no compute kernel beside it (ns).
-- @column comm_kernel_count Communication kernels.
-- @column comm_fraction comm_ns / window_ns: share of the window in NCCL kernels (0-1).
-- @column exposed_comm_fraction exposed_comm_ns / window_ns (0-1).
-- @column step_time_ns Mean NVTX decode step of the rank, when its export has decode ranges (ns).
-- @column rank_count Ranks whose exports hold kernels.
-- @column comm_rank_count Ranks that ran communication (NCCL) kernels; when fewer than rank_count, not every rank takes part in collectives, so no rank can be waiting for another in them.
-- @column max_compute_ns Compute time of the busiest rank, the straggler (ns).
-- @column min_compute_ns Compute time of the least busy rank (ns).
-- @column median_compute_ns Median compute time over the ranks (ns).
-- @column straggler_rank The rank with the most compute time (the lowest such rank on a tie).
-- @column fastest_rank The rank with the least compute time (the lowest such rank on a tie).
-- @column is_straggler True for the straggler rank.
-- @column imbalance (max_compute_ns - min_compute_ns) / max_compute_ns over the ranks (0-1).
-- @column excess_fraction (compute_ns - median_compute_ns) / median_compute_ns: extra compute against the median rank.
-- @column behind_ns max_compute_ns - compute_ns: how long this rank waits for the straggler (ns).
-- @column wait_fraction behind_ns / window_ns: what waiting for the straggler costs this rank (0-1).
-- @column max_wait_fraction The largest wait_fraction of any rank: what the imbalance costs the run (0-1).
-- @column others_comm_ns Mean comm_ns of the ranks other than the straggler (ns).
-- @column others_behind_ns Mean behind_ns of the ranks other than the straggler (ns).
-- Totals come from joined aggregates, not OVER () windows: DuckDB 1.5.5 intermittently fails an internal
-- assertion on OVER () windows over small aggregated inputs (see rules/facts/device_balance.sql).
WITH x AS (
    SELECT count(compute_ns) AS rank_count, count(*) FILTER (WHERE comm_kernel_count > 0) AS comm_rank_count,
           max(compute_ns) AS max_ns, min(compute_ns) AS min_ns, median(compute_ns) AS median_ns
    FROM ranks
),
s AS (SELECT min(r.rank) AS straggler_rank FROM ranks r JOIN x ON r.compute_ns = x.max_ns),
f AS (SELECT min(r.rank) AS fastest_rank FROM ranks r JOIN x ON r.compute_ns = x.min_ns),
b AS (
    SELECT r.rank, r.path, r.file, r.pid, r.device_id, r.gpu_name, r.gpus_used, r.verdict, r.window_ns,
           r.utilization, r.kernel_time_ns, r.compute_ns, r.comm_ns, r.exposed_comm_ns, r.comm_kernel_count,
           CASE WHEN r.window_ns > 0 THEN r.comm_ns / r.window_ns END AS comm_fraction,
           CASE WHEN r.window_ns > 0 THEN r.exposed_comm_ns / r.window_ns END AS exposed_comm_fraction,
           r.step_time_ns,
           x.rank_count, x.comm_rank_count, x.max_ns AS max_compute_ns, x.min_ns AS min_compute_ns, x.median_ns AS median_compute_ns,
           s.straggler_rank, f.fastest_rank,
           coalesce(r.rank = s.straggler_rank, false) AS is_straggler,
           CASE WHEN x.max_ns > 0 THEN (x.max_ns - x.min_ns) / x.max_ns ELSE 0 END AS imbalance,
           CASE WHEN x.median_ns > 0 THEN (r.compute_ns - x.median_ns) / x.median_ns END AS excess_fraction,
           x.max_ns - r.compute_ns AS behind_ns,
           CASE WHEN r.window_ns > 0 THEN (x.max_ns - r.compute_ns) / r.window_ns END AS wait_fraction
    FROM ranks r CROSS JOIN x CROSS JOIN s CROSS JOIN f
),
o AS (
    SELECT max(wait_fraction) AS max_wait_fraction,
           avg(comm_ns) FILTER (WHERE NOT is_straggler AND compute_ns IS NOT NULL) AS others_comm_ns,
           avg(behind_ns) FILTER (WHERE NOT is_straggler AND compute_ns IS NOT NULL) AS others_behind_ns
    FROM b
)
SELECT b.*, o.max_wait_fraction, o.others_comm_ns, o.others_behind_ns
FROM b CROSS JOIN o
ORDER BY b.rank
