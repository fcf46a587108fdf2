-- @fact nvtx_summary
-- @doc One row per NVTX range label of each thread (domain, range text, thread), most time first: how often
-- @doc the range was opened and how long it stayed open, comparable with `nsys stats --report nvtx_sum` split
-- @doc per thread. Shown also when the capture has no CUDA activity (nsys profile --trace=nvtx), where the
-- @doc ranges are the only timing the export holds.
-- @report rows=50
-- @requires nvtx_ranges
-- @column domain NVTX domain name (NULL for the default domain).
-- @column name Range text ('(unnamed)' for a range without text).
-- @column pid Process of the thread that opened the ranges.
-- @column tid Thread that opened the ranges.
-- @column count Ranges with this label on this thread.
-- @column total_ns Summed duration of those ranges (ns).
-- @column mean_ns Mean duration (ns).
-- @column p50_ns Median duration (ns).
-- @column min_ns Shortest (ns).
-- @column max_ns Longest (ns).
-- @column share_of_capture total_ns / the traced time of the capture (0-1; capped at 1 when ranges of one label nest).
-- @check name not_null
-- @check count non_negative
-- @check total_ns non_negative
-- @check min_ns non_negative
-- @check share_of_capture range 0 1
-- Grouped on the thread key and label; the capture's length is read once from profile_info.
WITH traced AS (
    SELECT max(CAST(value AS BIGINT)) AS ns FROM profile_info WHERE key = 'duration_ns'
),
per_label AS (
    SELECT domain, coalesce(text, '(unnamed)') AS name, global_tid, any_value(pid) AS pid, any_value(tid) AS tid,
           count(*) AS count, sum(dur_ns) AS total_ns, avg(dur_ns) AS mean_ns,
           quantile_cont(dur_ns, 0.5) AS p50_ns, min(dur_ns) AS min_ns, max(dur_ns) AS max_ns
    FROM nvtx_ranges
    WHERE start_ns >= 0
    GROUP BY domain, coalesce(text, '(unnamed)'), global_tid
)
SELECT p.domain, p.name, p.pid, p.tid, p.count, p.total_ns, p.mean_ns, p.p50_ns, p.min_ns, p.max_ns,
       CASE WHEN t.ns > 0 THEN least(p.total_ns / t.ns, 1.0) END AS share_of_capture
FROM per_label p CROSS JOIN traced t
ORDER BY p.total_ns DESC, p.name, p.domain NULLS FIRST, p.pid, p.tid
