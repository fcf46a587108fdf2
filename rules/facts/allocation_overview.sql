-- @fact allocation_overview
-- @doc One row for the whole profile: device and pinned-host allocation and free calls (_api_classes
-- @doc 'allocation': cudaMalloc*, cudaFree*, cuMemAlloc*, cuMemFree*, cudaHostAlloc, cudaMallocHost,
-- @doc cudaFreeHost, cudaHostRegister, their driver equivalents) made in the steady state, after the first
-- @doc warmup_share of the active time of the span of GPU work (loading weights and warming caching allocators
-- @doc come first), the CPU time inside them, and the GPU idle time they cause (_idle_gaps cause 'allocation').
-- @doc Active time is the span less the server's idle stretches (_server_idle), which the verdict does not judge
-- @doc (docs/measures.md "A server waiting for requests"): the warm-up and the rate are measured on the work alone.
-- @per-phase
-- @needs _api_classes gpu_utilization _server_idle
-- @requires api_calls
-- @param warmup_share 0.1
-- @param top_apis 3 range 1 inf
-- @column steady_calls Allocation and free calls after the warm-up.
-- @column steady_ns CPU time inside them (ns).
-- @column total_calls Allocation and free calls in the whole capture.
-- @column calls_per_s steady_calls per second of steady_active_ns.
-- @column steady_active_ns Active time after the warm-up: the span of GPU work after it, less the server's idle stretches (ns).
-- @column most_frequent_api The allocation API called most often in the steady state.
-- @column top_apis The steady-state allocation APIs with the most CPU time: a list of {name, calls, ns}.
-- @column kernel_time_ns Sum of kernel durations in the whole capture, to compare steady_ns with (ns).
-- @column idle_ns GPU idle time caused by allocation and free calls, all GPUs (ns).
-- @column idle_fraction idle_ns / total window time of the used GPUs (0-1).
-- @check steady_calls not_null
-- @check steady_calls non_negative
-- @check steady_ns non_negative
-- @check total_calls non_negative
-- @check idle_ns non_negative
-- @check idle_fraction range 0 1
WITH span AS (
    SELECT min(window_start_ns) AS s, max(window_end_ns) AS e, sum(window_ns) AS window_ns,
           sum(idle_allocation_ns) AS idle_ns, sum(kernel_time_ns) AS kernel_ns
    FROM gpu_utilization
),
-- The server's idle stretches cut to the span, and the active stretches between them, each with the active
-- time before it: the warm-up ends where warmup_share of the active time has passed.
idle AS (
    SELECT greatest(i.start_ns, x.s) AS a, least(i.end_ns, x.e) AS b
    FROM _server_idle i CROSS JOIN span x WHERE i.end_ns > x.s AND i.start_ns < x.e
),
active AS (
    SELECT a, b, coalesce(sum(b - a) OVER (ORDER BY a ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
    FROM (SELECT s.a, e.b
          FROM (SELECT a, row_number() OVER (ORDER BY a) AS n
                FROM (SELECT s AS a FROM span UNION ALL SELECT b FROM idle)) s
          JOIN (SELECT b, row_number() OVER (ORDER BY b) AS n
                FROM (SELECT e AS b FROM span UNION ALL SELECT a FROM idle)) e USING (n))
    WHERE b > a
),
warmup AS (
    SELECT ${warmup_share} * coalesce(sum(b - a), 0) AS target, (1 - ${warmup_share}) * coalesce(sum(b - a), 0) AS steady_ns
    FROM active
),
warmup_end AS (
    SELECT coalesce((SELECT min(a + (w.target - before)) FROM active WHERE before <= w.target AND w.target <= before + (b - a)),
                    (SELECT s FROM span)) AS t
    FROM warmup w
),
calls AS (
    SELECT c.name, a.start_ns, a.dur_ns,
           a.start_ns >= (SELECT t FROM warmup_end) AS steady
    FROM _api_calls_by_id a JOIN _api_classes c ON c.name_id = a.name_id
    WHERE c.api_class = 'allocation'
),
per_api AS (
    SELECT name, count(*) AS n, sum(dur_ns) AS ns FROM calls WHERE steady GROUP BY name
),
top AS (
    SELECT list({'name': name, 'calls': n, 'ns': ns} ORDER BY ns DESC, name)[1:${top_apis}] AS top_apis FROM per_api
)
SELECT (SELECT count(*) FROM calls WHERE steady) AS steady_calls,
       (SELECT coalesce(sum(dur_ns), 0) FROM calls WHERE steady) AS steady_ns,
       (SELECT count(*) FROM calls) AS total_calls,
       (SELECT count(*) FROM calls WHERE steady) / greatest((SELECT steady_ns FROM warmup) / 1e9, 1e-9) AS calls_per_s,
       CAST((SELECT steady_ns FROM warmup) AS BIGINT) AS steady_active_ns,
       (SELECT name FROM per_api ORDER BY n DESC, name LIMIT 1) AS most_frequent_api,
       coalesce((SELECT top_apis FROM top), []) AS top_apis,
       coalesce((SELECT kernel_ns FROM span), 0) AS kernel_time_ns,
       coalesce((SELECT idle_ns FROM span), 0) AS idle_ns,
       CASE WHEN (SELECT window_ns FROM span) > 0 THEN (SELECT idle_ns FROM span) / (SELECT window_ns FROM span)
            ELSE 0 END AS idle_fraction
