-- @fact _host_gap_os_calls
-- @doc Host-work idle time (_idle_gaps cause 'host') of each device spent inside OS-runtime calls (nsys
-- @doc --trace=osrt: poll, read, pthread_cond_wait, ioctl ...) of the thread that issued the next operation: one
-- @doc row per (device, call name). Only calls the application made count (nesting level 0; a traced call made
-- @doc inside another would count twice). A sweep over the thread's call and gap boundaries finds the moments
-- @doc when both are open, and an as-of lookup the call, so no gap is compared with every call.
-- @needs _idle_gaps
-- @column device_id CUDA device index.
-- @column name OS-runtime function.
-- @column covered_ns Host-work idle time of the device inside calls of that name (ns).
-- @column call_count Calls of that name that covered some of it.
WITH host AS (
    SELECT device_id, global_tid, gap_start_ns, gap_end_ns FROM _idle_gaps WHERE cause = 'host'
),
threads AS (SELECT DISTINCT device_id, global_tid FROM host),
calls AS (
    SELECT t.device_id, c.global_tid, c.start_ns, c.end_ns, c.name,
           row_number() OVER (ORDER BY t.device_id, c.global_tid, c.start_ns, c.end_ns) AS call_id
    FROM osrt_calls c JOIN threads t ON t.global_tid = c.global_tid
    WHERE coalesce(c.nesting_level, 0) = 0 AND c.end_ns > c.start_ns
),
events AS (
    SELECT device_id, global_tid, start_ns AS t, 1 AS order_key, 1 AS d_call, 0 AS d_gap FROM calls
    UNION ALL SELECT device_id, global_tid, end_ns, 0, -1, 0 FROM calls
    UNION ALL SELECT device_id, global_tid, gap_start_ns, 1, 0, 1 FROM host
    UNION ALL SELECT device_id, global_tid, gap_end_ns, 0, 0, -1 FROM host
),
swept AS (
    SELECT device_id, global_tid, t,
           sum(d_call) OVER w AS open_calls, sum(d_gap) OVER w AS open_gaps, lead(t) OVER w AS next_t
    FROM events
    WINDOW w AS (PARTITION BY device_id, global_tid ORDER BY t, order_key ROWS UNBOUNDED PRECEDING)
),
pieces AS (
    SELECT device_id, global_tid, t, next_t - t AS ns FROM swept
    WHERE open_gaps > 0 AND open_calls > 0 AND next_t > t
)
SELECT p.device_id, c.name, sum(p.ns) AS covered_ns, count(DISTINCT c.call_id) AS call_count
FROM pieces p ASOF JOIN calls c
    ON c.device_id = p.device_id AND c.global_tid = p.global_tid AND c.start_ns <= p.t
GROUP BY ALL
