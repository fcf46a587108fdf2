-- @fact _server_idle
-- @whole-run
-- @materialize
-- @doc The quiet stretches in which the run waited (docs/measures.md "A server waiting for requests"): nothing was in
-- @doc flight, that is no GPU operation ran on any device, no CUDA API call ran on any thread (polling and
-- @doc query calls aside: names with Query, Get or PeekAtLastError, which an idle server may keep making) and no
-- @doc engine step was open (_step_ranges found from NVTX; steps found from calls span the time between two
-- @doc calls, so they hold every pause by construction and add nothing here). A quiet stretch counts when
-- @doc (1) it is long: at least server_idle_step_ratio times the typical step, never less than
-- @doc server_idle_floor_ns (sub-millisecond steps must not make a 5 ms pause a wait) and never more than
-- @doc server_idle_min_ns (a stretch of that length always counts, and it is the only rule when the run has
-- @doc no steps), unless CPU samples show the thread checked (below) running for more than
-- @doc 1 - server_idle_wait_share of it: that is host work (a loop between two phases of work), and only
-- @doc server_idle_min_ns makes it a wait; or (2) the thread whose CUDA call or step ended it (else the thread
-- @doc that makes the most CUDA calls) was blocked in an OS wait (nsys --trace=osrt: epoll_wait, poll, select,
-- @doc recv, accept, pthread_cond_wait, futex, sem_wait, nanosleep and their variants; read is left out, since
-- @doc a read of a file is work) for server_idle_wait_share of it, or, with CPU sampling, was off the CPU for
-- @doc that share (its samples in the stretch times its median sampling period are the time it ran); such a
-- @doc stretch must last server_idle_wait_steps typical steps and server_idle_wait_min_ns, so a short poll()
-- @doc for new requests inside the scheduler between two steps stays host work. A sleep counts as a wait: in a
-- @doc quiet stretch nothing is queued on the GPU (a queued kernel would run), so the thread sleeps for want of
-- @doc work.
-- @doc The typical step is the median time from the start of one step to the start of the next on its thread,
-- @doc so the host work that follows every step is part of it: a loop that spends 20 ms in Python after each
-- @doc 1 ms step is busy between its steps, not waiting. A run of fewer than server_idle_min_steps steps has
-- @doc no typical step (a handful of ranges says little about a loop): only server_idle_min_ns counts there.
-- @doc Path (1) below server_idle_min_ns needs steps the program marks in NVTX (an engine loop): steps found
-- @doc from synchronisations or graph launches can be any program's, and a benchmark that computes a CPU
-- @doc reference between two GPU phases is busy, not waiting, though nothing is in flight; path (2) has the OS
-- @doc waits as its own evidence and takes the typical step of any steps.
-- @doc The stretches are cut out of the judged windows: _timeline lets no idle gap span one, and
-- @doc gpu_utilization leaves them out of the device windows, so the rules judge the active work only. The
-- @doc operation after a stretch owns the gap from the stretch's end.
-- @doc Found without sorting the activity: time is cut into buckets of half the shortest length that can
-- @doc count, one pass records which buckets any activity touches (with the earliest start and latest end per
-- @doc bucket, and the thread of the earliest call or step), and such a stretch always holds one whole untouched
-- @doc bucket; its exact ends come from the neighbouring touched buckets. Buckets are never narrower than a
-- @doc two-millionth of the traced span, so that a tiny minimum cannot make millions of them; below that size a
-- @doc stretch can be missed. Only the OS waits and CPU samples of the threads checked are sorted (running sums
-- @doc and as-of lookups), never the GPU operations or CUDA calls.
-- @needs _gpu_ops _api_names _step_ranges
-- @param server_idle_min_ns 1000000000
-- @param server_idle_step_ratio 20 range 1 inf
-- @param server_idle_floor_ns 20000000
-- @param server_idle_wait_steps 3 range 0 inf
-- @param server_idle_wait_min_ns 5000000
-- @param server_idle_wait_share 0.5
-- @param server_idle_min_steps 10 range 1 inf
-- @column start_ns When the last activity before the stretch ended (ns).
-- @column end_ns When the first activity after it started (ns).
-- @column idle_ns Its length (ns).
-- @column recognised How it was recognised: long (at least long_min_ns), os-wait (the thread blocked in OS waits for server_idle_wait_share of it) or off-cpu (CPU samples show the thread off the CPU for that share).
-- @column long_min_ns The length from which a quiet stretch counts as it is: server_idle_step_ratio typical NVTX-marked steps within [server_idle_floor_ns, server_idle_min_ns], else server_idle_min_ns (ns).
-- @column step_ns The typical step: median start-to-start time of consecutive steps on a thread (ns); NULL when the run has fewer than server_idle_min_steps steps.
-- @column global_tid The thread checked for an OS wait.
-- @column wait_ns Time of the stretch that thread spent in OS waits (ns); NULL when its OS calls were not traced.
-- @column wait_call The OS wait it spent most of that time in (epoll_wait, poll ...), NULL when none.
-- @column samples CPU samples of that thread in the stretch; NULL when the capture sampled it less than twice.
WITH quiet_names AS (
    SELECT name_id FROM _api_names WHERE regexp_matches(name, 'Query|Get[A-Z]|PeekAtLastError')
),
launchers AS (
    SELECT global_tid, count(*) AS n FROM _api_calls_by_id
    WHERE correlation_id IS NOT NULL AND correlation_id <> 0 AND global_tid IS NOT NULL
    GROUP BY ALL
),
main_thread AS (SELECT arg_max(global_tid, n) AS global_tid FROM launchers),
periods AS (
    SELECT coalesce(lead(start_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns), end_ns) - start_ns AS ns,
           source = 'nvtx' AS marked
    FROM _step_ranges
),
evidence AS (
    SELECT EXISTS (SELECT 1 FROM osrt_calls) OR EXISTS (SELECT 1 FROM cpu_samples) AS traced
),
limits AS (
    SELECT p.step_ns,
           CASE WHEN p.marked_step_ns IS NULL THEN ${server_idle_min_ns}
                ELSE least(${server_idle_min_ns},
                           greatest(${server_idle_step_ratio} * p.marked_step_ns, ${server_idle_floor_ns})) END::BIGINT
               AS long_ns,
           CASE WHEN p.step_ns IS NOT NULL AND e.traced
                THEN least(${server_idle_min_ns},
                           greatest(${server_idle_wait_steps} * p.step_ns, ${server_idle_wait_min_ns}, 1)) END::BIGINT
               AS wait_ns
    FROM (SELECT CASE WHEN count(*) >= ${server_idle_min_steps} THEN median(ns)::BIGINT END AS step_ns,
                 CASE WHEN count(*) FILTER (WHERE marked) >= ${server_idle_min_steps}
                      THEN (median(ns) FILTER (WHERE marked))::BIGINT END AS marked_step_ns
          FROM periods WHERE ns > 0) p, evidence e
),
activity AS (
    SELECT start_ns, end_ns, NULL::BIGINT AS global_tid FROM _gpu_ops
    UNION ALL
    SELECT start_ns, end_ns, global_tid FROM _api_calls_by_id
    WHERE end_ns >= start_ns AND name_id NOT IN (SELECT name_id FROM quiet_names)
    UNION ALL
    SELECT start_ns, end_ns, global_tid FROM _step_ranges WHERE source = 'nvtx' AND end_ns >= start_ns
),
grid AS (
    SELECT min(a.start_ns) AS origin,
           greatest(least(any_value(l.long_ns), coalesce(any_value(l.wait_ns), any_value(l.long_ns))) // 2,
                    (max(a.end_ns) - min(a.start_ns)) // 2000000, 1)::BIGINT AS width
    FROM activity a, limits l
),
-- One row per (first bucket, last bucket) an activity touches: millions of activities, few such pairs.
spans AS (
    SELECT (a.start_ns - g.origin) // g.width AS b0, (a.end_ns - g.origin) // g.width AS b1,
           min(a.start_ns) AS first_start, max(a.end_ns) AS last_end,
           arg_min(a.global_tid, a.start_ns) FILTER (WHERE a.global_tid IS NOT NULL) AS first_tid,
           min(a.start_ns) FILTER (WHERE a.global_tid IS NOT NULL) AS first_tid_start
    FROM activity a, grid g
    GROUP BY ALL
),
touched AS (SELECT DISTINCT unnest(range(b0, b1 + 1)) AS bucket FROM spans),
runs AS (  -- consecutive touched buckets with untouched ones between them
    SELECT bucket AS before, next_bucket AS after
    FROM (SELECT bucket, lead(bucket) OVER (ORDER BY bucket) AS next_bucket FROM touched)
    WHERE next_bucket > bucket + 1
),
stretches AS (
    SELECT (SELECT max(last_end) FROM spans s WHERE s.b1 = r.before) AS start_ns,
           (SELECT min(first_start) FROM spans s WHERE s.b0 = r.after) AS end_ns,
           (SELECT arg_min(first_tid, first_tid_start) FROM spans s WHERE s.b0 = r.after) AS first_tid
    FROM runs r
),
candidates AS (
    SELECT row_number() OVER (ORDER BY s.start_ns) AS id, s.start_ns, s.end_ns, s.end_ns - s.start_ns AS idle_ns,
           coalesce(s.first_tid, (SELECT global_tid FROM main_thread)) AS global_tid
    FROM stretches s, limits l
    WHERE s.end_ns - s.start_ns >= least(l.long_ns, coalesce(l.wait_ns, l.long_ns))
),
-- OS waits of the threads checked; done_ns, a running sum per (thread, call), gives the time waited up to any
-- moment t from the last call that started before t: done_ns - greatest(end_ns - t, 0). Calls a thread makes at
-- nesting level 0 do not overlap, so the sums of several names add up.
waits AS (
    SELECT global_tid, name, start_ns, end_ns,
           sum(end_ns - start_ns) OVER (PARTITION BY global_tid, name ORDER BY start_ns, end_ns
                                        ROWS UNBOUNDED PRECEDING) AS done_ns
    FROM osrt_calls
    WHERE coalesce(nesting_level, 0) = 0 AND end_ns > start_ns
      AND global_tid IN (SELECT global_tid FROM candidates)
      AND name IN ('epoll_wait', 'epoll_pwait', 'epoll_pwait2', 'poll', 'ppoll', 'select', 'pselect', 'pselect6',
                   'recv', 'recvfrom', 'recvmsg', 'recvmmsg', 'accept', 'accept4', 'futex', 'pthread_cond_wait',
                   'pthread_cond_timedwait', 'pthread_cond_clockwait', 'sem_wait', 'sem_timedwait',
                   'sem_clockwait', 'nanosleep', 'clock_nanosleep', 'usleep', 'sleep')
),
pairs AS (
    SELECT c.id, c.global_tid, c.start_ns, c.end_ns, n.name
    FROM candidates c JOIN (SELECT DISTINCT global_tid, name FROM waits) n ON n.global_tid = c.global_tid
),
upto_end AS (
    SELECT p.id, p.name, coalesce(w.done_ns - greatest(w.end_ns - p.end_ns, 0), 0) AS ns
    FROM pairs p ASOF LEFT JOIN waits w
         ON w.global_tid = p.global_tid AND w.name = p.name AND w.start_ns <= p.end_ns
),
upto_start AS (
    SELECT p.id, p.name, coalesce(w.done_ns - greatest(w.end_ns - p.start_ns, 0), 0) AS ns
    FROM pairs p ASOF LEFT JOIN waits w
         ON w.global_tid = p.global_tid AND w.name = p.name AND w.start_ns <= p.start_ns
),
waited AS (
    SELECT e.id, sum(e.ns - s.ns) AS wait_ns, arg_max(e.name, e.ns - s.ns) FILTER (WHERE e.ns > s.ns) AS wait_call
    FROM upto_end e JOIN upto_start s ON s.id = e.id AND s.name = e.name
    GROUP BY e.id
),
traced_threads AS (
    SELECT DISTINCT global_tid FROM osrt_calls WHERE global_tid IN (SELECT global_tid FROM candidates)
),
-- A thread's sampling period: the median time between two of its samples (nsys samples a running thread at
-- --sampling-frequency, 1 kHz by default), so samples x period is about the time it ran.
sampled_threads AS (
    SELECT global_tid, median(gap)::BIGINT AS period_ns
    FROM (SELECT global_tid, ts_ns - lag(ts_ns) OVER (PARTITION BY global_tid ORDER BY ts_ns) AS gap
          FROM cpu_samples WHERE global_tid IN (SELECT global_tid FROM candidates))
    WHERE gap > 0
    GROUP BY global_tid
),
in_stretch AS (
    SELECT c.id, count(*) AS n
    FROM (SELECT global_tid, ts_ns FROM cpu_samples WHERE global_tid IN (SELECT global_tid FROM sampled_threads)) s
    ASOF JOIN candidates c ON c.global_tid = s.global_tid AND c.start_ns <= s.ts_ns
    WHERE s.ts_ns < c.end_ns
    GROUP BY c.id
),
judged AS (
    SELECT c.start_ns, c.end_ns, c.idle_ns, c.global_tid, l.long_ns, l.step_ns,
           CASE WHEN c.global_tid IN (SELECT global_tid FROM traced_threads) THEN coalesce(w.wait_ns, 0) END AS wait_ns,
           w.wait_call,
           CASE WHEN t.global_tid IS NOT NULL THEN coalesce(i.n, 0) END AS samples,
           CASE WHEN t.global_tid IS NOT NULL THEN least(coalesce(i.n, 0) * t.period_ns, c.idle_ns) END AS on_cpu_ns,
           l.wait_ns AS wait_min_ns
    FROM candidates c CROSS JOIN limits l
    LEFT JOIN waited w ON w.id = c.id
    LEFT JOIN in_stretch i ON i.id = c.id
    LEFT JOIN sampled_threads t ON t.global_tid = c.global_tid
),
-- A stretch shorter than server_idle_min_ns in which CPU samples show the thread running for most of it is host
-- work (a loop in Python or Rust between two phases of work), not a wait, however long it is in steps.
recognised AS (
    SELECT *,
           CASE WHEN idle_ns >= ${server_idle_min_ns} THEN 'long'
                WHEN idle_ns >= wait_min_ns AND wait_ns >= ${server_idle_wait_share} * idle_ns THEN 'os-wait'
                WHEN idle_ns >= wait_min_ns AND on_cpu_ns <= (1 - ${server_idle_wait_share}) * idle_ns THEN 'off-cpu'
                WHEN idle_ns >= long_ns AND coalesce(on_cpu_ns <= (1 - ${server_idle_wait_share}) * idle_ns, true)
                    THEN 'long' END AS recognised
    FROM judged
)
SELECT start_ns, end_ns, idle_ns, recognised, long_ns AS long_min_ns, step_ns, global_tid, wait_ns, wait_call,
       samples
FROM recognised
WHERE recognised IS NOT NULL
ORDER BY start_ns
