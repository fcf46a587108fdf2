-- @fact steps
-- @doc Step statistics per inference phase: one row per phase of the steps (_steps), and one row 'all' for every
-- @doc step when some step has a phase (a run without phases has only the 'all' row). A step's time is its period,
-- @doc from its start to the next step's, less any quiet stretch of a waiting server inside it (_steps;
-- @doc docs/measures.md "Steps and phases"), so the steps cover the active work the verdict judges: the time per output token of the requests it
-- @doc serves is at least the decode step's period, and the prefill steps are part of the time to first token.
-- @report
-- @needs _steps
-- @column phase prefill, decode (or a configured phase), 'other' for steps with no phase when others have one, 'all' for every step.
-- @column step_count Steps.
-- @column median_step_ns Median step period (ns).
-- @column p90_step_ns 90th percentile of the step period (ns).
-- @column median_dur_ns Median step duration, start to end of the step's range (ns).
-- @column median_busy_share Median over the steps of kernel time / step period (0-1).
-- @column busy_share Time-weighted GPU-busy share of the steps: their kernel time over their summed periods, at most 1 (0-1). The reports show this one: a median of per-step shares reads 0 % when most steps are short and idle, however busy the long ones keep the GPU.
-- @column median_kernels Median kernels and graph replays per step.
-- @column tpot_proxy_ns Lower bound on the time per output token: the median decode step period (ns), on the 'decode' and 'all' rows; NULL elsewhere and when no step is known to be decode (a step without a phase may be a prefill).
-- @column prefill_step_ns Median prefill step period (ns), a component of the time to first token; on the 'prefill' and 'all' rows.
-- @column mean_batch Mean requests per step (TensorRT-LLM ctx + gen requests) over the steps whose text says; NULL when none does.
-- @column source How the steps were found: nvtx, sync or graph-launch (the most common among them).
-- @column phase_source label, inferred, or NULL (no phase; always NULL on 'all').
-- @check phase not_null
-- @check phase unique
-- @check step_count non_negative
-- @check median_busy_share range 0 1
-- @check busy_share range 0 1
-- @check source accepted_values nvtx sync graph-launch
-- @check phase_source accepted_values label inferred
WITH tagged AS (
    SELECT *, coalesce(phase, 'other') AS scope FROM _steps
),
any_phase AS (SELECT count(phase) > 0 AS yes FROM _steps),
scoped AS (
    SELECT scope, step_count, median_step_ns, p90_step_ns, median_dur_ns, median_busy_share, busy_share,
           median_kernels, mean_batch, source, phase_source
    FROM (SELECT scope, count(*) AS step_count, quantile_cont(period_ns, 0.5) AS median_step_ns,
                 quantile_cont(period_ns, 0.9) AS p90_step_ns, quantile_cont(dur_ns, 0.5) AS median_dur_ns,
                 quantile_cont(busy_share, 0.5) AS median_busy_share,
                 least(sum(kernel_ns) / nullif(sum(period_ns), 0), 1.0) AS busy_share,
                 quantile_cont(kernel_count, 0.5) AS median_kernels,
                 avg(coalesce(ctx_reqs, 0) + coalesce(gen_reqs, 0))
                     FILTER (WHERE ctx_reqs IS NOT NULL OR gen_reqs IS NOT NULL) AS mean_batch,
                 mode(source) AS source, mode(phase_source) AS phase_source
          FROM tagged GROUP BY scope)
    WHERE (SELECT yes FROM any_phase)
    UNION ALL
    SELECT 'all', count(*), quantile_cont(period_ns, 0.5), quantile_cont(period_ns, 0.9), quantile_cont(dur_ns, 0.5),
           quantile_cont(busy_share, 0.5), least(sum(kernel_ns) / nullif(sum(period_ns), 0), 1.0),
           quantile_cont(kernel_count, 0.5),
           avg(coalesce(ctx_reqs, 0) + coalesce(gen_reqs, 0)) FILTER (WHERE ctx_reqs IS NOT NULL OR gen_reqs IS NOT NULL),
           mode(source), NULL
    FROM _steps
    HAVING count(*) > 0
),
decode AS (SELECT median_step_ns FROM scoped WHERE scope = 'decode'),
prefill AS (SELECT median_step_ns FROM scoped WHERE scope = 'prefill')
SELECT scope AS phase, step_count, median_step_ns, p90_step_ns, median_dur_ns, median_busy_share, busy_share,
       median_kernels,
       CASE WHEN scope IN ('decode', 'all') THEN (SELECT median_step_ns FROM decode) END AS tpot_proxy_ns,
       CASE WHEN scope IN ('prefill', 'all') THEN (SELECT median_step_ns FROM prefill) END AS prefill_step_ns,
       mean_batch, source, phase_source
FROM scoped
ORDER BY CASE scope WHEN 'prefill' THEN 0 WHEN 'decode' THEN 1 WHEN 'other' THEN 8 WHEN 'all' THEN 9 ELSE 5 END, scope
