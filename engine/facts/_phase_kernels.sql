-- @fact _phase_kernels
-- @materialize
-- @doc Each kernel (or graph replay) with the inference phase it belongs to: the phase of the innermost
-- @doc NVTX range, matched by _phase_patterns, that encloses its launching call on the same thread.
-- @doc (Kept apart from `phases` so its window functions run on a native table: DuckDB 1.5.5 fails an
-- @doc internal assertion when they run over the ASOF join directly on several threads.)
-- @needs _gpu_ops _phase_ranges _issuing_calls
-- @column device_id CUDA device index.
-- @column start_ns Kernel start (ns).
-- @column end_ns Kernel end (ns).
-- @column phase Phase name, 'other' outside every phase range.
WITH k AS (
    SELECT o.device_id, o.start_ns, o.end_ns, l.global_tid, l.api_start_ns
    FROM _gpu_ops o LEFT JOIN _issuing_calls l ON l.pid = o.pid AND l.correlation_id = o.correlation_id
    WHERE o.kind IN ('kernel', 'graph')
),
assigned AS (
    SELECT k.device_id, k.start_ns, k.end_ns,
           CASE WHEN r.end_ns >= k.api_start_ns THEN r.phase ELSE 'other' END AS phase
    FROM k ASOF LEFT JOIN _phase_ranges r ON r.global_tid = k.global_tid AND k.api_start_ns >= r.start_ns
)
SELECT * FROM assigned
