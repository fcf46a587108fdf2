-- @fact fusion_candidates
-- @doc One row per GPU that ran kernels: its unfused glue, the elementwise, normalisation, activation and
-- @doc reduction kernels (operation classes, rules/vocabulary/operation_classes.yaml) that a fused kernel or a compiler
-- @doc would merge, and the fusion candidates: the runs of consecutive glue kernels on one stream (between two
-- @doc kernels of other classes) that repeat most, as HTA's frequent kernel sequences find them (_glue_runs; in
-- @doc an LLM, such a run repeats in every layer of every step). A kernel is labelled by its ATen functor or op
-- @doc (MulFunctor, rsqrt_kernel_cuda, MeanOps) when its name carries one, else by its base name.
-- @doc The saving model (_glue_runs): glue kernels are memory-bound, so their time follows the bytes they move; a
-- @doc run of k kernels that each read and write the same tensor moves it k times, a fused kernel once, so fusing
-- @doc saves (1 - 1/k) of the run's time; casts (dtype conversions, each of a different tensor) keep their time.
-- @doc Random-number kernels, copies and memsets are no glue and end a run. Kernels outside repeated runs are not
-- @doc counted as saved. Computed per phase too.
-- @report
-- @per-phase
-- @needs gpu_utilization _glue_runs _kernel_classes
-- @requires kernels
-- @param top_glue_kernels 3 range 1 inf
-- @param top_sequences 3 range 1 inf
-- @column device_id CUDA device index.
-- @column glue_ns Time in glue kernels: classes elementwise, norm, activation and reduction (sum of durations, ns).
-- @column glue_share glue_ns / the GPU's time in kernels, copies and memsets (0-1), as operation_classes counts it.
-- @column glue_kernel_count Glue kernels.
-- @column mean_glue_kernel_ns Mean glue kernel (ns).
-- @column glue_classes The glue classes by time: a list of {op_class, share} (share of the GPU's time).
-- @column top_glue_kernels The heaviest glue kernels: a list of {name, op_class, calls, share} (share of the GPU's time).
-- @column top_sequences The runs of consecutive glue kernels that repeat most (at least min_sequence_repeats times), by time: a list of {sequence, kernels, repeats, total_ns, share} (sequence: the kernels' labels joined by ' → ', the first six of a longer run; share of the GPU's time).
-- @column sequence_share Share of the GPU's time in repeated runs of two or more glue kernels (0-1).
-- @column fusion_saving_ns Time fusing each repeated run into one kernel would save under the model above (ns): none for a run of casts alone, whose fused kernel still moves every tensor.
-- @column fusion_saving_fraction fusion_saving_ns / the device window (0-1).
-- @column window_ns The device window (ns).
-- @check device_id not_null
-- @check device_id unique
-- @check glue_ns non_negative
-- @check glue_share range 0 1
-- @check sequence_share range 0 1
-- @check fusion_saving_fraction range 0 1
-- Every kernel is handled by its integer name id; the labels join back only for the few names and runs shown.
WITH names AS (
    SELECT n.name_id, n.op_class, c.is_glue,
           -- The last functor or op named inside an ATen kernel's template arguments says what it computes.
           coalesce(list_last(regexp_extract_all(n.name,
                        '([A-Za-z0-9_]+(Functor[A-Za-z0-9_]*|_kernel_cuda|_kernel_impl|Ops))[<(,> ]', 1)),
                    n.short_name, n.name) AS label
    FROM _kernel_classes n
    JOIN _op_classes c ON c.op_class = n.op_class
),
k AS (
    SELECT k.device_id, k.stream_id, k.start_ns, k.dur_ns, k.name_id, n.is_glue
    FROM _kernels_by_id k JOIN names n USING (name_id)
    WHERE k.device_id IS NOT NULL
),
gpu AS (
    SELECT device_id, sum(ns) AS ns FROM (
        SELECT device_id, sum(dur_ns) AS ns FROM _kernels_by_id WHERE device_id IS NOT NULL GROUP BY device_id
        UNION ALL SELECT device_id, sum(greatest(end_ns - start_ns, 0)) FROM memcpys GROUP BY device_id
        UNION ALL SELECT device_id, sum(greatest(end_ns - start_ns, 0)) FROM memsets GROUP BY device_id)
    WHERE device_id IS NOT NULL GROUP BY device_id
),
per_id AS (
    SELECT device_id, name_id, count(*) AS n, sum(dur_ns) AS ns FROM k WHERE is_glue GROUP BY device_id, name_id
),
glue AS (SELECT device_id, sum(ns) AS ns, sum(n) AS n FROM per_id GROUP BY device_id),
per_class AS (
    SELECT c.device_id, list({'op_class': c.op_class, 'share': c.ns / g.ns} ORDER BY c.ns DESC) AS glue_classes
    FROM (SELECT p.device_id, n.op_class, sum(p.ns) AS ns FROM per_id p JOIN names n USING (name_id)
          GROUP BY p.device_id, n.op_class) c
    JOIN gpu g USING (device_id) GROUP BY c.device_id
),
per_kernel AS (
    SELECT p.device_id, n.label, n.op_class, sum(p.n) AS n, sum(p.ns) AS ns,
           row_number() OVER (PARTITION BY p.device_id ORDER BY sum(p.ns) DESC, n.label) AS rank
    FROM per_id p JOIN names n USING (name_id) GROUP BY p.device_id, n.label, n.op_class
),
top_kernels AS (
    SELECT p.device_id, list({'name': p.label, 'op_class': p.op_class, 'calls': p.n, 'share': p.ns / g.ns}
                             ORDER BY p.rank) AS top_glue_kernels
    FROM per_kernel p JOIN gpu g USING (device_id) WHERE p.rank <= ${top_glue_kernels} GROUP BY p.device_id
),
-- The fusion candidates, one row per run whose sequence repeats (_glue_runs), grouped by sequence.
sequences AS (
    SELECT device_id, run_kernels AS kernels, order_key, set_key, count(*) AS n, sum(run_ns) AS ns,
           sum(run_fused_ns) AS fused_ns,
           -- a run is named by its stream, phase and number (_glue_runs numbers the runs of each phase apart)
           arg_min({'stream_id': stream_id, 'phase': phase, 'run_id': run_id},
                   (stream_id, run_id, coalesce(phase, ''))) AS example
    FROM _glue_runs WHERE is_first GROUP BY device_id, run_kernels, order_key, set_key
),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY device_id ORDER BY ns DESC, kernels, order_key) AS rank
    FROM sequences
),
-- A run is shown by the labels of its first six kernels, from its example run.
shown AS (
    SELECT r.device_id, r.rank,
           array_to_string(list(n.label ORDER BY x.start_ns)[1:6], ' → ')
               || CASE WHEN any_value(r.kernels) > 6 THEN ' → … (' || any_value(r.kernels) || ' kernels)' ELSE '' END
               AS sequence
    FROM ranked r
    JOIN _glue_runs x ON x.device_id = r.device_id AND x.stream_id = r.example.stream_id
                      AND x.run_id = r.example.run_id
                      AND x.phase IS NOT DISTINCT FROM r.example.phase
    JOIN names n ON n.name_id = x.name_id
    WHERE r.rank <= ${top_sequences}
    GROUP BY r.device_id, r.rank
),
top_sequences AS (
    SELECT r.device_id,
           list({'sequence': s.sequence, 'kernels': r.kernels, 'repeats': r.n, 'total_ns': r.ns, 'share': r.ns / g.ns}
                ORDER BY r.rank) FILTER (WHERE r.rank <= ${top_sequences}) AS top_sequences,
           sum(r.ns) AS seq_ns, sum(r.ns - r.fused_ns) AS saving_ns
    FROM ranked r JOIN gpu g USING (device_id)
    LEFT JOIN shown s ON s.device_id = r.device_id AND s.rank = r.rank
    GROUP BY r.device_id
)
SELECT g.device_id, coalesce(l.ns, 0) AS glue_ns,
       CASE WHEN g.ns > 0 THEN least(coalesce(l.ns, 0) / g.ns, 1) ELSE 0 END AS glue_share,
       coalesce(l.n, 0) AS glue_kernel_count, CASE WHEN l.n > 0 THEN l.ns / l.n END AS mean_glue_kernel_ns,
       coalesce(c.glue_classes, []) AS glue_classes, coalesce(t.top_glue_kernels, []) AS top_glue_kernels,
       coalesce(s.top_sequences, []) AS top_sequences,
       CASE WHEN g.ns > 0 THEN least(coalesce(s.seq_ns, 0) / g.ns, 1) ELSE 0 END AS sequence_share,
       CAST(coalesce(s.saving_ns, 0) AS BIGINT) AS fusion_saving_ns,
       CASE WHEN u.window_ns > 0 THEN least(coalesce(s.saving_ns, 0) / u.window_ns, 1) ELSE 0 END
           AS fusion_saving_fraction,
       u.window_ns
FROM gpu g
JOIN (SELECT DISTINCT device_id FROM _kernels_by_id) d USING (device_id)
LEFT JOIN glue l USING (device_id)
LEFT JOIN per_class c USING (device_id)
LEFT JOIN top_kernels t USING (device_id)
LEFT JOIN top_sequences s USING (device_id)
LEFT JOIN gpu_utilization u USING (device_id)
ORDER BY g.device_id
