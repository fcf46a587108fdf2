-- @fact api_summary
-- @doc One row per CUDA API name (runtime and driver): how often it was called and how long the CPU
-- @doc spent inside it. Comparable with `nsys stats --report cuda_api_sum` (which keeps some suffixes).
-- @report rows=50
-- @requires api_calls
-- @column name API name without the _vNNNN suffix.
-- @column api_class runtime or driver.
-- @column call_count Calls.
-- @column total_ns CPU time inside the calls (ns).
-- @column mean_ns Mean call duration (ns).
-- @column p50_ns Median call duration (ns).
-- @column p99_ns 99th percentile call duration (ns).
-- @column max_ns Longest call (ns).
-- @column share_of_api_time total_ns / CPU time in all CUDA API calls (0-1).
-- @check name not_null
-- @check name unique
-- @check api_class accepted_values runtime driver
-- @check call_count non_negative
-- @check total_ns non_negative
-- @check share_of_api_time range 0 1
-- Both quantiles from one aggregate: DuckDB keeps every value of a quantile's group in memory, outside its memory
-- limit, once per quantile aggregate (20 M calls: 160 MB each).
SELECT name, api_class, call_count, total_ns, mean_ns, q[1] AS p50_ns, q[2] AS p99_ns, max_ns, share_of_api_time
FROM (SELECT name, any_value(api_class) AS api_class, count(*) AS call_count, sum(dur_ns) AS total_ns,
             avg(dur_ns) AS mean_ns, quantile_cont(dur_ns, [0.5, 0.99]) AS q, max(dur_ns) AS max_ns,
             sum(dur_ns) / nullif(any_value(t.total_ns), 0) AS share_of_api_time
      FROM api_calls CROSS JOIN (SELECT sum(dur_ns) AS total_ns FROM api_calls) t
      GROUP BY name)
ORDER BY total_ns DESC, name
