-- @fact _whatif_steps
-- @materialize
-- @doc One row per (device, step): the step's measured GPU chain and its replay under each what-if transform
-- @doc (docs/measures.md "What a fix would buy"). The model is Daydream's (Zhu et al., "Daydream: Accurately Estimating
-- @doc the Efficacy of Optimizations for DNN Training", USENIX ATC 2020): take the dependency graph from the
-- @doc trace, transform it, replay it. Here the graph is each device's chain of operations in start order
-- @doc (_timeline): every operation adds its busy piece greatest(end_ns - greatest(start_ns, prev_end_ns), 0)
-- @doc and is preceded by its idle gap, whose one cause comes from _idle_gaps. A transform re-times the gaps
-- @doc (or busy pieces) of given causes and keeps every other edge as measured, so a retained dependency (a
-- @doc sync, a copy, the host's scheduling between steps) keeps its delay; the replayed chain is the sum of the
-- @doc re-timed pieces, never a total subtracted from the run. An operation belongs to the step whose range
-- @doc (_steps: from its start to
-- @doc the end of its iteration, span_end_ns) holds its issuing call on the same thread, and its gap with it; on a
-- @doc device with fewer than whatif_min_steps steps, all of its operations form one step (step_id -1 - device_id) spanning the judged window.
-- @doc Only a sample of the steps is replayed: whatif_replay takes medians, which need no more. Each (device, phase)
-- @doc stratum of more than twice whatif_sample_steps steps keeps whatif_sample_steps of them, and each device as
-- @doc many for its all-steps median: steps evenly spaced in time order (one every n / whatif_sample_steps, a
-- @doc fraction), so the same export gives the same sample and the sample spreads over the whole run; a smaller
-- @doc stratum keeps them all, and so does one whose measured steps are not tight around their median: where the
-- @doc stratum's measured chain times between the quantiles 0.5 -/+ 0.98 / sqrt(whatif_sample_steps) (the ranks a
-- @doc sample's 95 % interval of the median is read at, whatif_sample) lie more than whatif_sample_tolerance of the
-- @doc median apart (two kinds of step alternating, say), a sample's median could land on either kind, and every
-- @doc step is replayed. The rows are the sampled steps only: a sum over them is no total of the run (stratum_steps and
-- @doc device_steps count every step).
-- @needs _timeline _idle_gaps _sync_calls _steps _glue_runs _kernel_classes
-- @param whatif_node_gap_ns 1000 range 0 1000000
-- @param whatif_pinned_gbps 25 range 0.1 10000
-- @param whatif_pinned_gbps_low 12 range 0.1 10000
-- @param whatif_batch 8 range 2 4096
-- @param whatif_gemm_growth 0.05 range 0 1
-- @param whatif_min_steps 5 range 1 1000
-- @param whatif_sample_steps 2000 range 10 inf
-- @param whatif_sample_tolerance 0.01 range 0 inf
-- @column device_id CUDA device index.
-- @column step_id The step (_steps.step_id); -1 - device_id for the whole window when the device has no step.
-- @column source How the step was found: nvtx, graph-launch, sync, or window (no steps: the judged window).
-- @column phase The step's phase (_steps.phase: its label's or inferred), else the phase of most of its operations (_timeline.phase).
-- @column batch Requests in the step (TensorRT-LLM ctx + gen reqs) when its text carries them, else NULL.
-- @column op_count GPU operations of the step.
-- @column busy_ns Busy time the step's operations add to the device's union of busy intervals (ns).
-- @column gap_ns Idle gaps before the step's operations (ns).
-- @column measured_ns busy_ns + gap_ns: the step's measured chain time (ns).
-- @column attention_ns Busy time of attention kernels (operation class attention, rules/vocabulary/operation_classes.yaml) (ns).
-- @column kernel_ns Busy time of all kernels and graph replays (ns).
-- @column graph_ns Busy time of CUDA-graph replays traced whole (graph trace mode hides their kernels and names) (ns).
-- @column host_work_ns Time the step's thread was not blocked in a synchronising call, from the step's start to the next step's start (ns): what the host itself spends per step.
-- @column launch_gaps_ns Chain time with CUDA graphs: launch and gpu-side gaps after the step's first operation become node_gap_ns (ns).
-- @column host_gaps_ns Chain time with host gaps overlapped (async scheduling): host gaps become node_gap_ns, but the step takes at least host_work_ns (ns).
-- @column sync_ns Chain time without the syncs: sync-caused gaps become node_gap_ns (ns).
-- @column allocation_ns Chain time without allocation calls in the loop: allocation gaps become node_gap_ns (ns).
-- @column copies_pinned_ns Chain time with pageable host-device copies at pinned_gbps (ns).
-- @column copies_pinned_slow_ns The same at pinned_gbps_low (ns): equal to copies_pinned_ns when the bandwidth was measured.
-- @column fused_ns Chain time replayed with every fusion candidate (_glue_runs: a repeated run of k glue kernels on a stream) fused into one kernel taking 1/k of the run's time (casts keep theirs), started when the run's first kernel could start; the run's other kernels no longer wait to be issued unless a synchronisation preceded them (ns).
-- @column batch_factor How many times the step's batch the batch projection runs: whatif_batch over the step's batch, else whatif_batch (the profile does not say).
-- @column batch_low_ns Chain time replayed with batch_factor times the batch, low end: attention kernels take batch_factor times as long, the other operations as measured, each operation starting when it was issued and the one before it ended (ns).
-- @column batch_high_ns The same, high end: the other kernels also take 1 + whatif_gemm_growth * (batch_factor - 1) times as long (ns).
-- @column node_gap_ns Gap between consecutive kernels of one CUDA-graph replay: the median measured in node-traced replays (at least 20 gaps), else whatif_node_gap_ns (ns).
-- @column node_gap_measured True when node_gap_ns was measured in this profile.
-- @column pinned_gbps Bandwidth of pinned host-device copies of at least 1 MiB measured in this profile, else whatif_pinned_gbps (GB/s), the high end of what pinned copies reach in practice (PCIe 4.0 x16).
-- @column pinned_gbps_low The measured bandwidth, else whatif_pinned_gbps_low (GB/s): the low end (PCIe 3.0 x16 in practice), for the GPUs whose link the profile does not show.
-- @column pinned_measured True when pinned_gbps was measured in this profile.
-- @column stratum_steps Steps of the device in the step's phase, sampled or not (NULL phase: those without a phase).
-- @column device_steps Steps of the device, sampled or not.
-- @column phase_sampled True when the step is in its phase's sample (whatif_sample_steps per (device, phase); never for a step without a phase).
-- @column device_sampled True when the step is in its device's sample for the all-steps median (whatif_sample_steps per device).
-- The gap between kernels of one node-traced graph replay (kernels of one replay share its correlation id).
WITH node_gaps AS (
    SELECT greatest(start_ns - lag(end_ns) OVER (PARTITION BY pid, correlation_id, device_id ORDER BY start_ns), 0)
               AS gap_ns
    FROM _kernels_by_id WHERE graph_node_id IS NOT NULL
),
node_gap AS (
    SELECT CASE WHEN count(gap_ns) >= 20 THEN CAST(median(gap_ns) AS BIGINT)
                ELSE CAST(${whatif_node_gap_ns} AS BIGINT) END AS node_gap_ns,
           count(gap_ns) >= 20 AS node_gap_measured
    FROM node_gaps
),
host_device AS (
    SELECT pid, correlation_id, start_ns, dur_ns, bytes,
           'pageable' IN (src_mem, dst_mem) AS pageable, 'pinned' IN (src_mem, dst_mem) AS pinned
    FROM memcpys WHERE copy_kind IN ('HtoD', 'DtoH', 'HtoA', 'AtoH') AND dur_ns > 0
),
pinned AS (
    SELECT CASE WHEN sum(dur_ns) > 0 THEN sum(bytes) / sum(dur_ns) ELSE ${whatif_pinned_gbps} END AS pinned_gbps,
           CASE WHEN sum(dur_ns) > 0 THEN sum(bytes) / sum(dur_ns) ELSE ${whatif_pinned_gbps_low} END AS pinned_gbps_low,
           sum(dur_ns) > 0 AS pinned_measured
    FROM host_device WHERE pinned AND bytes >= 1048576
),
-- The steps as the STEPS block counts them (_steps): a step holds the work its thread issued from its start to
-- where its iteration of the loop ends (span_end_ns: the next step's start, or the start of a quiet stretch).
steps AS (
    SELECT step_id, global_tid, start_ns, end_ns, span_end_ns, source, phase AS label_phase,
           CASE WHEN ctx_reqs IS NOT NULL OR gen_reqs IS NOT NULL THEN coalesce(ctx_reqs, 0) + coalesce(gen_reqs, 0) END
               AS batch
    FROM _steps
),
-- Each step owns what its thread issued from the step's start until its span ends or the thread's next step begins
-- (of steps that begin together, the last one), so the owned stretches of a thread never overlap. An operation
-- meets the stretch its issuing call started in by an equi-join on time buckets, as in _call_phases: the bucket
-- width is the steps' span over their count (at least 1 us), so a stretch touches about two buckets, and the
-- millions of operations are not sorted as an as-of join would sort them.
owned AS (
    SELECT step_id, global_tid, start_ns, end_ns
    FROM (SELECT step_id, global_tid, start_ns,
                 least(span_end_ns, coalesce(lead(start_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, step_id),
                                             span_end_ns)) AS end_ns
          FROM _steps)
    WHERE end_ns > start_ns
),
step_width AS (
    SELECT min(start_ns) AS origin, greatest((max(end_ns) - min(start_ns)) // greatest(count(*), 1), 1000) AS b
    FROM owned
),
owned_buckets AS (
    SELECT o.step_id, o.global_tid, o.start_ns, o.end_ns,
           unnest(range((o.start_ns - w.origin) // w.b, (o.end_ns - 1 - w.origin) // w.b + 1)) AS bucket
    FROM owned o CROSS JOIN step_width w
),
-- MATERIALIZED (ops, placed): each is read more than once, and DuckDB would otherwise repeat the step lookup and
-- the joins for each reader. Attention kernels: the class attention (_kernel_classes, rules/vocabulary/operation_classes.yaml),
-- by the kernel name id _timeline carries.
ops AS MATERIALIZED (
    SELECT t.device_id, t.start_ns, t.end_ns, t.is_compute, t.is_graph, t.phase, t.global_tid, t.pid, t.correlation_id,
           greatest(t.end_ns - greatest(t.start_ns, coalesce(t.prev_end_ns, t.start_ns)), 0) AS busy_ns,
           greatest(t.start_ns - coalesce(t.prev_end_ns, t.start_ns), 0) AS gap_ns,
           s.step_id,
           coalesce(t.name_id IN (SELECT name_id FROM _kernel_classes WHERE op_class = 'attention'), false)
               AS is_attention
    -- The bucket is a column before the join: as an expression in the ON clause DuckDB joins on the thread alone.
    FROM (SELECT x.*, (x.api_start_ns - w.origin) // w.b AS bucket FROM _timeline x CROSS JOIN step_width w) t
    LEFT JOIN owned_buckets s ON s.global_tid = t.global_tid AND s.bucket = t.bucket
                             AND t.api_start_ns >= s.start_ns AND t.api_start_ns < s.end_ns
),
-- A device replays its steps when it has enough of them for a median (whatif_min_steps, as
-- engine/diagnosis/whatif.py MIN_STEPS); with fewer (one NVTX range around a short loop) its whole window is
-- replayed, so work outside those ranges (a load before them) is not left out of every projection.
devices AS (SELECT device_id, count(DISTINCT step_id) >= ${whatif_min_steps} AS has_steps FROM ops GROUP BY device_id),
-- Each step's phase (its label's, else that of most of its operations) and its first operation, to sample by.
step_phases AS (
    SELECT k.device_id, k.step_key, coalesce(s.label_phase, k.op_phase) AS phase, k.first_ns, k.measured_ns
    FROM (SELECT o.device_id, CASE WHEN d.has_steps THEN o.step_id ELSE -1 - o.device_id END AS step_key,
                 mode(o.phase) AS op_phase, min(o.start_ns) AS first_ns, sum(o.busy_ns + o.gap_ns) AS measured_ns
          FROM ops o JOIN devices d USING (device_id)
          GROUP BY o.device_id, step_key) k
    LEFT JOIN steps s ON s.step_id = k.step_key
    WHERE k.step_key IS NOT NULL
),
-- The sample: the i-th step (from 0, in time order) of a stratum of n steps is kept when i * N mod n < N, which
-- keeps exactly N steps evenly spread over the stratum; a stratum of at most 2N steps keeps them all (a
-- sample of more than half of them would save little and cost the report its exactness), and so does one whose
-- steps are not tight around their median (see the doc above): measured on every step, before any replay.
strata AS (
    SELECT device_id, step_key, phase,
           row_number() OVER (PARTITION BY device_id, phase ORDER BY first_ns, step_key) - 1 AS phase_rank,
           count(*) OVER (PARTITION BY device_id, phase) AS stratum_steps,
           row_number() OVER (PARTITION BY device_id ORDER BY first_ns, step_key) - 1 AS device_rank,
           count(*) OVER (PARTITION BY device_id) AS device_steps
    FROM step_phases
),
spread AS (
    SELECT device_id, phase, grouping(phase) = 1 AS whole_device,
           quantile_disc(measured_ns, [0.5 - 0.98 / sqrt(${whatif_sample_steps}), 0.5,
                                       0.5 + 0.98 / sqrt(${whatif_sample_steps})]) AS q
    FROM step_phases GROUP BY GROUPING SETS ((device_id, phase), (device_id))
),
tight AS (
    SELECT device_id, phase, whole_device,
           q[3] - q[1] <= CAST(${whatif_sample_tolerance} AS DOUBLE) * q[2] AS tight
    FROM spread
),
sampled AS (
    SELECT s.device_id, s.step_key, s.phase, s.stratum_steps, s.device_steps,
           s.phase IS NOT NULL AND (s.stratum_steps <= 2 * CAST(${whatif_sample_steps} AS BIGINT) OR NOT p.tight
               OR s.phase_rank * CAST(${whatif_sample_steps} AS BIGINT) % s.stratum_steps
                  < CAST(${whatif_sample_steps} AS BIGINT)) AS phase_sampled,
           s.device_steps <= 2 * CAST(${whatif_sample_steps} AS BIGINT) OR NOT d.tight
               OR s.device_rank * CAST(${whatif_sample_steps} AS BIGINT) % s.device_steps
                  < CAST(${whatif_sample_steps} AS BIGINT) AS device_sampled
    FROM strata s
    JOIN tight d ON d.whole_device AND d.device_id = s.device_id
    LEFT JOIN tight p ON NOT p.whole_device AND p.device_id = s.device_id AND p.phase IS NOT DISTINCT FROM s.phase
),
-- Only the sampled steps' operations go on, before the joins and the windows of the replay.
placed AS MATERIALIZED (
    SELECT o.*,
           g.cause, c.bytes AS pageable_bytes, c.dur_ns AS copy_dur_ns,
           gr.run_kernels AS glue_run_kernels, gr.is_first AS glue_run_first, gr.fused_factor AS glue_fused_factor
    FROM (SELECT o.*, CASE WHEN d.has_steps THEN o.step_id ELSE -1 - o.device_id END AS step_key
          FROM ops o JOIN devices d USING (device_id)) o
    JOIN (SELECT device_id, step_key FROM sampled WHERE phase_sampled OR device_sampled) k
      ON k.device_id = o.device_id AND k.step_key = o.step_key
    -- (device_id, gap_end_ns) names a gap; an operation starting with another at the same nanosecond may meet its
    -- gap too, harmlessly: its own gap is 0. An equi-join only: a predicate on one side makes DuckDB loop.
    LEFT JOIN _idle_gaps g ON g.device_id = o.device_id AND g.gap_end_ns = o.start_ns
    LEFT JOIN (SELECT * FROM host_device WHERE pageable) c
           ON c.pid = o.pid AND c.correlation_id = o.correlation_id AND c.start_ns = o.start_ns AND NOT o.is_compute
    LEFT JOIN _glue_runs gr ON gr.pid = o.pid AND gr.correlation_id = o.correlation_id AND gr.start_ns = o.start_ns
                           AND gr.device_id = o.device_id
),
per_step AS (
    SELECT r.device_id, r.step_key AS step_id, count(*) AS op_count, sum(r.busy_ns) AS busy_ns,
           sum(r.gap_ns) AS gap_ns, min(r.start_ns) AS first_ns,
           max(r.end_ns) AS last_ns, arg_max(r.global_tid, r.busy_ns) AS main_tid,
           coalesce(sum(r.busy_ns) FILTER (WHERE r.is_attention), 0) AS attention_ns,
           coalesce(sum(r.busy_ns) FILTER (WHERE r.is_compute), 0) AS kernel_ns,
           coalesce(sum(r.busy_ns) FILTER (WHERE r.is_graph), 0) AS graph_ns,
           -- every launch and gpu-side gap at the node gap, then the step's first gap given back as measured (an
           -- aggregate, not a window: no sort of the operations)
           sum(CASE WHEN r.cause IN ('launch', 'gpu-side') THEN least(r.gap_ns, n.node_gap_ns) ELSE r.gap_ns END)
               + arg_min(CASE WHEN r.cause IN ('launch', 'gpu-side') THEN r.gap_ns - least(r.gap_ns, n.node_gap_ns)
                              ELSE 0 END, r.start_ns) AS launch_gaps_gap_ns,
           sum(CASE WHEN r.cause = 'host' THEN least(r.gap_ns, n.node_gap_ns) ELSE r.gap_ns END) AS host_gaps_gap_ns,
           sum(CASE WHEN r.cause = 'sync' THEN least(r.gap_ns, n.node_gap_ns) ELSE r.gap_ns END) AS sync_gap_ns,
           sum(CASE WHEN r.cause = 'allocation' THEN least(r.gap_ns, n.node_gap_ns) ELSE r.gap_ns END)
               AS allocation_gap_ns,
           -- a pageable copy's piece shrinks by the time its bytes take at the pinned bandwidth over its duration
           sum(CASE WHEN r.pageable_bytes IS NOT NULL
                    THEN r.busy_ns * least(r.pageable_bytes / p.pinned_gbps / r.copy_dur_ns, 1.0)
                    ELSE r.busy_ns END) AS pinned_busy_ns,
           sum(CASE WHEN r.pageable_bytes IS NOT NULL
                    THEN r.busy_ns * least(r.pageable_bytes / p.pinned_gbps_low / r.copy_dur_ns, 1.0)
                    ELSE r.busy_ns END) AS pinned_slow_busy_ns,
           any_value(n.node_gap_ns) AS node_gap_ns, any_value(n.node_gap_measured) AS node_gap_measured,
           any_value(p.pinned_gbps) AS pinned_gbps, any_value(p.pinned_gbps_low) AS pinned_gbps_low,
           any_value(p.pinned_measured) AS pinned_measured
    FROM placed r CROSS JOIN node_gap n
    CROSS JOIN (SELECT coalesce(pinned_gbps, ${whatif_pinned_gbps}) AS pinned_gbps,
                       coalesce(pinned_gbps_low, ${whatif_pinned_gbps_low}) AS pinned_gbps_low,
                       coalesce(pinned_measured, false) AS pinned_measured FROM pinned) p
    WHERE r.step_key IS NOT NULL
    GROUP BY r.device_id, r.step_key
),
-- The batch projection replays the step's chain with new durations (the attention kernels' busy pieces times the
-- factor; the other kernels' flat or grown; copies as measured). Operation k may start once it was issued and
-- the one before it ended: its ready time r_k is its measured start when an idle gap preceded it (the GPU waited
-- for the host to issue it), else none, and the step's first operation is ready at its measured start. With S_k
-- the sum of the new durations of operations 1..k, the max-plus recurrence end_k = max(r_k, end_(k-1)) + d_k
-- unrolls to end_k = S_k + max over j <= k of (r_j - S_(j-1)): the step ends at S_n + that maximum over all its
-- operations, one running sum and one aggregate. With the measured durations it gives the measured chain.
-- The fusion replay uses the same recurrence: a fusion candidate's kernels take 1/k of their time (a glue kernel's
-- time follows the bytes it moves, and the fused kernel moves the run's tensor once instead of k times; a cast keeps
-- its time, _glue_runs fused_factor), and only
-- the run's first kernel keeps its ready time (the fused kernel is one launch), unless a sync stood before it.
-- A GPU-side gap is no wait for the host (the operation was issued; the GPU took that long to start it): it stays
-- as a fixed delay in the operation's duration, except inside a fused run, whose launches are gone. The step's
-- first operation is ready at its measured start, so a delay added to it is taken back.
scaled AS (
    SELECT r.device_id, r.step_key, r.start_ns, r.gap_ns, f.factor,
           r.busy_ns * coalesce(r.glue_fused_factor, 1)
               + CASE WHEN r.cause = 'gpu-side' AND r.kept THEN r.gap_ns ELSE 0 END AS fused_ns,
           CASE WHEN r.cause = 'gpu-side' AND r.kept THEN r.gap_ns ELSE 0 END AS fused_gap_ns,
           r.cause IS DISTINCT FROM 'gpu-side' AND (r.kept OR r.cause = 'sync') AS fused_ready,
           r.busy_ns * CASE WHEN r.is_attention THEN f.factor ELSE 1 END AS low_ns,
           r.busy_ns * CASE WHEN r.is_attention THEN f.factor
                            WHEN r.is_compute THEN 1 + ${whatif_gemm_growth} * (f.factor - 1) ELSE 1 END AS high_ns
    FROM (SELECT *, glue_run_kernels IS NULL OR glue_run_first AS kept FROM placed) r
    JOIN (SELECT r.step_key, ${whatif_batch} / coalesce(nullif(any_value(s.batch), 0), 1) AS factor
          FROM placed r LEFT JOIN steps s ON s.step_id = r.step_key WHERE r.step_key IS NOT NULL GROUP BY r.step_key) f
      USING (step_key)
),
chained AS (
    SELECT device_id, step_key, start_ns, gap_ns, factor, low_ns, high_ns, fused_ns, fused_gap_ns,
           row_number() OVER w = 1 OR gap_ns > 0 AS ready,
           row_number() OVER w = 1 OR (gap_ns > 0 AND fused_ready) AS ready_fused,
           sum(low_ns) OVER w AS s_low, sum(high_ns) OVER w AS s_high, sum(fused_ns) OVER w AS s_fused
    FROM scaled
    WINDOW w AS (PARTITION BY device_id, step_key ORDER BY start_ns ROWS UNBOUNDED PRECEDING)
),
replayed AS (
    SELECT device_id, step_key AS step_id, any_value(factor) AS batch_factor,
           sum(low_ns) + max(start_ns - (s_low - low_ns)) FILTER (WHERE ready) - min(start_ns - gap_ns) AS batch_low_ns,
           sum(high_ns) + max(start_ns - (s_high - high_ns)) FILTER (WHERE ready) - min(start_ns - gap_ns)
               AS batch_high_ns,
           sum(fused_ns) + max(start_ns - (s_fused - fused_ns)) FILTER (WHERE ready_fused) - min(start_ns - gap_ns)
               - arg_min(fused_gap_ns, start_ns) AS fused_ns
    FROM chained GROUP BY device_id, step_key
),
-- Each step's span on its thread: from its start to where its iteration ends (_steps.span_end_ns; the host's
-- scheduling between steps belongs to the step after it, as the gap before its first operation does); the whole
-- window for a device without steps, on the thread that issued most of its work.
spans AS (
    SELECT p.device_id, p.step_id, coalesce(s.global_tid, p.main_tid) AS global_tid,
           coalesce(s.start_ns, p.first_ns) AS span_start_ns,
           coalesce(s.span_end_ns, p.last_ns) AS span_end_ns
    FROM per_step p LEFT JOIN steps s ON s.step_id = p.step_id
),
-- Time blocked in synchronising calls up to any instant, per thread: a running sum over the thread's calls (in
-- start order, taken not to overlap), read at a span's two ends by as-of lookups, as _server_idle does for the
-- OS waits: no join of every span with every call.
blocking AS (
    SELECT global_tid, start_ns, end_ns,
           sum(end_ns - start_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING)
               - (end_ns - start_ns) AS before_ns
    FROM _sync_calls WHERE kind IN ('sync', 'sync_copy') AND end_ns >= start_ns
),
blocked AS (
    SELECT sp.device_id, sp.step_id,
           coalesce(e.before_ns + greatest(least(sp.span_end_ns, e.end_ns) - e.start_ns, 0), 0)
               - coalesce(b.before_ns + greatest(least(sp.span_start_ns, b.end_ns) - b.start_ns, 0), 0) AS blocked_ns
    FROM spans sp
    ASOF LEFT JOIN blocking e ON e.global_tid = sp.global_tid AND sp.span_end_ns >= e.start_ns
    ASOF LEFT JOIN blocking b ON b.global_tid = sp.global_tid AND sp.span_start_ns >= b.start_ns
)
SELECT p.device_id, p.step_id, coalesce(s.source, 'window') AS source,
       k.phase, s.batch, p.op_count, p.busy_ns, p.gap_ns,
       p.busy_ns + p.gap_ns AS measured_ns, p.attention_ns, p.kernel_ns, p.graph_ns,
       greatest(sp.span_end_ns - sp.span_start_ns - coalesce(b.blocked_ns, 0), 0) AS host_work_ns,
       p.busy_ns + p.launch_gaps_gap_ns AS launch_gaps_ns,
       greatest(p.busy_ns + p.host_gaps_gap_ns,
                least(greatest(sp.span_end_ns - sp.span_start_ns - coalesce(b.blocked_ns, 0), 0),
                      p.busy_ns + p.gap_ns)) AS host_gaps_ns,
       p.busy_ns + p.sync_gap_ns AS sync_ns, p.busy_ns + p.allocation_gap_ns AS allocation_ns,
       CAST(round(p.pinned_busy_ns) AS BIGINT) + p.gap_ns AS copies_pinned_ns,
       CAST(round(p.pinned_slow_busy_ns) AS BIGINT) + p.gap_ns AS copies_pinned_slow_ns,
       CAST(round(least(x.fused_ns, p.busy_ns + p.gap_ns)) AS BIGINT) AS fused_ns,
       x.batch_factor, CAST(round(x.batch_low_ns) AS BIGINT) AS batch_low_ns,
       CAST(round(x.batch_high_ns) AS BIGINT) AS batch_high_ns,
       p.node_gap_ns, p.node_gap_measured, p.pinned_gbps, p.pinned_gbps_low, p.pinned_measured,
       k.stratum_steps, k.device_steps, k.phase_sampled, k.device_sampled
FROM per_step p
JOIN sampled k ON k.device_id = p.device_id AND k.step_key = p.step_id
JOIN replayed x ON x.device_id = p.device_id AND x.step_id = p.step_id
JOIN spans sp ON sp.device_id = p.device_id AND sp.step_id = p.step_id
LEFT JOIN blocked b ON b.device_id = p.device_id AND b.step_id = p.step_id
LEFT JOIN steps s ON s.step_id = p.step_id
