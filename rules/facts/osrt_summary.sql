-- @fact osrt_summary
-- @doc One row per (issuing thread, OS-runtime function), most time first: the OS-runtime calls (nsys
-- @doc --trace=osrt: poll, read, ioctl, pthread_cond_wait, sem_timedwait ...) of the threads that issued GPU work
-- @doc (their CUDA calls launched the kernels, graph replays, copies and memsets of _timeline), so the time the
-- @doc launching thread spent waiting in the OS is named. Only calls the application made count (nesting level
-- @doc 0; a traced call made inside another would count twice). Comparable with `nsys stats --report osrt_sum`
-- @doc restricted to those threads.
-- @report rows=50
-- @needs _timeline
-- @requires osrt_calls
-- @column pid Process of the thread.
-- @column tid Thread id.
-- @column name OS-runtime function.
-- @column count Calls.
-- @column total_ns Time inside the calls (ns).
-- @column mean_ns Mean call duration (ns).
-- @column max_ns Longest call (ns).
-- @column thread_span_ns The thread's time in the capture: from its first to its last traced CUDA or OS-runtime call (ns).
-- @column share_of_thread total_ns / thread_span_ns (0-1).
-- @check name not_null
-- @check count non_negative
-- @check total_ns non_negative
-- @check thread_span_ns non_negative
-- @check share_of_thread range 0 1
WITH issuing AS (
    SELECT global_tid, min(api_start_ns) AS first_ns, max(api_end_ns) AS last_ns
    FROM _timeline WHERE global_tid IS NOT NULL GROUP BY global_tid
),
calls AS (
    SELECT c.global_tid, any_value(c.pid) AS pid, any_value(c.tid) AS tid, c.name, count(*) AS count,
           sum(c.dur_ns) AS total_ns, avg(c.dur_ns) AS mean_ns, max(c.dur_ns) AS max_ns,
           min(c.start_ns) AS first_ns, max(c.end_ns) AS last_ns
    FROM osrt_calls c SEMI JOIN issuing i ON i.global_tid = c.global_tid
    WHERE coalesce(c.nesting_level, 0) = 0 AND c.end_ns >= c.start_ns
    GROUP BY c.global_tid, c.name
),
spans AS (
    SELECT c.global_tid, greatest(max(c.last_ns), any_value(i.last_ns)) - least(min(c.first_ns), any_value(i.first_ns))
               AS span_ns
    FROM calls c JOIN issuing i USING (global_tid)
    GROUP BY c.global_tid
)
SELECT c.pid, c.tid, c.name, c.count, c.total_ns, c.mean_ns, c.max_ns, s.span_ns AS thread_span_ns,
       CASE WHEN s.span_ns > 0 THEN least(c.total_ns / s.span_ns, 1.0) ELSE 0 END AS share_of_thread
FROM calls c JOIN spans s USING (global_tid)
ORDER BY c.total_ns DESC, c.name, c.pid, c.tid
