-- @fact _step_ranges
-- @materialize
-- @doc The steps of the run: one row per iteration of the serving engine's loop. A step is an NVTX range whose
-- @doc text matches a step pattern (step_of(), engine/facts/compute.py: vLLM V1 `gpu_model_runner: forward`,
-- @doc `execute_model`, TensorRT-LLM `_forward_step N: ...`, ranges named step or iteration; `steps:` in
-- @doc diagnose.yaml replaces them) or a phase pattern (a 'decode' range per decode step); of such ranges nested
-- @doc on one thread only the innermost counts, so a 'decode' range around an `execute_model` range is one step
-- @doc (ranges that overlap without nesting count each; a range of no length is no step).
-- @doc Without any such range the steps are found from the calls of the thread that issues the most GPU work:
-- @doc the span from the return of one synchronisation to the return of the next (a serving loop waits for each
-- @doc step's sampled tokens), when that thread synchronised at least step_min_repeats times; otherwise the span
-- @doc from one cudaGraphLaunch to the next on the thread that launches the most graphs, when it launched at
-- @doc least step_min_repeats. Nested calls count once (a driver call inside a runtime call).
-- @doc Spans found from calls are steps only when they are a loop: at least step_min_repeats of them lie within
-- @doc step_max_spread times the median span (the repeating ones), and at least step_min_coverage of the GPU
-- @doc time (kernels, graph replays and copies, by duration) starts inside a repeating span. A program without a loop (a few syncs while a model loads, then one long computation;
-- @doc graph launches queued in a burst ahead of long replays) has no steps: the what-ifs replay the whole window.
-- @doc The spans that begin after the last GPU operation started are no steps: they hold no GPU work, only the
-- @doc program's shutdown (frees, module unloads, a final synchronisation).
-- @needs _api_classes
-- @param step_min_repeats 5 range 2 inf
-- @param step_max_spread 4 range 1 inf
-- @param step_min_coverage 0.5 range 0 1
-- @column step_id Step number, unique, in start order.
-- @column pid Process.
-- @column global_tid Thread that opened the range or made the calls.
-- @column start_ns Start of the step (ns).
-- @column end_ns End of the step (ns).
-- @column text The NVTX range's text; NULL for steps found from calls.
-- @column source nvtx, sync or graph-launch: how the step was found.
-- @column label_phase The phase the text names (phase_of(), including TensorRT-LLM's `N ctx reqs`), else NULL.
-- @column ctx_reqs Context (prefill) requests in the step, when the text carries TensorRT-LLM's `N ctx reqs` or vLLM's `execute_context_N(...)`.
-- @column gen_reqs Generation (decode) requests in the step, when the text carries TensorRT-LLM's `N gen reqs` or vLLM's `_generation_N(...)`.
WITH classified AS MATERIALIZED (
    SELECT text, phase_of(text) AS label_phase
    FROM (SELECT DISTINCT text FROM nvtx_ranges WHERE text IS NOT NULL)
    WHERE step_of(text) IS NOT NULL OR phase_of(text) IS NOT NULL
),
candidates AS (
    SELECT r.pid, r.global_tid, r.start_ns, r.end_ns, r.text, c.label_phase
    FROM nvtx_ranges r JOIN classified c ON c.text = r.text
    WHERE r.end_ns > r.start_ns
),
-- A candidate holding another one on its thread is no step itself: the next candidate by start (the longer
-- first on a tie) lies inside it. Ranges that merely overlap (start/end ranges need not nest) are steps each.
nvtx_steps AS (
    SELECT pid, global_tid, start_ns, end_ns, text, 'nvtx' AS source, label_phase
    FROM (SELECT *, lead(start_ns) OVER w AS next_start, lead(end_ns) OVER w AS next_end
          FROM candidates WINDOW w AS (PARTITION BY global_tid ORDER BY start_ns, end_ns DESC))
    WHERE next_start IS NULL OR next_start >= end_ns OR next_end > end_ns
),
launchers AS (
    SELECT a.global_tid, count(*) AS n
    FROM _api_calls_by_id a JOIN _api_classes c ON c.name_id = a.name_id
    WHERE c.api_class = 'launch' AND a.correlation_id IS NOT NULL AND a.correlation_id <> 0
    GROUP BY ALL
),
main_thread AS (SELECT arg_max(global_tid, n) AS global_tid FROM launchers),
-- Boundaries on the main thread, nested calls dropped: a call that starts before an earlier one returned.
syncs AS (
    SELECT pid, global_tid, end_ns AS at_ns
    FROM (SELECT a.pid, a.global_tid, a.start_ns, a.end_ns,
                 max(a.end_ns) OVER (ORDER BY a.start_ns, a.end_ns DESC
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered_until
          FROM _api_calls_by_id a JOIN _api_classes c ON c.name_id = a.name_id
          WHERE c.api_class = 'sync' AND a.global_tid = (SELECT global_tid FROM main_thread)
            AND NOT EXISTS (SELECT 1 FROM nvtx_steps))
    WHERE covered_until IS NULL OR start_ns >= covered_until
),
graph_launchers AS (
    SELECT a.global_tid, count(*) AS n
    FROM _api_calls_by_id a JOIN _api_classes c ON c.name_id = a.name_id
    WHERE c.api_family = 'graph_launch'
    GROUP BY ALL
),
graphs AS (
    SELECT a.pid, a.global_tid, a.start_ns AS at_ns
    FROM _api_calls_by_id a JOIN _api_classes c ON c.name_id = a.name_id
    WHERE c.api_family = 'graph_launch'
      AND a.global_tid = (SELECT arg_max(global_tid, n) FROM graph_launchers)
      AND NOT EXISTS (SELECT 1 FROM nvtx_steps)
      AND (SELECT count(*) FROM syncs) < ${step_min_repeats}
),
boundaries AS (
    SELECT pid, global_tid, at_ns, 'sync' AS source FROM syncs WHERE (SELECT count(*) FROM syncs) >= ${step_min_repeats}
    UNION ALL
    SELECT pid, global_tid, at_ns, 'graph-launch' FROM graphs WHERE (SELECT count(*) FROM graphs) >= ${step_min_repeats}
),
call_spans AS (
    SELECT pid, global_tid, start_ns, end_ns, NULL::VARCHAR AS text, source, NULL::VARCHAR AS label_phase
    FROM (SELECT pid, global_tid, source, at_ns AS start_ns,
                 lead(at_ns) OVER (ORDER BY at_ns) AS end_ns
          FROM boundaries)
    WHERE end_ns > start_ns
),
span_shape AS (SELECT count(*) AS n, quantile_cont(end_ns - start_ns, 0.5) AS median_ns FROM call_spans),
repeating AS (
    SELECT c.start_ns, c.end_ns
    FROM call_spans c, span_shape h
    WHERE c.end_ns - c.start_ns BETWEEN h.median_ns / ${step_max_spread} AND h.median_ns * ${step_max_spread}
),
gpu_ops AS (
    SELECT start_ns, end_ns - start_ns AS dur_ns FROM _kernels_by_id WHERE EXISTS (SELECT 1 FROM call_spans)
    UNION ALL SELECT start_ns, end_ns - start_ns FROM graph_launches WHERE EXISTS (SELECT 1 FROM call_spans)
    UNION ALL SELECT start_ns, end_ns - start_ns FROM memcpys WHERE EXISTS (SELECT 1 FROM call_spans)
),
-- Spans never overlap (they run from one boundary to the next), so the latest repeating span that started before
-- an operation is the only one that can hold its start.
covered AS (
    SELECT coalesce(sum(o.dur_ns) FILTER (WHERE o.start_ns < r.end_ns), 0) AS inside_ns
    FROM gpu_ops o ASOF JOIN repeating r ON o.start_ns >= r.start_ns
),
-- The spans that begin after the last GPU operation started hold no GPU work (an operation starts after the call
-- that issued it): the program's shutdown (frees, unloads, a final synchronisation), no iteration of the loop.
call_steps AS (
    SELECT c.* FROM call_spans c
    WHERE (SELECT count(*) FROM repeating) >= ${step_min_repeats}
      AND (SELECT inside_ns FROM covered) >= ${step_min_coverage} * (SELECT coalesce(sum(dur_ns), 0) FROM gpu_ops)
      AND c.start_ns <= (SELECT max(start_ns) FROM gpu_ops)
),
steps AS (SELECT * FROM nvtx_steps UNION ALL SELECT * FROM call_steps)
SELECT row_number() OVER (ORDER BY start_ns, global_tid, end_ns) AS step_id, pid, global_tid, start_ns, end_ns, text,
       source, label_phase,
       CAST(coalesce(nullif(regexp_extract(text, '(^|[^0-9])([0-9]+) ctx req', 2), ''),
                     nullif(regexp_extract(text, '^\s*execute_([0-9]+_)?context_([0-9]+)\(', 2), '')) AS INTEGER)
           AS ctx_reqs,
       CAST(coalesce(nullif(regexp_extract(text, '(^|[^0-9])([0-9]+) gen req', 2), ''),
                     nullif(regexp_extract(text, '\)_generation_([0-9]+)\(', 1), '')) AS INTEGER) AS gen_reqs
FROM steps
