-- @fact _steps
-- @materialize
-- @doc One row per step of the serving loop (_step_ranges) with its phase, its timing and its GPU work.
-- @doc Phase: the phase its text names, else that of the innermost NVTX phase range (_nvtx_phases) open on its
-- @doc thread when it started and still open when it ended, else one inferred from the steps' shape: when no step
-- @doc has a phase from NVTX and there are at least step_infer_min_steps steps, a step is prefill when its
-- @doc period and its kernels' mean duration are both at least prefill_min_ratio times the median step's, and
-- @doc GEMM and attention kernels hold at least prefill_min_heavy_share of its kernel time (long GEMMs over many
-- @doc tokens, as a step with a prefill chunk runs in vLLM V1: docs/contributing/profiling.md of vLLM); every other
-- @doc step is decode. When no step qualifies the steps are alike and nothing is inferred. The period, not the
-- @doc range's duration: an eager forward range closes once its launches are queued, long before a prefill's
-- @doc kernels finish, and the step's later ranges (sampling) wait for them.
-- @doc A quiet stretch of a waiting server (_server_idle) is no part of any step: a step found from calls spans
-- @doc the time between two calls, so one may hold a stretch whole (a benchmark that synchronised, slept ten
-- @doc minutes, then went on), and its duration and period leave that time out, as every judged window does.
-- @doc A step's kernels (and CUDA-graph replays) are those launched from its thread while it was open, matched to
-- @doc their launching call on process and correlation id (_issuing_calls).
-- @needs _step_ranges _nvtx_phases _issuing_calls _server_idle _kernel_classes
-- @param step_infer_min_steps 8 range 3 inf
-- @param prefill_min_ratio 2 range 1 inf
-- @param prefill_min_heavy_share 0.5 range 0 1
-- @column step_id Step number, unique, in start order (as _step_ranges).
-- @column pid Process.
-- @column global_tid Thread that opened the step or made its calls.
-- @column start_ns Start of the step (ns).
-- @column end_ns End of the step (ns).
-- @column text The NVTX text of the step; NULL for steps found from calls.
-- @column source nvtx, sync or graph-launch: how the step was found.
-- @column phase prefill, decode (or a configured phase), NULL when neither NVTX nor the shape says.
-- @column phase_source label (the step's text or an enclosing NVTX phase range), inferred, or NULL.
-- @column dur_ns Duration of the step, from its start to its end less the quiet stretches inside (ns).
-- @column period_ns From the step's start to the next step's start on its thread, less the quiet stretches inside (ns): what one more output token costs the requests in the step. The duration when a quiet stretch of a waiting server (_server_idle) lies between, and for the thread's last step.
-- @column quiet_ns Time of quiet stretches (_server_idle) inside the step's range, left out of dur_ns and period_ns (ns); 0 for a step marked in NVTX, which is activity itself.
-- @column span_end_ns Where the step's iteration of the loop ends on its thread (ns): the next step's start; before a quiet stretch, the stretch's start; for the thread's last step, its last CUDA call's end (never before end_ns).
-- @column kernel_count Kernels and graph replays the step launched while it was open.
-- @column kernel_ns Their summed duration (ns).
-- @column mean_kernel_ns kernel_ns / kernel_count (ns); NULL without kernels.
-- @column heavy_ns Time of those kernels that are GEMMs or attention (ns).
-- @column busy_share kernel_ns / period_ns, at most 1: how busy the GPU kept per step.
-- @column ctx_reqs Context (prefill) requests in the step (TensorRT-LLM step text), else NULL.
-- @column gen_reqs Generation (decode) requests in the step (TensorRT-LLM step text), else NULL.
-- GEMM and attention kernels: their operation classes (_kernel_classes, rules/vocabulary/operation_classes.yaml).
WITH heavy_names AS (SELECT name_id FROM _kernel_classes WHERE op_class IN ('gemm', 'attention')),
step_threads AS (SELECT DISTINCT global_tid FROM _step_ranges),
ops AS (
    SELECT pid, correlation_id, end_ns - start_ns AS dur_ns,
           coalesce(name_id IN (SELECT name_id FROM heavy_names), false) AS heavy
    FROM _kernels_by_id WHERE end_ns >= start_ns AND device_id IS NOT NULL
    UNION ALL
    SELECT pid, correlation_id, end_ns - start_ns, false
    FROM graph_launches WHERE end_ns >= start_ns AND device_id IS NOT NULL
),
launched AS (
    SELECT c.global_tid, c.api_start_ns, o.dur_ns, o.heavy
    FROM ops o JOIN _issuing_calls c ON c.pid = o.pid AND c.correlation_id = o.correlation_id
    WHERE c.global_tid IN (SELECT global_tid FROM step_threads)
),
-- A launch belongs to the latest step of its thread that started at or before it, while that step is open: each
-- step owns its thread's launches from its start until it ends or the thread's next step begins (of steps that
-- begin together, the last one), stretches that never overlap. A launch meets its stretch by an equi-join on time
-- buckets, as in _call_phases (the width is the steps' span over their count, at least 1 us, so a stretch touches
-- about two buckets): the millions of launches are not sorted as an as-of join would sort them.
owned AS (
    SELECT step_id, global_tid, start_ns, end_ns
    FROM (SELECT step_id, global_tid, start_ns,
                 least(end_ns, coalesce(lead(start_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, step_id),
                                        end_ns)) AS end_ns
          FROM _step_ranges)
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
step_work AS (
    SELECT s.step_id, count(*) AS kernel_count, sum(k.dur_ns) AS kernel_ns,
           coalesce(sum(k.dur_ns) FILTER (WHERE k.heavy), 0) AS heavy_ns
    -- The bucket is a column before the join: as an expression in the ON clause DuckDB joins on the thread alone.
    FROM (SELECT x.*, (x.api_start_ns - w.origin) // w.b AS bucket FROM launched x CROSS JOIN step_width w) k
    JOIN owned_buckets s ON s.global_tid = k.global_tid AND s.bucket = k.bucket
    WHERE k.api_start_ns >= s.start_ns AND k.api_start_ns < s.end_ns
    GROUP BY s.step_id
),
timed AS (
    SELECT *, lead(start_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns) AS next_start_ns
    FROM _step_ranges
),
-- The first quiet stretch that begins after the step started: when it begins before the next step starts, the
-- server waited between the two steps, and the wait is no part of the step's period. (The stretch may end a few
-- µs after the next step's range opened: it ends at the next CUDA call.)
waited AS (
    SELECT t.step_id, i.start_ns < t.next_start_ns AS quiet_between, i.start_ns AS quiet_start_ns
    FROM timed t ASOF LEFT JOIN _server_idle i ON t.start_ns <= i.start_ns
),
-- Quiet time up to a moment t, from the last stretch that began at or before t: done_ns - greatest(end_ns - t, 0),
-- with done_ns the running sum of the stretches' lengths (they never overlap). A step leaves out the quiet time up
-- to its end less that up to its start: two as-of joins, no join of every step with every stretch.
quiet AS (
    SELECT start_ns, end_ns, sum(end_ns - start_ns) OVER (ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS done_ns
    FROM _server_idle WHERE end_ns > start_ns
),
quiet_at_start AS (
    SELECT t.step_id, coalesce(q.done_ns - greatest(q.end_ns - t.start_ns, 0), 0) AS ns
    FROM timed t ASOF LEFT JOIN quiet q ON q.start_ns <= t.start_ns
),
quiet_at_end AS (
    SELECT t.step_id, coalesce(q.done_ns - greatest(q.end_ns - t.end_ns, 0), 0) AS ns
    FROM timed t ASOF LEFT JOIN quiet q ON q.start_ns <= t.end_ns
),
inside AS (
    SELECT s.step_id, e.ns - s.ns AS quiet_ns FROM quiet_at_start s JOIN quiet_at_end e ON e.step_id = s.step_id
),
thread_end AS (
    SELECT global_tid, max(end_ns) AS end_ns FROM _api_calls_by_id
    WHERE global_tid IN (SELECT global_tid FROM step_threads) GROUP BY global_tid
),
enclosed AS (
    SELECT t.step_id, CASE WHEN r.end_ns >= t.end_ns THEN r.phase END AS phase
    FROM timed t ASOF LEFT JOIN _nvtx_phases r ON r.global_tid = t.global_tid AND t.start_ns >= r.start_ns
),
measured AS (
    SELECT t.step_id, t.pid, t.global_tid, t.start_ns, t.end_ns, t.text, t.source,
           coalesce(t.label_phase, e.phase) AS label_phase, t.end_ns - t.start_ns - q.quiet_ns AS dur_ns,
           -- a stretch inside the range lies inside the period too: the next step starts at or after its end
           CASE WHEN t.next_start_ns IS NULL OR coalesce(w.quiet_between, false) THEN t.end_ns - t.start_ns
                ELSE t.next_start_ns - t.start_ns END - q.quiet_ns AS period_ns,
           q.quiet_ns,
           CASE WHEN t.next_start_ns IS NULL THEN greatest(t.end_ns, x.end_ns)
                WHEN coalesce(w.quiet_between, false) THEN greatest(t.end_ns, w.quiet_start_ns)
                ELSE t.next_start_ns END AS span_end_ns,
           coalesce(k.kernel_count, 0) AS kernel_count, coalesce(k.kernel_ns, 0) AS kernel_ns,
           k.kernel_ns / nullif(k.kernel_count, 0) AS mean_kernel_ns, coalesce(k.heavy_ns, 0) AS heavy_ns,
           t.ctx_reqs, t.gen_reqs
    FROM timed t LEFT JOIN step_work k ON k.step_id = t.step_id LEFT JOIN waited w ON w.step_id = t.step_id
         LEFT JOIN enclosed e ON e.step_id = t.step_id LEFT JOIN thread_end x ON x.global_tid = t.global_tid
         JOIN inside q ON q.step_id = t.step_id
),
typical AS (
    SELECT count(*) AS steps, count(label_phase) AS labelled, quantile_cont(period_ns, 0.5) AS median_period_ns,
           quantile_cont(mean_kernel_ns, 0.5) AS median_kernel_ns
    FROM measured
),
shaped AS (
    SELECT m.*,
           t.labelled = 0 AND t.steps >= ${step_infer_min_steps}
           AND m.period_ns >= ${prefill_min_ratio} * t.median_period_ns
           AND m.mean_kernel_ns >= ${prefill_min_ratio} * t.median_kernel_ns
           AND m.heavy_ns >= ${prefill_min_heavy_share} * m.kernel_ns AND m.kernel_ns > 0 AS looks_prefill
    FROM measured m, typical t
),
split AS (SELECT bool_or(looks_prefill) AS inferred FROM shaped)
SELECT s.step_id, s.pid, s.global_tid, s.start_ns, s.end_ns, s.text, s.source,
       CASE WHEN s.label_phase IS NOT NULL THEN s.label_phase
            WHEN p.inferred THEN CASE WHEN s.looks_prefill THEN 'prefill' ELSE 'decode' END END AS phase,
       CASE WHEN s.label_phase IS NOT NULL THEN 'label' WHEN p.inferred THEN 'inferred' END AS phase_source,
       s.dur_ns, s.period_ns, s.quiet_ns, s.span_end_ns, s.kernel_count, s.kernel_ns, s.mean_kernel_ns, s.heavy_ns,
       least(s.kernel_ns / nullif(s.period_ns, 0), 1.0) AS busy_share, s.ctx_reqs, s.gen_reqs
FROM shaped s, split p
ORDER BY s.step_id
