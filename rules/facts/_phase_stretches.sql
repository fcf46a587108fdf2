-- @fact _phase_stretches
-- @whole-run
-- @materialize
-- @doc The stretch of each thread's time that each phase range (_phase_ranges) claims, listed once per time
-- @doc bucket it touches, so a call finds its phase by an equi-join on its thread and the bucket its start falls in
-- @doc instead of an as-of join that sorts every call (_call_phases, _timeline). A range claims the calls from
-- @doc its start until it ends or the thread's next phase range begins, whichever is first: the call's phase is
-- @doc that of the latest phase range to begin on its thread at or before it, while that range is open. A thread's
-- @doc phase ranges follow one another (one per step), so that is the range open around the call; of nested
-- @doc ranges the inner one counts (of two that begin together, the shorter), and a call after an inner range
-- @doc closed, inside the range around it, belongs to none. The stretches of a thread never overlap, so a call
-- @doc meets at most one. The bucket width is the stretches' span over their count (at least 1 us), and a thread's
-- @doc stretches add up to at most that span, so a stretch touches about two buckets.
-- @needs _phase_ranges
-- @column global_tid Thread that opened the range.
-- @column start_ns Start of the stretch: the range's start (ns).
-- @column end_ns Last nanosecond of the stretch: the range's end, or the nanosecond before the thread's next range begins (ns).
-- @column phase Phase name.
-- @column bucket A time bucket the stretch touches: (t - origin_ns) // bucket_ns for a time t in it.
-- @column origin_ns Where bucket 0 begins (ns), the same on every row.
-- @column bucket_ns Bucket width (ns), the same on every row.
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
    SELECT min(start_ns) AS origin_ns,
           greatest((max(end_ns) - min(start_ns)) // greatest(count(*), 1), 1000) AS bucket_ns
    FROM owned
)
SELECT o.global_tid, o.start_ns, o.end_ns, o.phase,
       unnest(range((o.start_ns - w.origin_ns) // w.bucket_ns, (o.end_ns - w.origin_ns) // w.bucket_ns + 1)) AS bucket,
       w.origin_ns, w.bucket_ns
FROM owned o CROSS JOIN width w
