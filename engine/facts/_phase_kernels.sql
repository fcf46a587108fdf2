-- @fact _phase_kernels
-- @doc Each kernel (or graph replay) with the inference phase it belongs to: the phase of the innermost
-- @doc NVTX range, matched by _phase_patterns, that encloses its launching call on the same thread.
-- @doc Only kernels launched from threads that opened a phase range go through the ASOF match; the rest are
-- @doc 'other' at once (no sort of millions of kernels when the profile has no phase ranges).
-- @needs _timeline _phase_ranges
-- @column device_id CUDA device index.
-- @column start_ns Kernel start (ns).
-- @column end_ns Kernel end (ns).
-- @column gap_ns Idle time on the device before the kernel, from the end of the latest earlier kernel (ns).
-- @column phase Phase name, 'other' outside every phase range.
WITH phase_threads AS (SELECT DISTINCT global_tid FROM _phase_ranges),
k AS (
    SELECT device_id, start_ns, end_ns, start_ns - prev_compute_end_ns AS gap_ns, global_tid, api_start_ns
    FROM _timeline WHERE is_compute AND global_tid IN (SELECT global_tid FROM phase_threads)
)
SELECT k.device_id, k.start_ns, k.end_ns, k.gap_ns,
       CASE WHEN r.end_ns >= k.api_start_ns THEN r.phase ELSE 'other' END AS phase
FROM k ASOF LEFT JOIN _phase_ranges r ON r.global_tid = k.global_tid AND k.api_start_ns >= r.start_ns
UNION ALL
SELECT device_id, start_ns, end_ns, start_ns - prev_compute_end_ns, 'other'
FROM _timeline
WHERE is_compute AND (global_tid IS NULL OR global_tid NOT IN (SELECT global_tid FROM phase_threads))
