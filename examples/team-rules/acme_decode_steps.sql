-- @fact acme_decode_steps
-- @doc One row per process with NVTX decode steps: how long one decode step takes (the time per output
-- @doc token of every sequence in the batch). Decode steps are the NVTX ranges matched by the configured
-- @doc decode phase pattern (vLLM/SGLang names by default).
-- @column pid Process that emitted the ranges.
-- @column step_count Decode-step ranges.
-- @column p50_step_ns Median step duration (ns).
-- @column p90_step_ns 90th percentile step duration (ns).
-- @column p99_step_ns 99th percentile step duration (ns).
-- @column max_step_ns Longest step (ns).
-- @column steps_per_s Steps per second at the median duration.
-- @needs _phase_ranges
WITH decode AS (SELECT pid, end_ns - start_ns AS dur_ns FROM _phase_ranges WHERE phase = 'decode')
SELECT pid, count(*) AS step_count,
       quantile_cont(dur_ns, 0.5) AS p50_step_ns, quantile_cont(dur_ns, 0.9) AS p90_step_ns,
       quantile_cont(dur_ns, 0.99) AS p99_step_ns, max(dur_ns) AS max_step_ns,
       1e9 / nullif(quantile_cont(dur_ns, 0.5), 0) AS steps_per_s
FROM decode
GROUP BY pid
ORDER BY pid
