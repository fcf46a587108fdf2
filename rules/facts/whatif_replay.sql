-- @fact whatif_replay
-- @doc Per device, and per phase when steps carry one, the median step measured and replayed under each
-- @doc what-if transform (_whatif_steps; docs/measures.md "What a fix would buy"): the median of the per-step replays,
-- @doc not a replay of the median. Rows with phase NULL cover every step of the device; without steps the one
-- @doc step is the device's judged window (source 'window'). The batch columns feed the batch projection:
-- @doc the medians of the step's kernel time split into attention and the other kernels, and, where the steps
-- @doc carry their batch size, a least-squares fit of step time against it. A row's medians are over the
-- @doc sample of its steps _whatif_steps replays (at most whatif_sample_steps per device and per phase, all steps of
-- @doc a smaller one); whatif_sample says which rows are sampled, out of how many steps, and each median's 95 %
-- @doc interval.
-- @report
-- @needs _whatif_steps
-- @column device_id CUDA device index.
-- @column phase Phase of the steps (NULL: all steps of the device).
-- @column source How the steps were found: nvtx, graph-launch, sync, or window (the judged window as one step).
-- @column steps Steps measured: the sample's when the row's steps outnumber whatif_sample_steps (whatif_sample.steps_total counts them all).
-- @column measured_step_ns Median measured step: the step's GPU chain, busy time plus the idle gaps before its operations (ns).
-- @column launch_gaps_step_ns Median step replayed with launch and gpu-side gaps inside the step at the per-node replay gap (CUDA graphs) (ns).
-- @column host_gaps_step_ns Median step replayed with host gaps overlapped (async scheduling), never below the host's own work per step (ns).
-- @column sync_step_ns Median step replayed with the sync-caused gaps at the per-node gap (ns).
-- @column allocation_step_ns Median step replayed with the allocation-caused gaps at the per-node gap (ns).
-- @column copies_pinned_step_ns Median step replayed with pageable host-device copies at the pinned bandwidth (ns).
-- @column copies_pinned_slow_step_ns The same at the low pinned bandwidth (pinned_gbps_low) (ns).
-- @column fused_step_ns Median step replayed with every fusion candidate (a repeated run of k glue kernels) fused into one kernel taking 1/k of the run's time (ns).
-- @column host_work_ns Median time per step the step's thread was not blocked in a synchronisation (ns).
-- @column busy_step_ns Median busy time per step (ns).
-- @column kernel_step_ns Median kernel time per step (ns).
-- @column attention_step_ns Median attention-kernel time per step (ns).
-- @column graph_step_ns Median time per step in CUDA-graph replays traced whole, whose kernels are not named (ns).
-- @column batch_factor Median times its batch the batch projection runs a step (_whatif_steps.batch_factor).
-- @column batch_low_step_ns Median step replayed at that batch, low end: attention kernels batch_factor times as long, each operation starting once issued and once the one before it ended (ns).
-- @column batch_high_step_ns The same, high end: the other kernels grown too (_whatif_steps.batch_high_ns) (ns).
-- @column node_gap_ns Per-node replay gap used (ns).
-- @column node_gap_measured True when node_gap_ns was measured in node-traced graph replays of this profile.
-- @column pinned_gbps Pinned host-device bandwidth used (GB/s).
-- @column pinned_gbps_low Low end of the pinned bandwidth (GB/s): pinned_gbps when measured.
-- @column pinned_measured True when pinned_gbps was measured in this profile.
-- @column batch_median Median requests per step (TensorRT-LLM ctx + gen reqs), NULL when the steps do not say.
-- @column batch_sizes Distinct batch sizes among the steps that say.
-- @column fit_slope_ns Least-squares slope of step time against batch size (ns per request), NULL with fewer than 2 sizes.
-- @column fit_intercept_ns Least-squares intercept of that fit (ns).
-- @column fit_r2 Coefficient of determination of that fit (0-1).
-- @check device_id not_null
-- @check steps non_negative
-- @check measured_step_ns non_negative
-- @check fit_r2 range 0 1
-- each phase's sampled steps, and the device's sampled steps under phase NULL
WITH sampled AS (
    SELECT * FROM _whatif_steps WHERE phase_sampled AND phase IS NOT NULL
    UNION ALL
    SELECT * REPLACE (NULL AS phase) FROM _whatif_steps WHERE device_sampled
)
SELECT device_id, phase, any_value(source) AS source, count(*) AS steps,
       CAST(median(measured_ns) AS BIGINT) AS measured_step_ns,
       CAST(median(launch_gaps_ns) AS BIGINT) AS launch_gaps_step_ns,
       CAST(median(host_gaps_ns) AS BIGINT) AS host_gaps_step_ns,
       CAST(median(sync_ns) AS BIGINT) AS sync_step_ns,
       CAST(median(allocation_ns) AS BIGINT) AS allocation_step_ns,
       CAST(median(copies_pinned_ns) AS BIGINT) AS copies_pinned_step_ns,
       CAST(median(copies_pinned_slow_ns) AS BIGINT) AS copies_pinned_slow_step_ns,
       CAST(median(fused_ns) AS BIGINT) AS fused_step_ns,
       CAST(median(host_work_ns) AS BIGINT) AS host_work_ns,
       CAST(median(busy_ns) AS BIGINT) AS busy_step_ns,
       CAST(median(kernel_ns) AS BIGINT) AS kernel_step_ns,
       CAST(median(attention_ns) AS BIGINT) AS attention_step_ns,
       CAST(median(graph_ns) AS BIGINT) AS graph_step_ns,
       median(batch_factor) AS batch_factor, CAST(median(batch_low_ns) AS BIGINT) AS batch_low_step_ns,
       CAST(median(batch_high_ns) AS BIGINT) AS batch_high_step_ns,
       any_value(node_gap_ns) AS node_gap_ns, any_value(node_gap_measured) AS node_gap_measured,
       any_value(pinned_gbps) AS pinned_gbps, any_value(pinned_gbps_low) AS pinned_gbps_low,
       any_value(pinned_measured) AS pinned_measured,
       median(batch) AS batch_median, count(DISTINCT batch) AS batch_sizes,
       CASE WHEN count(DISTINCT batch) >= 2 THEN regr_slope(measured_ns, batch) END AS fit_slope_ns,
       CASE WHEN count(DISTINCT batch) >= 2 THEN regr_intercept(measured_ns, batch) END AS fit_intercept_ns,
       CASE WHEN count(DISTINCT batch) >= 2 THEN least(greatest(regr_r2(measured_ns, batch), 0), 1) END AS fit_r2
FROM sampled
-- one row over all steps of the device, and one per named phase (steps without a phase are only in the former)
GROUP BY device_id, phase
ORDER BY device_id, phase NULLS FIRST
