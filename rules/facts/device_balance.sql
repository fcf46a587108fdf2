-- @fact device_balance
-- @doc One row per GPU that ran kernels, compared with the others: compute (non-communication) kernel
-- @doc time, and how far it is from the busiest GPU. In a data- or tensor-parallel run the busiest GPU
-- @doc is the straggler: the others wait for it inside their collectives.
-- @report
-- @needs communication
-- @requires kernels
-- @column device_id CUDA device index.
-- @column pid Process (rank) that ran most kernels on it.
-- @column compute_ns Union of its compute-kernel time (ns).
-- @column comm_ns Union of its communication-kernel time (ns).
-- @column device_count GPUs that ran kernels.
-- @column max_compute_ns Compute time of the busiest GPU (ns).
-- @column min_compute_ns Compute time of the least busy GPU (ns).
-- @column imbalance (max_compute_ns - min_compute_ns) / max_compute_ns across GPUs (0-1).
-- @column is_straggler True for the GPU with the most compute time.
-- @column behind_ns max_compute_ns - this GPU's compute time: what it waits for (ns).
-- @column wait_fraction behind_ns / this GPU's window (0-1).
-- @column window_ns Device window (ns).
-- @column max_wait_fraction The largest wait_fraction of any GPU: what the imbalance costs the run (0-1).
-- @check device_id not_null
-- @check device_id unique
-- @check compute_ns non_negative
-- @check imbalance range 0 1
-- @check behind_ns non_negative
-- @check wait_fraction range 0 1
-- @check max_wait_fraction range 0 1
-- Totals come from joined aggregates, not OVER () windows: DuckDB 1.5.5 intermittently fails an
-- internal assertion on OVER () windows over small aggregated inputs when run on several threads.
WITH x AS (SELECT count(*) AS n, max(compute_ns) AS max_ns, min(compute_ns) AS min_ns FROM communication),
b AS (
    SELECT c.device_id, c.pid, c.compute_ns, c.comm_ns, x.n AS device_count, x.max_ns AS max_compute_ns,
           x.min_ns AS min_compute_ns,
           CASE WHEN x.max_ns > 0 THEN (x.max_ns - x.min_ns) / x.max_ns ELSE 0 END AS imbalance,
           c.compute_ns = x.max_ns AS is_straggler,
           x.max_ns - c.compute_ns AS behind_ns,
           CASE WHEN c.window_ns > 0 THEN (x.max_ns - c.compute_ns) / c.window_ns ELSE 0 END AS wait_fraction,
           c.window_ns
    FROM communication c CROSS JOIN x
)
SELECT b.*, w.max_wait_fraction
FROM b CROSS JOIN (SELECT max(wait_fraction) AS max_wait_fraction FROM b) w
ORDER BY b.device_id
