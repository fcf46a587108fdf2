-- @fact _glue_runs
-- @whole-run
-- @materialize
-- @doc One row per glue kernel (operation classes elementwise, norm, activation and reduction,
-- @doc rules/vocabulary/operation_classes.yaml) that belongs to a fusion candidate: a run of two or more consecutive glue
-- @doc kernels on one stream (between two kernels of other classes) whose sequence of kernels repeats at least
-- @doc min_sequence_repeats times on the device, as HTA's frequent kernel sequences find them. Read by
-- @doc fusion_candidates (which runs to show, what fusing saves) and by the what-if replay (_whatif_steps), so
-- @doc both count the same runs.
-- @doc Not fused: a copy (memcpy, including device-to-device and peer copies) or memset on the stream ends a run,
-- @doc as a kernel of another class does, and so does a copy kernel PyTorch launches between two CUDA tensors
-- @doc (copy_device_to_device, which may read another GPU's memory); random-number kernels are a class of their
-- @doc own (random), not glue. The saving model: a glue kernel's time follows the bytes it moves; k kernels that
-- @doc each read and write the same tensor move it k times, a fused kernel once, so the run's kernels shrink to
-- @doc 1/k of their time. A cast (a dtype conversion: bfloat16_copy_kernel_cuda, TorchInductor's
-- @doc triton_poi_fused__to_copy_N) reads one tensor and writes another, and a run of casts converts a different
-- @doc tensor each (the weights, say): fused, it still reads and writes every one of them, so casts keep their
-- @doc time (fusing saves their launches only) and the run's other kernels shrink to 1/(k - casts).
-- @doc Phases are a dimension here: a run never spans two inference phases (each kernel, copy and memset has the
-- @doc phase of its issuing call, _timeline.phase), and phase_repeats counts a sequence within its phase, so a
-- @doc phase's glue runs are these rows of its phase with phase_repeated (engine/facts/scopes.py), not a second
-- @doc pass over the phase's kernels.
-- @requires kernels
-- @needs _kernel_classes _timeline _phase_ranges
-- @param min_sequence_repeats 2 range 1 inf
-- @column device_id CUDA device index.
-- @column stream_id CUDA stream.
-- @column run_id The run on its stream: the count of kernels of other classes, copies and memsets before it on the stream.
-- @column pid Process that launched the kernel.
-- @column correlation_id Correlation id of the launching call.
-- @column start_ns Kernel start (ns).
-- @column dur_ns Kernel duration (ns).
-- @column name_id Kernel name id.
-- @column run_kernels Kernels in the run.
-- @column run_ns Sum of the run's kernel durations (ns).
-- @column is_first True for the run's first kernel.
-- @column order_key Key of the run's sequence of kernel names, which differs when the same kernels come in another order.
-- @column set_key Key of the run's set of kernel names.
-- @column repeats Runs of the device with the same sequence.
-- @column is_cast True for a cast (dtype conversion), which keeps its time when the run is fused.
-- @column fused_factor The share of its time the kernel keeps in the fused run: 1 for a cast, else 1 / the run's kernels that are not casts.
-- @column run_fused_ns The run's time fused into one kernel under the saving model above (ns, rounded to whole ns).
-- @column phase Inference phase of the run's kernels (_timeline.phase), NULL outside every phase range.
-- @column phase_repeats Runs of the device in the same phase with the same sequence.
-- @column phase_repeated phase_repeats is at least min_sequence_repeats: the run is a fusion candidate of its phase.
-- A run's sequence gets a key from plain sums over the one sort of each stream's kernels (rn numbers them):
-- sum(h * (rn - first rn)) = sum(h * rn) - first rn * sum(h), h a hash of the name id. No ordered aggregate runs
-- over the millions of kernels.
WITH glue AS (
    SELECT n.name_id,
           regexp_matches(n.name, '(bfloat16|float16|half|float8|reduced_float)_copy_kernel|fused__to_copy_[0-9]+$')
               AS is_cast
    FROM _kernel_classes n JOIN _op_classes c ON c.op_class = n.op_class
    WHERE c.is_glue AND NOT regexp_matches(n.name, 'copy_device_to_device')
),
-- Phases by number: the phase's text in the window's sort would cost it a third more time.
phase_nos AS (
    SELECT phase, row_number() OVER (ORDER BY phase) AS phase_no
    FROM (SELECT DISTINCT phase FROM _phase_ranges WHERE phase IS NOT NULL)
),
-- The device's kernels, copies and memsets, read from _timeline, which carries each one's phase; copies and memsets
-- only end runs.
ops AS (
    SELECT t.device_id, t.stream_id, coalesce(p.phase_no, 0) AS phase_no,
           -- a stream within a phase as one BIGINT, as cheap to partition on as the stream itself: CUDA stream ids
           -- are small and never negative, so -1 stands for NULL and 2^44 apart keeps the phases apart
           coalesce(t.stream_id, -1) + (coalesce(p.phase_no, 0) << 44) AS lane,
           CASE WHEN t.is_compute THEN t.pid END AS pid,
           CASE WHEN t.is_compute THEN t.correlation_id END AS correlation_id, t.start_ns,
           CASE WHEN t.is_compute THEN t.end_ns - t.start_ns END AS dur_ns, t.name_id
    FROM _timeline t LEFT JOIN phase_nos p ON p.phase = t.phase
    WHERE NOT t.is_graph
),
runs AS (
    SELECT k.device_id, k.stream_id, k.lane, k.phase_no, k.pid, k.correlation_id, k.start_ns, k.dur_ns, k.name_id,
           g.name_id IS NOT NULL AS is_glue, coalesce(g.is_cast, false) AS is_cast,
           sum(CASE WHEN g.name_id IS NULL THEN 1 ELSE 0 END) OVER w AS run_id, row_number() OVER w AS rn,
           -- BIGINT: h * rn stays far below 2^63 (h < 10^6, rn < 10^12), and sum() of BIGINTs adds in HUGEINT
           CAST(hash(k.name_id) % 1000003 AS BIGINT) AS h
    FROM ops k LEFT JOIN glue g ON g.name_id = k.name_id
    WINDOW w AS (PARTITION BY k.device_id, k.lane ORDER BY k.start_ns ROWS UNBOUNDED PRECEDING)
),
run_keys AS (
    SELECT device_id, lane, any_value(phase_no) AS phase_no, run_id, count(*) AS run_kernels, sum(dur_ns) AS run_ns,
           min(rn) AS first_rn,
           sum(h * rn) - min(rn) * sum(h) AS order_key, sum(h) AS set_key,
           count(*) FILTER (WHERE is_cast) AS run_casts,
           -- whole nanoseconds: a sum of integers is the same in any order, so the saving does not change in its
           -- last digit from one run to the next with the order DuckDB's threads add the runs in
           CAST(coalesce(sum(dur_ns) FILTER (WHERE is_cast), 0)
                + coalesce(sum(dur_ns) FILTER (WHERE NOT is_cast), 0) / greatest(count(*) FILTER (WHERE NOT is_cast), 1)
                AS BIGINT) AS run_fused_ns
    FROM runs WHERE is_glue GROUP BY device_id, lane, run_id HAVING count(*) >= 2
),
repeated AS (
    SELECT * FROM (SELECT *, count(*) OVER (PARTITION BY device_id, run_kernels, order_key, set_key) AS repeats,
                          count(*) OVER (PARTITION BY device_id, phase_no, run_kernels, order_key, set_key)
                              AS phase_repeats
                   FROM run_keys)
    WHERE repeats >= ${min_sequence_repeats}
)
SELECT r.device_id, r.stream_id, r.run_id, r.pid, r.correlation_id, r.start_ns, r.dur_ns, r.name_id,
       q.run_kernels, q.run_ns, r.rn = q.first_rn AS is_first, q.order_key, q.set_key, q.repeats, r.is_cast,
       CASE WHEN r.is_cast THEN 1.0 ELSE 1.0 / greatest(q.run_kernels - q.run_casts, 1) END AS fused_factor,
       q.run_fused_ns, p.phase, q.phase_repeats, q.phase_repeats >= ${min_sequence_repeats} AS phase_repeated
FROM runs r JOIN repeated q ON q.device_id = r.device_id AND q.lane = r.lane AND q.run_id = r.run_id
LEFT JOIN phase_nos p ON p.phase_no = r.phase_no
WHERE r.is_glue
