-- @fact communication
-- @doc One row per GPU that ran kernels: time in collective-communication kernels (NCCL and friends)
-- @doc versus compute kernels, and how much of the communication overlapped compute on other streams.
-- @needs _busy_intervals gpu_utilization
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
WITH k AS (
    SELECT device_id, pid, start_ns, end_ns,
           regexp_matches(name, '(?i)nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device_reduce|alltoall')
               AS is_comm
    FROM kernels WHERE end_ns >= start_ns
),
ordered AS (
    SELECT device_id, is_comm, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY device_id, is_comm ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM k
),
grouped AS (
    SELECT device_id, is_comm, start_ns, end_ns,
           sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY device_id, is_comm ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS grp
    FROM ordered
),
merged AS (SELECT device_id, is_comm, min(start_ns) AS s, max(end_ns) AS e FROM grouped GROUP BY device_id, is_comm, grp),
overlap AS (
    SELECT c.device_id, sum(least(c.e, p.e) - greatest(c.s, p.s)) AS ns
    FROM merged c JOIN merged p ON p.device_id = c.device_id AND NOT p.is_comm AND c.is_comm
                               AND p.s < c.e AND p.e > c.s
    GROUP BY c.device_id
),
totals AS (
    SELECT device_id,
           coalesce(sum(e - s) FILTER (WHERE is_comm), 0) AS comm_ns,
           coalesce(sum(e - s) FILTER (WHERE NOT is_comm), 0) AS compute_ns
    FROM merged GROUP BY device_id
),
ranks AS (SELECT device_id, mode(pid) AS pid, count(*) FILTER (WHERE is_comm) AS n FROM k GROUP BY device_id)
SELECT t.device_id, r.pid, r.n AS comm_kernel_count, t.comm_ns, t.compute_ns,
       t.comm_ns - coalesce(o.ns, 0) AS exposed_comm_ns,
       CASE WHEN u.compute_busy_ns > 0 THEN t.comm_ns / u.compute_busy_ns ELSE 0 END AS comm_share_of_busy,
       CASE WHEN u.window_ns > 0 THEN (t.comm_ns - coalesce(o.ns, 0)) / u.window_ns ELSE 0 END AS exposed_comm_fraction,
       u.window_ns,
       CASE WHEN x.max_ns > 0 THEN (x.max_ns - x.min_ns) / x.max_ns ELSE 0 END AS compute_imbalance
FROM totals t
CROSS JOIN (SELECT max(compute_ns) AS max_ns, min(compute_ns) AS min_ns FROM totals) x JOIN ranks r USING (device_id) JOIN gpu_utilization u USING (device_id)
LEFT JOIN overlap o USING (device_id)
ORDER BY t.device_id
