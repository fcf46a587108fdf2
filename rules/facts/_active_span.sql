-- @fact _active_span
-- @doc One row: the span of CUDA API activity (first call to last) and how much of it was active work, that is
-- @doc not inside one of the server's idle stretches (_server_idle: nothing in flight, as when a server waits
-- @doc for requests). The verdict judges the active work only (docs/measures.md "A server waiting for requests"), so a rate
-- @doc per second of the profile divides by active_ns, not by the span: 2,013 syncs made in 1.2 s of work are
-- @doc 1,660/s, not 3/s because the capture then waited ten minutes. Per phase: the span of the phase's calls.
-- @needs _server_idle
-- @column start_ns First API call's start (ns).
-- @column end_ns Last API call's end (ns).
-- @column span_ns end_ns - start_ns, at least 1 (ns).
-- @column idle_ns Time of the span inside the server's idle stretches (ns).
-- @column active_ns span_ns - idle_ns, at least 1: the time a per-second rate divides by (ns).
WITH span AS (SELECT min(start_ns) AS s, max(end_ns) AS e FROM _api_calls_by_id),
idle AS (
    SELECT coalesce(sum(greatest(least(i.end_ns, x.e) - greatest(i.start_ns, x.s), 0)), 0)::BIGINT AS ns
    FROM _server_idle i CROSS JOIN span x
)
SELECT x.s AS start_ns, x.e AS end_ns, greatest(x.e - x.s, 1) AS span_ns, i.ns AS idle_ns,
       greatest(x.e - x.s - i.ns, 1) AS active_ns
FROM span x CROSS JOIN idle i
