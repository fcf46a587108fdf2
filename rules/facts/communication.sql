-- @fact communication
-- @doc One row per GPU that ran kernels: time in collective-communication kernels (NCCL and friends)
-- @doc versus compute kernels, and how much of the communication overlapped compute on other streams.
-- @doc Graph replays (graph trace mode) count as compute.
-- @report
-- @needs _timeline gpu_utilization
-- @requires kernels
-- @column device_id CUDA device index.
-- @column pid Process that ran most kernels on the device (the rank).
-- @column comm_kernel_count Communication kernels.
-- @column comm_ns Union of communication-kernel time (ns).
-- @column compute_ns Union of the other kernels' time (ns).
-- @column exposed_comm_ns Communication time with no compute kernel running beside it (ns).
-- @column comm_share_of_busy comm_ns / compute busy time of the device (0-1).
-- @column exposed_comm_fraction exposed_comm_ns / device window (0-1).
-- @column window_ns Device window (ns).
-- @column compute_imbalance (max - min) / max compute time across GPUs (0-1); high: collectives wait for a straggler.
-- @check device_id not_null
-- @check device_id unique
-- @check comm_kernel_count non_negative
-- @check comm_ns non_negative
-- @check exposed_comm_ns non_negative
-- @check comm_share_of_busy range 0 1
-- @check exposed_comm_fraction range 0 1
-- @check compute_imbalance range 0 1
-- Unions come from the running maxima of _timeline (no second sort). Communication not hidden behind compute
-- is |comm ∪ compute| - |compute|, and |comm ∪ compute| is the device's compute busy time.
WITH totals AS (
    SELECT device_id, mode(pid) AS pid, count(*) FILTER (WHERE is_comm) AS comm_kernel_count,
           CAST(coalesce(sum(greatest(end_ns - greatest(start_ns, coalesce(prev_comm_end_ns, start_ns)), 0))
                             FILTER (WHERE is_comm), 0) AS BIGINT) AS comm_ns,
           CAST(coalesce(sum(greatest(end_ns - greatest(start_ns, coalesce(prev_noncomm_end_ns, start_ns)), 0))
                             FILTER (WHERE NOT is_comm), 0) AS BIGINT) AS compute_ns
    FROM _timeline WHERE is_compute GROUP BY device_id
)
SELECT t.device_id, t.pid, t.comm_kernel_count, t.comm_ns, t.compute_ns,
       greatest(u.compute_busy_ns - t.compute_ns, 0) AS exposed_comm_ns,
       CASE WHEN u.compute_busy_ns > 0 THEN t.comm_ns / u.compute_busy_ns ELSE 0 END AS comm_share_of_busy,
       CASE WHEN u.window_ns > 0 THEN greatest(u.compute_busy_ns - t.compute_ns, 0) / u.window_ns ELSE 0 END
           AS exposed_comm_fraction,
       u.window_ns,
       CASE WHEN x.max_ns > 0 THEN (x.max_ns - x.min_ns) / x.max_ns ELSE 0 END AS compute_imbalance
FROM totals t
CROSS JOIN (SELECT max(compute_ns) AS max_ns, min(compute_ns) AS min_ns FROM totals) x
JOIN gpu_utilization u USING (device_id)
ORDER BY t.device_id
