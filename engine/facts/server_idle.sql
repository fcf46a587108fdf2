-- @fact server_idle
-- @doc One row: how much of the traced span the server spent with nothing in flight, in stretches of at least
-- @doc server_idle_min_ns (_server_idle: no GPU operation on any device and no CUDA call other than polling).
-- @doc An inference server waiting for requests is idle, not bottlenecked; those stretches are left out of the
-- @doc windows every other fact judges, and reported here instead (README "A server waiting for requests").
-- @needs _server_idle
-- @column stretch_count Idle stretches.
-- @column idle_ns Their total length (ns).
-- @column traced_ns Span of all traced activity (ns).
-- @column idle_fraction idle_ns / traced_ns (0-1).
-- @column active_ns traced_ns - idle_ns: the time the judged work ran in (ns).
-- @column longest_ns The longest stretch (ns).
-- @column longest_start_ns When it began (ns on the capture timeline).
-- @check stretch_count non_negative
-- @check idle_ns non_negative
-- @check idle_fraction range 0 1
WITH traced AS (SELECT max(CAST(value AS BIGINT)) AS ns FROM profile_info WHERE key = 'duration_ns')
SELECT count(i.idle_ns) AS stretch_count, coalesce(sum(i.idle_ns), 0)::BIGINT AS idle_ns,
       any_value(t.ns) AS traced_ns,
       CASE WHEN any_value(t.ns) > 0 THEN least(coalesce(sum(i.idle_ns), 0) / any_value(t.ns), 1) ELSE 0 END
           AS idle_fraction,
       greatest(any_value(t.ns) - coalesce(sum(i.idle_ns), 0), 0)::BIGINT AS active_ns,
       coalesce(max(i.idle_ns), 0) AS longest_ns, arg_max(i.start_ns, i.idle_ns) AS longest_start_ns
FROM traced t LEFT JOIN _server_idle i ON true
