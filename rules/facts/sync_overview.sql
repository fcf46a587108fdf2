-- @fact sync_overview
-- @doc One row for the whole profile: CPU-blocking synchronisations (explicit syncs and synchronous
-- @doc copies; stream waits do not block the CPU) and the GPU idle time they cause. A GPU that is busy while
-- @doc the host waits loses only the turn-around after each call, and a wait followed by long host work is
-- @doc charged to that work, not to the wait (_idle_gaps); the cost is idle_after_fraction.
-- @report
-- @per-phase
-- @needs _sync_calls _idle_gaps gpu_utilization _active_span
-- @requires api_calls
-- @column sync_calls Blocking calls.
-- @column most_frequent_api The most frequent blocking API.
-- @column most_frequent_count Calls of that API.
-- @column longest_api The blocking API the host spent the most time blocked in: where the waiting goes, which the most frequent one need not be (many quick cudaMemcpy calls beside a few long cudaEventSynchronize waits).
-- @column longest_blocked_ns CPU time blocked in that API (ns).
-- @column calls_per_s Blocking calls per second of active work: sync_calls / active_ns.
-- @column active_ns The span of API activity less the server's idle stretches in it (_active_span) (ns).
-- @column calls_per_kernel Blocking calls per kernel (or graph replay).
-- @column blocked_ns CPU time blocked in them (ns).
-- @column kernel_count Kernels and graph replays in the profile.
-- @column idle_after_ns GPU idle time the blocking calls cause: gaps whose cause is 'sync' (_idle_gaps) (ns).
-- @column idle_after_share idle_after_ns / all GPU idle time between operations (0-1).
-- @column idle_after_fraction idle_after_ns / total window time of the used GPUs (0-1).
-- @column mean_gpu_utilization Share of the used GPUs' windows with a kernel or graph replay running (0-1).
-- @check sync_calls not_null
-- @check sync_calls non_negative
-- @check blocked_ns non_negative
-- @check idle_after_ns non_negative
-- @check idle_after_share range 0 1
-- @check idle_after_fraction range 0 1
-- @check mean_gpu_utilization range 0 1
WITH blocking AS (SELECT * FROM _sync_calls WHERE kind IN ('sync', 'sync_copy')),
top AS (SELECT name, count(*) AS n FROM blocking GROUP BY name ORDER BY n DESC, name LIMIT 1),
longest AS (
    SELECT name, sum(end_ns - start_ns) AS ns FROM blocking GROUP BY name ORDER BY ns DESC, name LIMIT 1
),
win AS (SELECT device_id, window_ns AS w FROM gpu_utilization),
busy AS (SELECT coalesce(sum(compute_busy_ns), 0) AS b FROM gpu_utilization),
totals AS (
    SELECT (SELECT count(*) FROM _kernels_by_id) + (SELECT count(*) FROM graph_launches) AS kernels,
           (SELECT active_ns FROM _active_span) AS active_ns,
           (SELECT coalesce(sum(gap_ns), 0) FROM _idle_gaps) AS idle_ns,
           (SELECT coalesce(sum(gap_ns) FILTER (WHERE cause = 'sync'), 0) FROM _idle_gaps) AS sync_idle_ns,
           (SELECT coalesce(sum(w), 0) FROM win) AS window_ns
)
SELECT (SELECT count(*) FROM blocking) AS sync_calls,
       (SELECT name FROM top) AS most_frequent_api,
       coalesce((SELECT n FROM top), 0) AS most_frequent_count,
       (SELECT name FROM longest) AS longest_api,
       coalesce((SELECT ns FROM longest), 0) AS longest_blocked_ns,
       (SELECT count(*) FROM blocking) / (t.active_ns / 1e9) AS calls_per_s,
       t.active_ns,
       CASE WHEN t.kernels > 0 THEN (SELECT count(*) FROM blocking) / t.kernels END AS calls_per_kernel,
       (SELECT coalesce(sum(end_ns - start_ns), 0) FROM blocking) AS blocked_ns,
       t.kernels AS kernel_count,
       t.sync_idle_ns AS idle_after_ns,
       CASE WHEN t.idle_ns > 0 THEN t.sync_idle_ns / t.idle_ns ELSE 0 END AS idle_after_share,
       CASE WHEN t.window_ns > 0 THEN t.sync_idle_ns / t.window_ns ELSE 0 END AS idle_after_fraction,
       CASE WHEN t.window_ns > 0 THEN (SELECT b FROM busy) / t.window_ns END AS mean_gpu_utilization
FROM totals t
