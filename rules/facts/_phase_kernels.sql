-- @fact _phase_kernels
-- @doc Each kernel (or graph replay) with the inference phase it belongs to: the phase of its launching call
-- @doc (_call_phases: the latest NVTX range matched by _phase_patterns to open on the call's thread before it,
-- @doc while that range is open), 'other' when no phase range claims the call. That is the phase _timeline
-- @doc carries for every operation, so no operation is matched against the ranges again.
-- @needs _timeline
-- @column device_id CUDA device index.
-- @column start_ns Kernel start (ns).
-- @column end_ns Kernel end (ns).
-- @column gap_ns Idle time on the device before the kernel, from the end of the latest earlier kernel (ns).
-- @column phase Phase name, 'other' outside every phase range.
SELECT device_id, start_ns, end_ns, start_ns - prev_compute_end_ns AS gap_ns, coalesce(phase, 'other') AS phase
FROM _timeline
WHERE is_compute
