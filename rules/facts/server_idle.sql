-- @fact server_idle
-- @doc One row: how much of the traced span the run spent waiting, as a server waits for requests, in quiet
-- @doc stretches (_server_idle: no GPU operation on any device, no CUDA call other than polling, no engine step
-- @doc open; long compared with the typical step, or with the issuing thread blocked in an OS wait). Waiting is
-- @doc not a bottleneck; those stretches are left out of the windows every other fact judges, and reported here
-- @doc instead (docs/measures.md "A server waiting for requests").
-- @needs _server_idle
-- @column stretch_count Quiet stretches.
-- @column idle_ns Their total length (ns).
-- @column traced_ns Span of all traced activity (ns).
-- @column idle_fraction idle_ns / traced_ns (0-1).
-- @column active_ns traced_ns - idle_ns: the time the judged work ran in (ns).
-- @column longest_ns The longest stretch (ns).
-- @column longest_start_ns When it began (ns on the capture timeline).
-- @column long_count Stretches recognised by their length alone (at least long_min_ns).
-- @column os_wait_count Shorter stretches recognised because the issuing thread was blocked in OS waits for most of them.
-- @column off_cpu_count Shorter stretches recognised because CPU sampling never found the issuing thread running in them.
-- @column wait_calls The OS waits the issuing threads spent the stretches in, most time first (e.g. 'epoll_wait, poll'); NULL when none was traced.
-- @column long_min_ns The length from which a quiet stretch counts by itself (ns); NULL when there is no stretch.
-- @column step_ns The typical step the lengths are measured against: median start-to-start time of consecutive steps (ns); NULL when the run has no steps or no stretch.
-- @check stretch_count non_negative
-- @check idle_ns non_negative
-- @check idle_fraction range 0 1
-- @check long_count non_negative
-- @check os_wait_count non_negative
-- @check off_cpu_count non_negative
WITH traced AS (SELECT max(CAST(value AS BIGINT)) AS ns FROM profile_info WHERE key = 'duration_ns'),
calls AS (
    SELECT string_agg(wait_call, ', ' ORDER BY ns DESC) AS names
    FROM (SELECT wait_call, sum(wait_ns) AS ns FROM _server_idle WHERE wait_call IS NOT NULL GROUP BY ALL)
)
SELECT count(i.idle_ns) AS stretch_count, coalesce(sum(i.idle_ns), 0)::BIGINT AS idle_ns,
       any_value(t.ns) AS traced_ns,
       CASE WHEN any_value(t.ns) > 0 THEN least(coalesce(sum(i.idle_ns), 0) / any_value(t.ns), 1) ELSE 0 END
           AS idle_fraction,
       greatest(any_value(t.ns) - coalesce(sum(i.idle_ns), 0), 0)::BIGINT AS active_ns,
       coalesce(max(i.idle_ns), 0) AS longest_ns, arg_max(i.start_ns, i.idle_ns) AS longest_start_ns,
       count(*) FILTER (WHERE i.recognised = 'long') AS long_count,
       count(*) FILTER (WHERE i.recognised = 'os-wait') AS os_wait_count,
       count(*) FILTER (WHERE i.recognised = 'off-cpu') AS off_cpu_count,
       any_value(c.names) AS wait_calls,
       max(i.long_min_ns) AS long_min_ns, max(i.step_ns) AS step_ns
FROM traced t CROSS JOIN calls c LEFT JOIN _server_idle i ON true
