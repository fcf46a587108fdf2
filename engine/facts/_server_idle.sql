-- @fact _server_idle
-- @materialize
-- @doc The stretches of at least server_idle_min_ns (default 1 s) during which nothing was in flight: no GPU
-- @doc operation ran on any device and no CUDA API call ran on any thread, except polling and query calls
-- @doc (names with Query, Get or PeekAtLastError, which an idle server may keep making). An inference server
-- @doc between requests looks like this (README "A server waiting for requests"). The stretches are cut out of
-- @doc the judged windows: _timeline lets no idle gap span one, and gpu_utilization leaves them out of the
-- @doc device windows, so the rules judge the active work only. The operation after a stretch owns the gap from
-- @doc the stretch's end; the moments between a GPU's last operation and the start of the stretch (the last
-- @doc CUDA calls before the wait) are left out with it.
-- @doc Found without sorting the activity: time is cut into buckets of half the minimum, one pass records which
-- @doc buckets any activity touches (with the earliest start and latest end per bucket), and a stretch of at
-- @doc least the minimum always holds one whole untouched bucket; its exact ends come from the neighbouring
-- @doc touched buckets. Buckets are never narrower than a two-millionth of the traced span, so that a tiny
-- @doc minimum cannot make millions of them; below that size a stretch can be missed.
-- @needs _gpu_ops _api_names
-- @param server_idle_min_ns 1000000000
-- @column start_ns When the last activity before the stretch ended (ns).
-- @column end_ns When the first activity after it started (ns).
-- @column idle_ns Its length (ns).
WITH quiet_names AS (
    SELECT name_id FROM _api_names WHERE regexp_matches(name, 'Query|Get[A-Z]|PeekAtLastError')
),
activity AS (
    SELECT start_ns, end_ns FROM _gpu_ops
    UNION ALL
    SELECT start_ns, end_ns FROM api_calls
    WHERE end_ns >= start_ns AND name_id NOT IN (SELECT name_id FROM quiet_names)
),
grid AS (
    SELECT min(start_ns) AS origin,
           greatest(${server_idle_min_ns} // 2, (max(end_ns) - min(start_ns)) // 2000000, 1)::BIGINT AS width
    FROM activity
),
-- One row per (first bucket, last bucket) an activity touches: millions of activities, few such pairs.
spans AS (
    SELECT (a.start_ns - g.origin) // g.width AS b0, (a.end_ns - g.origin) // g.width AS b1,
           min(a.start_ns) AS first_start, max(a.end_ns) AS last_end
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
           (SELECT min(first_start) FROM spans s WHERE s.b0 = r.after) AS end_ns
    FROM runs r
)
SELECT start_ns, end_ns, end_ns - start_ns AS idle_ns
FROM stretches
WHERE end_ns - start_ns >= ${server_idle_min_ns}
ORDER BY start_ns
