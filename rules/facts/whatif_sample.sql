-- @fact whatif_sample
-- @doc Per whatif_replay row (device, and phase; phase NULL: every step of the device): how many steps its medians
-- @doc were taken over and, when those are a sample (_whatif_steps keeps whatif_sample_steps per device and per
-- @doc phase that has more than twice as many, evenly spaced in time order), a distribution-free 95 % confidence interval of each median: with n
-- @doc steps sampled, the sample's order statistics of ranks floor(n/2 - 0.98 sqrt(n)) and ceil(n/2 + 0.98 sqrt(n))
-- @doc + 1 (the normal approximation of the binomial: 1.96 sqrt(n)/2 either side of the middle rank) hold the
-- @doc median of all the steps with about 95 % confidence. The intervals are NULL when every step was replayed:
-- @doc the medians are then exact. docs/measures.md "What a fix would buy".
-- @needs _whatif_steps
-- @column device_id CUDA device index.
-- @column phase Phase of the steps (NULL: all steps of the device), as in whatif_replay.
-- @column steps_total Steps of the device (phase NULL) or of the device in the phase, all of them.
-- @column steps Steps sampled: whatif_replay.steps, equal to steps_total when every step was replayed.
-- @column sampled True when the medians are over a sample (steps < steps_total).
-- @column measured_step_low_ns Low end of the 95 % interval of the median of the measured step; NULL when not sampled (ns).
-- @column measured_step_high_ns High end of that interval; NULL when not sampled (ns).
-- @column launch_gaps_step_low_ns Low end of the 95 % interval of the median of the step without launch gaps (whatif_replay.launch_gaps_step_ns); NULL when not sampled (ns).
-- @column launch_gaps_step_high_ns High end of that interval; NULL when not sampled (ns).
-- @column host_gaps_step_low_ns Low end of the 95 % interval of the median of the step with host work overlapped (whatif_replay.host_gaps_step_ns); NULL when not sampled (ns).
-- @column host_gaps_step_high_ns High end of that interval; NULL when not sampled (ns).
-- @column sync_step_low_ns Low end of the 95 % interval of the median of the step without the syncs (whatif_replay.sync_step_ns); NULL when not sampled (ns).
-- @column sync_step_high_ns High end of that interval; NULL when not sampled (ns).
-- @column allocation_step_low_ns Low end of the 95 % interval of the median of the step without allocation (whatif_replay.allocation_step_ns); NULL when not sampled (ns).
-- @column allocation_step_high_ns High end of that interval; NULL when not sampled (ns).
-- @column copies_pinned_step_low_ns Low end of the 95 % interval of the median of the step with pinned copies (whatif_replay.copies_pinned_step_ns); NULL when not sampled (ns).
-- @column copies_pinned_step_high_ns High end of that interval; NULL when not sampled (ns).
-- @column copies_pinned_slow_step_low_ns Low end of the 95 % interval of the median of the same at the low pinned bandwidth (whatif_replay.copies_pinned_slow_step_ns); NULL when not sampled (ns).
-- @column copies_pinned_slow_step_high_ns High end of that interval; NULL when not sampled (ns).
-- @column fused_step_low_ns Low end of the 95 % interval of the median of the step with the glue fused (whatif_replay.fused_step_ns); NULL when not sampled (ns).
-- @column fused_step_high_ns High end of that interval; NULL when not sampled (ns).
-- @check device_id not_null
-- @check steps non_negative
-- @check steps_total non_negative
-- each phase's sampled steps, and the device's sampled steps under phase NULL, as whatif_replay groups them
WITH sampled AS (
    SELECT * FROM _whatif_steps WHERE phase_sampled AND phase IS NOT NULL
    UNION ALL
    SELECT * REPLACE (NULL AS phase, device_steps AS stratum_steps) FROM _whatif_steps WHERE device_sampled
),
ordered AS (
    SELECT device_id, phase, count(*) AS steps, any_value(stratum_steps) AS steps_total,
           list(measured_ns ORDER BY measured_ns) AS measured_ns,
           list(launch_gaps_ns ORDER BY launch_gaps_ns) AS launch_gaps_ns,
           list(host_gaps_ns ORDER BY host_gaps_ns) AS host_gaps_ns,
           list(sync_ns ORDER BY sync_ns) AS sync_ns,
           list(allocation_ns ORDER BY allocation_ns) AS allocation_ns,
           list(copies_pinned_ns ORDER BY copies_pinned_ns) AS copies_pinned_ns,
           list(copies_pinned_slow_ns ORDER BY copies_pinned_slow_ns) AS copies_pinned_slow_ns,
           list(fused_ns ORDER BY fused_ns) AS fused_ns
    FROM sampled GROUP BY device_id, phase
),
ranked AS (
    SELECT *, steps < steps_total AS sampled,
           CAST(greatest(floor(steps / 2 - 0.98 * sqrt(steps)), 1) AS BIGINT) AS lo_rank,
           CAST(least(ceil(steps / 2 + 0.98 * sqrt(steps)) + 1, steps) AS BIGINT) AS hi_rank
    FROM ordered
)
SELECT device_id, phase, steps_total, steps, sampled,
       CASE WHEN sampled THEN measured_ns[lo_rank] END AS measured_step_low_ns,
       CASE WHEN sampled THEN measured_ns[hi_rank] END AS measured_step_high_ns,
       CASE WHEN sampled THEN launch_gaps_ns[lo_rank] END AS launch_gaps_step_low_ns,
       CASE WHEN sampled THEN launch_gaps_ns[hi_rank] END AS launch_gaps_step_high_ns,
       CASE WHEN sampled THEN host_gaps_ns[lo_rank] END AS host_gaps_step_low_ns,
       CASE WHEN sampled THEN host_gaps_ns[hi_rank] END AS host_gaps_step_high_ns,
       CASE WHEN sampled THEN sync_ns[lo_rank] END AS sync_step_low_ns,
       CASE WHEN sampled THEN sync_ns[hi_rank] END AS sync_step_high_ns,
       CASE WHEN sampled THEN allocation_ns[lo_rank] END AS allocation_step_low_ns,
       CASE WHEN sampled THEN allocation_ns[hi_rank] END AS allocation_step_high_ns,
       CASE WHEN sampled THEN copies_pinned_ns[lo_rank] END AS copies_pinned_step_low_ns,
       CASE WHEN sampled THEN copies_pinned_ns[hi_rank] END AS copies_pinned_step_high_ns,
       CASE WHEN sampled THEN copies_pinned_slow_ns[lo_rank] END AS copies_pinned_slow_step_low_ns,
       CASE WHEN sampled THEN copies_pinned_slow_ns[hi_rank] END AS copies_pinned_slow_step_high_ns,
       CASE WHEN sampled THEN fused_ns[lo_rank] END AS fused_step_low_ns,
       CASE WHEN sampled THEN fused_ns[hi_rank] END AS fused_step_high_ns
FROM ranked
ORDER BY device_id, phase NULLS FIRST
