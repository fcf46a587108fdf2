-- @fact _host_gap_ranges
-- @doc Host-work idle time (_idle_gaps cause 'host') of each device, attributed to the innermost NVTX push/pop
-- @doc range open on the thread that issued the next operation: one row per (device, range name). Digits that
-- @doc follow a separator are written `*`, so `ensure_layer_3_weights` and `ensure_layer_4_weights` add up as
-- @doc `ensure_layer_*_weights`. One sweep over the thread's range and gap boundaries gives the nesting depth
-- @doc and the open gaps at every moment, and an as-of lookup on (thread, depth) the innermost range, so no
-- @doc gap is compared with every range.
-- @needs _idle_gaps
-- @column device_id CUDA device index.
-- @column name Range name, digit runs after a separator as `*` ('(no NVTX range)' when none was open).
-- @column covered_ns Host-work idle time of the device inside it (innermost range only, ns).
-- @column range_count Distinct ranges of that name that covered some of it.
WITH host AS (
    SELECT device_id, global_tid, gap_start_ns, gap_end_ns FROM _idle_gaps WHERE cause = 'host'
),
threads AS (SELECT DISTINCT device_id, global_tid FROM host),
ranges AS (
    SELECT t.device_id, r.global_tid, r.start_ns, r.end_ns,
           regexp_replace(coalesce(r.text, '(unnamed range)'), '(^|[_.: \-\[(/])[0-9]+', '\1*', 'g') AS name,
           row_number() OVER (ORDER BY t.device_id, r.global_tid, r.start_ns, r.end_ns) AS range_id
    FROM nvtx_ranges r JOIN threads t ON t.global_tid = r.global_tid
    WHERE r.range_kind = 'push_pop' AND r.end_ns > r.start_ns
),
events AS (
    -- ends before starts at the same instant, so a range that ends where the next begins is never both open
    SELECT device_id, global_tid, start_ns AS t, 1 AS order_key, 1 AS d_range, 0 AS d_gap, range_id FROM ranges
    UNION ALL SELECT device_id, global_tid, end_ns, 0, -1, 0, NULL FROM ranges
    UNION ALL SELECT device_id, global_tid, gap_start_ns, 1, 0, 1, NULL FROM host
    UNION ALL SELECT device_id, global_tid, gap_end_ns, 0, 0, -1, NULL FROM host
),
swept AS (
    SELECT device_id, global_tid, t, range_id,
           sum(d_range) OVER w AS depth,
           sum(d_gap) OVER w AS open_gaps,
           lead(t) OVER w AS next_t
    FROM events
    WINDOW w AS (PARTITION BY device_id, global_tid ORDER BY t, order_key, range_id NULLS FIRST
                 ROWS UNBOUNDED PRECEDING)
),
opened AS (SELECT device_id, global_tid, t AS start_ns, depth, range_id FROM swept WHERE range_id IS NOT NULL),
pieces AS (
    SELECT device_id, global_tid, t, depth, next_t - t AS ns FROM swept
    WHERE open_gaps > 0 AND next_t > t
),
attributed AS (
    SELECT p.device_id, p.ns, CASE WHEN p.depth > 0 THEN o.range_id END AS range_id
    FROM pieces p ASOF LEFT JOIN opened o
        ON o.device_id = p.device_id AND o.global_tid = p.global_tid AND o.depth = p.depth AND o.start_ns <= p.t
)
SELECT a.device_id, coalesce(r.name, '(no NVTX range)') AS name, sum(a.ns) AS covered_ns,
       count(DISTINCT a.range_id) AS range_count
FROM attributed a LEFT JOIN ranges r ON r.range_id = a.range_id
GROUP BY ALL
