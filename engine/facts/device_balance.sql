-- @fact device_balance
-- @doc One row per GPU that ran kernels, compared with the others: compute (non-communication) kernel
-- @doc time, and how far it is from the busiest GPU. In a data- or tensor-parallel run the busiest GPU
-- @doc is the straggler: the others wait for it inside their collectives.
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
WITH b AS (
SELECT device_id, pid, compute_ns, comm_ns,
       count(*) OVER () AS device_count,
       max(compute_ns) OVER () AS max_compute_ns,
       min(compute_ns) OVER () AS min_compute_ns,
       CASE WHEN max(compute_ns) OVER () > 0
            THEN (max(compute_ns) OVER () - min(compute_ns) OVER ()) / max(compute_ns) OVER () ELSE 0 END AS imbalance,
       compute_ns = max(compute_ns) OVER () AS is_straggler,
       max(compute_ns) OVER () - compute_ns AS behind_ns,
       CASE WHEN window_ns > 0 THEN (max(compute_ns) OVER () - compute_ns) / window_ns ELSE 0 END AS wait_fraction,
       window_ns
FROM communication
)
SELECT *, max(wait_fraction) OVER () AS max_wait_fraction FROM b ORDER BY device_id
