-- @fact _call_phases
-- @whole-run
-- @materialize
-- @doc The inference phase of each CUDA API call made inside a phase range (_phase_ranges): the phase of the last
-- @doc phase range to begin on the calling thread at or before the call's start, when the call started before that
-- @doc range ended. A thread's phase ranges follow one another (one per step), so that is the range open around
-- @doc the call; of nested ranges the inner one counts (of two that begin together, the shorter), and a call made
-- @doc after an inner range closed, inside the range around it, belongs to none. Calls of
-- @doc threads that opened no phase range, and calls outside every phase range, are not listed: they belong to
-- @doc the phase 'other'. The GPU operations a call issued share its process and correlation id, so this one
-- @doc table puts calls, kernels, copies and the idle gaps before them in their phase (engine/facts/scopes.py).
-- @doc Each call keeps every stored column of api_calls (its name as an id), so a named phase reads its calls
-- @doc here through a filter instead of a copy.
-- @needs _phase_ranges
-- @column start_ns Call start (ns).
-- @column end_ns Call end (ns).
-- @column dur_ns end_ns - start_ns (ns).
-- @column pid Process.
-- @column tid Thread id.
-- @column global_tid Thread of the call.
-- @column correlation_id Correlation id of the call (and of the GPU work it issued).
-- @column name_id StringIds id of the API name (see api_calls.name_id).
-- @column return_value CUDA return code (0 = success).
-- @column event_class nsys eventClass: 0 CUDA runtime, 1 CUDA driver, NULL when not recorded.
-- @column phase Phase name.
-- Each range owns the calls from its start until it ends or the thread's next range begins, whichever is first, so
-- the owned stretches of a thread never overlap and each call falls in at most one. Calls and stretches meet in an
-- equi-join on time buckets (a stretch listed in every bucket it touches, a call in the one it starts in), so the
-- millions of calls are neither sorted nor joined back; the bucket width is the ranges' span over their count (at
-- least 1 us), and a thread's owned stretches add up to at most that span, so the stretches touch about two
-- buckets each.
WITH ranges AS (
    SELECT global_tid, start_ns, end_ns, phase,
           lead(start_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns DESC, phase) AS next_start_ns
    FROM _phase_ranges
),
owned AS (
    SELECT global_tid, start_ns, least(end_ns, coalesce(next_start_ns - 1, end_ns)) AS end_ns, phase
    FROM ranges
    WHERE least(end_ns, coalesce(next_start_ns - 1, end_ns)) >= start_ns
),
width AS (
    SELECT min(start_ns) AS origin, greatest((max(end_ns) - min(start_ns)) // greatest(count(*), 1), 1000) AS b
    FROM owned
),
owned_buckets AS (
    SELECT o.global_tid, o.start_ns, o.end_ns, o.phase,
           unnest(range((o.start_ns - w.origin) // w.b, (o.end_ns - w.origin) // w.b + 1)) AS bucket
    FROM owned o CROSS JOIN width w
),
-- The bucket is a column before the join: as an expression in the ON clause DuckDB joins on the thread alone.
calls AS (
    SELECT c.*, (c.start_ns - w.origin) // w.b AS bucket FROM _api_calls_by_id c CROSS JOIN width w
)
-- The columns in the order the stored api_calls table has them (engine/reading/canonical.py).
SELECT c.start_ns, c.end_ns, c.dur_ns, c.pid, c.tid, c.global_tid, c.correlation_id, c.name_id, c.return_value,
       c.event_class, o.phase
FROM calls c JOIN owned_buckets o ON o.global_tid = c.global_tid AND o.bucket = c.bucket
WHERE c.start_ns >= o.start_ns AND c.start_ns <= o.end_ns
