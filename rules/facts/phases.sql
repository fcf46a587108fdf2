-- @fact phases
-- @doc The core metrics per inference phase. A kernel belongs to a phase when the CPU call that launched
-- @doc it ran inside an NVTX range of that phase on the same thread (how nsys projects NVTX onto the
-- @doc GPU); the innermost phase range wins. Phase names come from patterns on the range text (defaults
-- @doc recognise vLLM and SGLang names, configurable); kernels outside any phase range are 'other'.
-- @report
-- @needs _phase_kernels _phase_ranges _steps
-- @requires kernels
-- @param phase_texts 3 range 1 inf
-- @param phase_min_steps 5 range 1 inf
-- @column phase prefill, decode or other (or a configured phase name).
-- @column range_count NVTX ranges of this phase.
-- @column range_ns Summed duration of those ranges (ns).
-- @column text_count Distinct texts among those ranges, each run of digits written # (so `step 1`, `step 2` are one).
-- @column matched_texts The texts that matched most often, up to phase_texts of them, most first, digits written #: a list of {text, range_count}; empty for 'other'. Shows what a pattern caught.
-- @column step_count Steps of the phase (_steps: one per iteration of the loop, however the ranges nest: an inner `decode_step` inside `decode` is one step, and so is each `execute_model` inside a 'decode' range); 0 for 'other'.
-- @column judged_alone The phase has at least phase_min_steps steps, enough to judge on its own: its findings take their severity and their rank for the verdict from their share of the phase's GPU time, not of the run's.
-- @column kernel_count Kernels attributed to the phase.
-- @column kernel_time_ns Sum of their durations (ns).
-- @column mean_kernel_ns Mean kernel duration (ns).
-- @column gap_count Idle gaps on the device that end in a kernel of the phase (a gap belongs to the phase of the kernel that ends it).
-- @column mean_gap_ns Mean of those gaps (ns).
-- @column median_gap_ns Median of those gaps (ns).
-- @column overhead_ratio gap time / (kernel time + gap time) within the phase.
-- @column busy_fraction kernel_time_ns / range_ns: how busy the GPU was during the phase's ranges (0-1).
-- @column kernel_time_share kernel_time_ns / all kernel time (0-1).
-- @column inferred True when the phase was inferred from the steps' shape (_steps), not named by NVTX text.
-- @column inference_evidence For an inferred phase, what set its steps apart: their median period against the median step's, and their mean kernel against the other steps' (e.g. `17.2x the median step, mean kernel 236 µs vs 5.1 µs`); NULL otherwise.
-- @check phase not_null
-- @check phase unique
-- @check range_count non_negative
-- @check step_count non_negative
-- @check judged_alone not_null
-- @check kernel_count non_negative
-- @check kernel_time_ns non_negative
-- @check overhead_ratio range 0 1
-- @check busy_fraction range 0 1
-- @check kernel_time_share range 0 1
WITH gaps AS (SELECT phase, gap_ns, end_ns - start_ns AS dur_ns FROM _phase_kernels),
kstats AS (
    SELECT phase, count(*) AS kernel_count, sum(dur_ns) AS kernel_time_ns, avg(dur_ns) AS mean_kernel_ns,
           count(gap_ns) FILTER (WHERE gap_ns > 0) AS gap_count,
           -- a kernel with no gap before it is not a gap of 0 (greatest() skips a NULL)
           avg(greatest(gap_ns, 0)) FILTER (WHERE gap_ns IS NOT NULL) AS mean_gap_ns,
           quantile_cont(greatest(gap_ns, 0), 0.5) FILTER (WHERE gap_ns IS NOT NULL) AS median_gap_ns,
           coalesce(sum(greatest(gap_ns, 0)), 0) AS gap_ns
    FROM gaps GROUP BY phase
),
rstats AS (SELECT phase, count(*) AS range_count, sum(end_ns - start_ns) AS range_ns FROM _phase_ranges GROUP BY phase),
-- The steps of each phase (_steps): a phase range around step ranges (a 'decode' range around `execute_model`)
-- and an inner step range in a phase range (`decode_step` in `decode`) count one step each.
sstats AS (SELECT phase, count(*) AS step_count FROM _steps WHERE phase IS NOT NULL GROUP BY phase),
-- Step-numbered labels (`_forward_step 12: 2 ctx reqs`) differ only in their numbers: counted as one text.
-- Counted per text first: the digits are replaced once per distinct text, not once per range.
texts AS (
    SELECT phase, regexp_replace(text, '[0-9]+', '#', 'g') AS text, sum(n) AS n
    FROM (SELECT phase, text, count(*) AS n FROM _phase_ranges GROUP BY ALL) GROUP BY ALL
),
-- The evidence of an inferred phase, durations written as the reports do (ms from 1 ms, whole µs from 10 µs).
shape AS (
    SELECT phase, quantile_cont(period_ns, 0.5) AS median_period_ns, sum(kernel_ns) AS kernel_ns,
           sum(kernel_count) AS kernel_count
    FROM _steps WHERE phase_source = 'inferred' GROUP BY phase
),
evidence AS (
    SELECT phase, printf('%.1fx the median step, mean kernel %s vs %s', ratio,
                         CASE WHEN mine >= 1e6 THEN printf('%.1f ms', mine / 1e6)
                              WHEN mine >= 1e4 THEN printf('%.0f µs', mine / 1e3)
                              ELSE printf('%.1f µs', mine / 1e3) END,
                         CASE WHEN theirs >= 1e6 THEN printf('%.1f ms', theirs / 1e6)
                              WHEN theirs >= 1e4 THEN printf('%.0f µs', theirs / 1e3)
                              ELSE printf('%.1f µs', theirs / 1e3) END) AS text
    FROM (SELECT s.phase, s.median_period_ns / nullif((SELECT quantile_cont(period_ns, 0.5) FROM _steps), 0) AS ratio,
                 s.kernel_ns / nullif(s.kernel_count, 0) AS mine,
                 (t.kernel_ns - s.kernel_ns) / nullif(t.kernel_count - s.kernel_count, 0) AS theirs
          FROM shape s, (SELECT sum(kernel_ns) AS kernel_ns, sum(kernel_count) AS kernel_count FROM shape) t)
),
inferred AS (SELECT DISTINCT phase FROM _phase_ranges WHERE inferred),
tstats AS (
    SELECT phase, count(*) AS text_count,
           list({'text': text, 'range_count': n} ORDER BY n DESC, text)[1:${phase_texts}] AS matched_texts
    FROM texts GROUP BY phase
)
SELECT coalesce(k.phase, r.phase) AS phase, coalesce(r.range_count, 0) AS range_count,
       coalesce(r.range_ns, 0) AS range_ns, coalesce(t.text_count, 0) AS text_count,
       coalesce(t.matched_texts, []) AS matched_texts, coalesce(s.step_count, 0) AS step_count,
       coalesce(s.step_count, 0) >= ${phase_min_steps} AS judged_alone, coalesce(k.kernel_count, 0) AS kernel_count,
       coalesce(k.kernel_time_ns, 0) AS kernel_time_ns, k.mean_kernel_ns, coalesce(k.gap_count, 0) AS gap_count,
       k.mean_gap_ns, k.median_gap_ns,
       CASE WHEN k.kernel_time_ns + k.gap_ns > 0 THEN k.gap_ns / (k.kernel_time_ns + k.gap_ns) END AS overhead_ratio,
       CASE WHEN r.range_ns > 0 THEN least(k.kernel_time_ns / r.range_ns, 1.0) END AS busy_fraction,
       coalesce(k.kernel_time_ns, 0) / nullif((SELECT sum(kernel_time_ns) FROM kstats), 0) AS kernel_time_share,
       coalesce(k.phase, r.phase) IN (SELECT phase FROM inferred) AS inferred, e.text AS inference_evidence
FROM kstats k FULL OUTER JOIN rstats r ON r.phase = k.phase LEFT JOIN tstats t ON t.phase = r.phase
     LEFT JOIN sstats s ON s.phase = r.phase LEFT JOIN evidence e ON e.phase = coalesce(k.phase, r.phase)
ORDER BY CASE coalesce(k.phase, r.phase) WHEN 'prefill' THEN 0 WHEN 'decode' THEN 1 WHEN 'other' THEN 9 ELSE 5 END,
         coalesce(k.phase, r.phase)
