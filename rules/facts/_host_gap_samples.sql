-- @fact _host_gap_samples
-- @doc CPU samples (nsys --sample with backtraces) of the thread that issued a device's next operation, taken
-- @doc during host-work idle gaps (_idle_gaps cause 'host'): one row per (device, leaf function), the code the
-- @doc thread was running while the GPU waited. Each sample finds its gap with an as-of lookup.
-- @needs _idle_gaps
-- @column device_id CUDA device index.
-- @column name Leaf function (a hex address when nsys could not resolve the symbol; '(no backtrace)' when none).
-- @column module Binary or library of the leaf frame.
-- @column sample_count Samples in such gaps.
WITH host AS (
    SELECT device_id, global_tid, gap_start_ns, gap_end_ns FROM _idle_gaps WHERE cause = 'host'
)
SELECT h.device_id, coalesce(s.function, '(no backtrace)') AS name, any_value(s.module) AS module,
       count(*) AS sample_count
FROM cpu_samples s ASOF JOIN host h ON h.global_tid = s.global_tid AND h.gap_start_ns <= s.ts_ns
WHERE s.ts_ns < h.gap_end_ns
GROUP BY ALL
