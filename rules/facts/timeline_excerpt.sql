-- @fact timeline_excerpt
-- @doc The events of one representative stretch of the capture, as the Nsight Systems timeline shows them: the
-- @doc CUDA API calls of the threads that issued its GPU work, the kernels, graph replays, copies and memsets
-- @doc of each GPU stream, the idle gaps of each GPU with their cause (_idle_gaps), the NVTX ranges and the
-- @doc OS-runtime calls of those threads. The stretch is the NVTX decode step of median duration when decode
-- @doc ranges hold GPU work (and at most excerpt_max_ops operations); otherwise the excerpt_ops consecutive
-- @doc operations of the GPU with the most idle time that hold the most idle time of that GPU's dominant idle
-- @doc cause, searched in the tenth of the GPU's window where that cause costs most (one pass over the gaps,
-- @doc then a window over that tenth only), so the excerpt shows the pattern the verdict names.
-- @doc Every row repeats the stretch (window_start_ns, window_end_ns, window_reason); rows are in track order,
-- @doc then start order. An event that overlaps the stretch is listed whole (its start may precede it). So that
-- @doc the picture stays readable, each thread's track keeps its excerpt_max_host longest events, and another
-- @doc GPU is shown only when it ran at most excerpt_max_ops operations in the stretch.
-- @report
-- @needs _timeline _idle_gaps _phase_ranges _api_classes
-- @requires kernels|graph_launches
-- @param excerpt_ops 24 range 1 inf
-- @param excerpt_max_ops 400 range 1 inf
-- @param excerpt_threads 3 range 1 inf
-- @param excerpt_max_host 200 range 0 inf
-- @column window_start_ns Start of the stretch (ns).
-- @column window_end_ns End of the stretch (ns).
-- @column window_reason How the stretch was chosen, in words.
-- @column track api, gpu, idle, nvtx or osrt.
-- @column device_id GPU of a gpu or idle event (NULL for host events).
-- @column stream_id CUDA stream of a gpu event.
-- @column global_tid Thread of a host event.
-- @column tid Thread id of a host event, as the GUI shows it.
-- @column kind kernel, graph, memcpy or memset (gpu); launch, sync or allocation (api, from _api_classes); the idle cause (idle); the NVTX domain or 'default' (nvtx); 'osrt' (osrt).
-- @column name Kernel or API name, copy direction, NVTX text, OS call name, or the idle cause.
-- @column label Short name to write on the event: the kernel's base name, else name.
-- @column start_ns Event start (ns).
-- @column end_ns Event end (ns).
-- @column dur_ns end_ns - start_ns (ns).
-- @column track_total Events of this track (and GPU or thread) in the stretch; more than listed when only the longest are (host tracks keep excerpt_max_host, another GPU is left out above excerpt_max_ops).
-- @check track not_null
-- @check dur_ns non_negative
-- @check window_end_ns not_null
WITH dev AS (
    -- The GPU the excerpt is about: the most idle time, then the most operations.
    SELECT t.device_id
    FROM (SELECT device_id, count(*) AS ops FROM _timeline GROUP BY device_id) t
    LEFT JOIN (SELECT device_id, sum(gap_ns) AS idle FROM _idle_gaps GROUP BY device_id) g USING (device_id)
    ORDER BY coalesce(g.idle, 0) DESC, t.ops DESC, t.device_id
    LIMIT 1
),
cause AS (
    SELECT g.cause FROM _idle_gaps g JOIN dev USING (device_id)
    GROUP BY g.cause ORDER BY sum(g.gap_ns) DESC, g.cause LIMIT 1
),
span AS (
    SELECT min(t.start_ns) AS t0, greatest(max(t.end_ns) - min(t.start_ns), 1) AS len
    FROM _timeline t JOIN dev USING (device_id)
),
-- The decode step of median duration among the decode ranges that issued GPU work on the device.
-- Each operation belongs to the latest decode range of its thread that its issuing call started in: each range owns
-- the calls from its start until it ends or the thread's next decode range begins (of two that begin together, the
-- longer), and an operation meets that stretch by an equi-join on time buckets, as in _call_phases (a range join
-- of every operation against every range costs seconds on millions of kernels, an as-of join a sort of them).
decode_ranges AS (SELECT global_tid, start_ns, end_ns FROM _phase_ranges WHERE phase = 'decode'),
owned AS (
    SELECT global_tid, start_ns, end_ns, owned_end_ns
    FROM (SELECT global_tid, start_ns, end_ns,
                 least(end_ns, coalesce(lead(start_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns),
                                        end_ns)) AS owned_end_ns
          FROM decode_ranges)
    WHERE owned_end_ns > start_ns
),
range_width AS (
    SELECT min(start_ns) AS origin, greatest((max(owned_end_ns) - min(start_ns)) // greatest(count(*), 1), 1000) AS b
    FROM owned
),
owned_buckets AS (
    SELECT o.global_tid, o.start_ns, o.end_ns, o.owned_end_ns,
           unnest(range((o.start_ns - w.origin) // w.b, (o.owned_end_ns - 1 - w.origin) // w.b + 1)) AS bucket
    FROM owned o CROSS JOIN range_width w
),
decode_steps AS (
    SELECT r.global_tid, r.start_ns, r.end_ns, count(*) AS ops, max(t.end_ns) AS last_end_ns
    -- The bucket is a column before the join: as an expression in the ON clause DuckDB joins on the thread alone.
    FROM (SELECT x.global_tid, x.api_start_ns, x.end_ns, (x.api_start_ns - w.origin) // w.b AS bucket
          FROM _timeline x CROSS JOIN range_width w
          WHERE x.device_id = (SELECT device_id FROM dev)) t
    JOIN owned_buckets r ON r.global_tid = t.global_tid AND r.bucket = t.bucket
    WHERE t.api_start_ns >= r.start_ns AND t.api_start_ns < r.owned_end_ns
    GROUP BY r.global_tid, r.start_ns, r.end_ns
),
median_step AS (
    SELECT start_ns, greatest(end_ns, last_end_ns) AS end_ns, ops, steps
    FROM (SELECT *, row_number() OVER (ORDER BY end_ns - start_ns, start_ns) AS n,
                 (SELECT count(*) FROM decode_steps) AS steps
          FROM decode_steps)
    WHERE n = (steps + 1) // 2
),
-- Otherwise: the tenth of the window with the most idle time of the dominant cause, then inside it the run of
-- excerpt_ops operations with the most of it.
tenth AS (
    SELECT least((g.gap_end_ns - s.t0) * 10 // s.len, 9) AS part
    FROM _idle_gaps g JOIN dev USING (device_id) CROSS JOIN span s
    WHERE g.cause = (SELECT cause FROM cause)
    GROUP BY part ORDER BY sum(g.gap_ns) DESC, part LIMIT 1
),
part_bounds AS (
    SELECT s.t0 + s.len * coalesce((SELECT part FROM tenth), 4) // 10 AS lo,
           s.t0 + s.len * (coalesce((SELECT part FROM tenth), 4) + 1) // 10 AS hi
    FROM span s
),
-- Both sides cut to the tenth before they are joined (the join would otherwise hash every gap of the run).
part_ops AS (
    SELECT t.start_ns, t.end_ns, t.prev_end_ns,
           CASE WHEN g.cause = (SELECT cause FROM cause) THEN g.gap_ns ELSE 0 END AS idle
    FROM (SELECT t.* FROM _timeline t, part_bounds b
          WHERE t.device_id = (SELECT device_id FROM dev) AND t.start_ns >= b.lo AND t.start_ns < b.hi) t
    LEFT JOIN (SELECT g.* FROM _idle_gaps g, part_bounds b
               WHERE g.device_id = (SELECT device_id FROM dev) AND g.gap_end_ns >= b.lo AND g.gap_end_ns < b.hi) g
           ON g.device_id = t.device_id AND g.gap_end_ns = t.start_ns AND g.gap_start_ns = t.prev_end_ns
),
runs AS (
    SELECT start_ns AS last_start_ns, end_ns AS last_end_ns,
           first_value(coalesce(prev_end_ns, start_ns)) OVER w AS first_ns,
           sum(idle) OVER w AS idle
    FROM part_ops
    WINDOW w AS (ORDER BY start_ns, end_ns ROWS BETWEEN ${excerpt_ops} - 1 PRECEDING AND CURRENT ROW)
),
best_run AS (
    SELECT least(first_ns, last_start_ns) AS start_ns, last_end_ns AS end_ns, idle
    FROM runs ORDER BY idle DESC, last_start_ns LIMIT 1
),
win AS (
    SELECT start_ns AS w0, end_ns AS w1,
           format('the decode step of median duration ({:,} of {:,} NVTX decode ranges with GPU work, {:,} operations)',
                  (steps + 1) // 2, steps, ops) AS reason
    FROM median_step WHERE ops <= ${excerpt_max_ops}
    UNION ALL
    SELECT start_ns, end_ns,
           CASE WHEN (SELECT cause FROM cause) IS NULL OR idle = 0
                THEN format('{} consecutive operations of GPU {} (it was never idle)', ${excerpt_ops}, (SELECT device_id FROM dev))
                ELSE format('the {} consecutive operations of GPU {} with the most {} idle time, its main idle cause',
                            ${excerpt_ops}, (SELECT device_id FROM dev), (SELECT cause FROM cause)) END
    FROM best_run WHERE NOT EXISTS (SELECT 1 FROM median_step WHERE ops <= ${excerpt_max_ops})
),
gpu AS (
    SELECT 'gpu' AS track, device_id, stream_id, NULL::BIGINT AS global_tid, NULL::BIGINT AS tid, 'kernel' AS kind,
           name, short_name AS label, start_ns, end_ns, pid, correlation_id
    FROM kernels WHERE start_ns < (SELECT w1 FROM win) AND end_ns > (SELECT w0 FROM win)
    UNION ALL
    SELECT 'gpu', device_id, stream_id, NULL, NULL, 'graph', 'graph ' || coalesce(CAST(graph_id AS VARCHAR), '?'),
           NULL, start_ns, end_ns, pid, correlation_id
    FROM graph_launches WHERE start_ns < (SELECT w1 FROM win) AND end_ns > (SELECT w0 FROM win)
    UNION ALL
    SELECT 'gpu', device_id, stream_id, NULL, NULL, 'memcpy', copy_kind || ' ' || src_mem || ' → ' || dst_mem,
           NULL, start_ns, end_ns, pid, correlation_id
    FROM memcpys WHERE start_ns < (SELECT w1 FROM win) AND end_ns > (SELECT w0 FROM win)
    UNION ALL
    SELECT 'gpu', device_id, stream_id, NULL, NULL, 'memset', 'memset', NULL, start_ns, end_ns, pid, correlation_id
    FROM memsets WHERE start_ns < (SELECT w1 FROM win) AND end_ns > (SELECT w0 FROM win)
),
-- The threads that issued the stretch's GPU work, the busiest first.
threads AS (
    SELECT a.global_tid, any_value(a.tid) AS tid
    FROM gpu JOIN _api_calls_by_id a ON a.pid = gpu.pid AND a.correlation_id = gpu.correlation_id
    GROUP BY a.global_tid ORDER BY count(*) DESC, a.global_tid LIMIT ${excerpt_threads}
),
events AS (
    SELECT track, device_id, stream_id, global_tid, tid, kind, name, coalesce(label, name) AS label, start_ns, end_ns
    FROM gpu
    UNION ALL
    SELECT 'api', NULL, NULL, a.global_tid, a.tid, c.api_class, a.name, a.name, a.start_ns, a.end_ns
    FROM api_calls a JOIN threads USING (global_tid) JOIN _api_classes c ON c.name_id = a.name_id
    WHERE a.start_ns < (SELECT w1 FROM win) AND a.end_ns > (SELECT w0 FROM win)
    UNION ALL
    SELECT 'idle', device_id, NULL, NULL, NULL, cause, cause, 'idle: ' || cause, gap_start_ns, gap_end_ns
    FROM _idle_gaps WHERE gap_start_ns < (SELECT w1 FROM win) AND gap_end_ns > (SELECT w0 FROM win)
    UNION ALL
    SELECT 'nvtx', NULL, NULL, n.global_tid, n.tid, coalesce(n.domain, 'default'), n.text, n.text, n.start_ns, n.end_ns
    FROM nvtx_ranges n JOIN threads USING (global_tid)
    WHERE n.start_ns < (SELECT w1 FROM win) AND n.end_ns > (SELECT w0 FROM win)
    UNION ALL
    SELECT 'osrt', NULL, NULL, o.global_tid, o.tid, 'osrt', o.name, o.name, o.start_ns, o.end_ns
    FROM osrt_calls o JOIN threads USING (global_tid)
    WHERE o.nesting_level = 0 AND o.start_ns < (SELECT w1 FROM win) AND o.end_ns > (SELECT w0 FROM win)
),
-- Bounded so the picture stays readable: another GPU's operations only when it ran at most excerpt_max_ops of
-- them in the stretch (its idle gaps with them); per thread, the excerpt_max_host longest events of each track.
counted AS (
    SELECT *, count(*) OVER (PARTITION BY track, coalesce(device_id, -1), coalesce(global_tid, -1)) AS track_total,
           row_number() OVER (PARTITION BY track, coalesce(device_id, -1), coalesce(global_tid, -1)
                              ORDER BY end_ns - start_ns DESC, start_ns) AS longest_rank
    FROM events
),
shown_devices AS (
    SELECT device_id FROM counted WHERE track = 'gpu' GROUP BY device_id
    HAVING device_id = (SELECT device_id FROM dev) OR count(*) <= ${excerpt_max_ops}
)
SELECT w.w0 AS window_start_ns, w.w1 AS window_end_ns, w.reason AS window_reason, e.track, e.device_id,
       e.stream_id, e.global_tid, e.tid, e.kind, e.name, e.label, e.start_ns, e.end_ns,
       e.end_ns - e.start_ns AS dur_ns, e.track_total
FROM counted e CROSS JOIN win w
WHERE CASE WHEN e.track IN ('gpu', 'idle') THEN e.device_id IN (SELECT device_id FROM shown_devices)
           ELSE e.longest_rank <= ${excerpt_max_host} END
ORDER BY CASE e.track WHEN 'nvtx' THEN 0 WHEN 'osrt' THEN 1 WHEN 'api' THEN 2 WHEN 'gpu' THEN 3 ELSE 4 END,
         e.global_tid, e.device_id, e.stream_id, e.start_ns, e.end_ns, e.name
