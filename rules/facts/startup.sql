-- @fact startup
-- @report
-- @whole-capture
-- @doc The one-off start-up at the beginning of the capture (model load, then warm-up), found before anything else
-- @doc is judged; no row when the capture has none. Found from NVTX first: the ranges whose text matches a start-up
-- @doc pattern (startup_of(): `load` for init/load/setup ranges, `warmup` for warm-up, compile and CUDA-graph
-- @doc capture ranges; configurable, see engine/facts/compute.py), as long as they come before the first kernel or
-- @doc graph launch made outside them. Without such ranges, from shape: the one-off work before the repeating
-- @doc kernels, named by the CUDA calls and copies that make it. That is (1) at least startup_min_bytes of
-- @doc host-to-device copies before the first kernel or graph replay (weights uploaded before the model runs);
-- @doc (2) a CUDA call of at least startup_min_call_ns before the first kernel or graph launch (context creation,
-- @doc cudaHostAlloc/cuMemHostAlloc/cudaMallocHost pinned buffers, a large cudaMalloc, module loads, copies);
-- @doc (3) module loads: a launch that is the first of its kernel (or the capture's first launch) and takes at least
-- @doc startup_first_launch_ratio times the median launch and startup_min_call_ns (with CUDA lazy loading,
-- @doc CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2, a kernel's module is loaded inside its first launch:
-- @doc CUDA C++ Programming Guide, "Lazy Loading"), and cuModuleLoad*/cuLibraryLoad* calls of at least
-- @doc startup_min_call_ns, as long as no more than startup_max_op_share of the capture's kernels and graph replays
-- @doc started before them (a kernel first launched late in a loop is the loop's, not the start-up's). The
-- @doc start-up then ends at the first kernel or graph launch after the last of them, and is followed by at least
-- @doc startup_min_steady_ops kernels and graph replays (shape alone names no start-up before a handful of kernels).
-- @doc A start-up must take at least startup_min_share of the capture. When at least startup_min_steady_ops
-- @doc kernels and graph replays follow it, every other fact judges only the steady window after it (the canonical
-- @doc views are cut at steady_start_ns: engine/facts/window.py), so a model load is never called the run's
-- @doc bottleneck; otherwise the capture is only start-up and is judged as it is.
-- @needs _api_classes
-- @param startup_min_share 0.05
-- @param startup_min_bytes 1000000000
-- @param startup_min_steady_ops 20 range 0 inf
-- @param startup_min_call_ns 1000000
-- @param startup_first_launch_ratio 10 range 1 inf
-- @param startup_max_op_share 0.5
-- @column found_by nvtx (start-up ranges) or shape (copies, one-off calls and slow first launches before the repeating kernels).
-- @column start_ns When the capture's first CUDA call or start-up range began (ns).
-- @column steady_start_ns Where the start-up ends and the judged steady window begins (ns): the end of the last start-up range, or the CPU call that issued the first kernel after the one-off work.
-- @column startup_ns steady_start_ns - start_ns: the start-up's length (ns).
-- @column startup_fraction startup_ns / the traced span (0-1).
-- @column load_ns Length of the model load: from the first to the last end of the load ranges, or the whole start-up when found by shape (ns).
-- @column load_copy_count Host-to-device copies that started during the load.
-- @column load_bytes Bytes in those copies.
-- @column load_copy_ns Time in those copies (ns).
-- @column load_gbps load_bytes / load_copy_ns: their effective bandwidth (GB/s).
-- @column pageable_bytes Bytes of those copies read from pageable host memory.
-- @column pageable_share pageable_bytes / load_bytes (0-1).
-- @column alloc_count Device-memory allocation calls (cudaMalloc, cuMemAlloc, cuMemCreate ...) during the start-up.
-- @column warmup_ns Length of the warm-up ranges, from the first start to the last end (ns); 0 without any.
-- @column warmup_kernel_count Kernels and graph replays that started on the GPU during the warm-up.
-- @column graph_capture_count CUDA-graph captures and instantiations (cudaStreamBeginCapture, cudaGraphInstantiate ...) during the start-up.
-- @column steady_ns From steady_start_ns to the end of the last CUDA activity: the window the rules judge (ns).
-- @column steady_op_count Kernels and graph replays that started in that window.
-- @column judged_after True when the rules judge the steady window alone (at least startup_min_steady_ops kernels and graph replays follow the start-up); false when the capture is only start-up and is judged whole.
-- @column copied_in True when at least startup_min_bytes of host-to-device copies came before the first kernel or graph replay.
-- @column setup_call The longest one-off CUDA call of the start-up other than launches and copies, of at least startup_min_call_ns (context creation, a pinned host allocation, a large cudaMalloc, a module load ...); NULL without one.
-- @column setup_call_ns Its duration (ns); NULL without one.
-- @column module_load_count Module loads during the start-up: slow first launches of a kernel and cuModuleLoad*/cuLibraryLoad* calls, of at least startup_min_call_ns.
-- @column module_load_ns Time in those calls (ns).
-- @column first_launch_ns The longest of those slow first launches (ns); NULL without one.
-- @check found_by accepted_values nvtx shape
-- @check startup_ns non_negative
-- @check startup_fraction range 0 1
-- @check pageable_share range 0 1
-- @check steady_ns non_negative
-- @check module_load_count non_negative
WITH marked AS MATERIALIZED (  -- each distinct text classified once, as in _phase_ranges
    SELECT text, startup_of(text) AS kind FROM (SELECT DISTINCT text FROM nvtx_ranges WHERE text IS NOT NULL)
),
ranges AS (
    SELECT r.start_ns, r.end_ns, m.kind FROM nvtx_ranges r JOIN marked m ON m.text = r.text
    WHERE m.kind IS NOT NULL AND r.end_ns > r.start_ns
),
-- Overlapping start-up ranges (nested ones, or ranges on several threads) merged into islands.
flagged AS (
    SELECT start_ns, end_ns,
           CASE WHEN start_ns <= max(end_ns) OVER (ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING
                                                   AND 1 PRECEDING) THEN 0 ELSE 1 END AS opens
    FROM ranges
),
islands AS (
    SELECT min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM (SELECT start_ns, end_ns, sum(opens) OVER (ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
          FROM flagged)
    GROUP BY island
),
names AS (
    SELECT name_id, is_launch,
           regexp_matches(name, '^(cudaMalloc|cuMemAlloc|cuMemCreate|cudaMallocAsync|cudaMallocManaged)')
               AS is_alloc,
           regexp_matches(name, 'StreamBeginCapture|GraphInstantiate') AS is_capture,
           regexp_matches(name, 'ModuleLoad|LibraryLoad') AS is_module_load,
           regexp_matches(name, 'Memcpy') AS is_copy
    FROM _api_classes
),
-- The first kernel or graph launch made outside every start-up range: the steady work has begun there. A launch
-- after the last range ends is outside them all; only those before are matched to the ranges (an as-of join sorts
-- all it is given, and a capture without start-up ranges, or with one at its beginning, has millions after).
launches AS (
    SELECT a.start_ns, a.end_ns, a.pid, a.correlation_id FROM _api_calls_by_id a
    WHERE a.name_id IN (SELECT name_id FROM names WHERE is_launch)
),
last_island AS (SELECT max(end_ns) AS end_ns FROM islands),
outside AS (
    SELECT least((SELECT min(l.start_ns) FROM launches l, last_island x WHERE x.end_ns IS NULL OR l.start_ns > x.end_ns),
                 (SELECT min(l.start_ns)
                  FROM (SELECT l.start_ns FROM launches l, last_island x WHERE l.start_ns <= x.end_ns) l
                  ASOF LEFT JOIN islands i ON l.start_ns >= i.start_ns
                  WHERE i.end_ns IS NULL OR l.start_ns > i.end_ns)) AS first_ns
),
before_steady AS (  -- the start-up islands before it
    SELECT i.start_ns, i.end_ns FROM islands i, outside o WHERE o.first_ns IS NULL OR i.start_ns < o.first_ns
),
compute_ops AS (
    SELECT start_ns, pid, correlation_id FROM _kernels_by_id
    UNION ALL
    SELECT start_ns, pid, correlation_id FROM graph_launches
),
first_op AS (SELECT start_ns, pid, correlation_id FROM compute_ops ORDER BY start_ns LIMIT 1),
first_call AS (
    SELECT least(f.start_ns, min(a.start_ns)) AS ns
    FROM first_op f LEFT JOIN _api_calls_by_id a ON a.pid = f.pid AND a.correlation_id = f.correlation_id
    GROUP BY f.start_ns
),
bounds AS (
    SELECT (SELECT min(start_ns) FROM _api_calls_by_id) AS first_call_ns,
           greatest((SELECT max(end_ns) FROM _api_calls_by_id), (SELECT max(end_ns) FROM _kernels_by_id),
                    (SELECT max(end_ns) FROM graph_launches), (SELECT max(end_ns) FROM memcpys),
                    (SELECT max(end_ns) FROM memsets)) AS last_ns,
           (SELECT max(CAST(value AS BIGINT)) FROM profile_info WHERE key = 'duration_ns') AS traced_ns
),
-- The shape of a start-up without NVTX: the one-off calls before the repeating kernels.
launch_stats AS (
    SELECT min(start_ns) AS first_ns, median(end_ns - start_ns) AS median_ns,
           -- the moment by which startup_max_op_share of the kernels and graph replays had started
           (SELECT quantile_disc(start_ns, ${startup_max_op_share}) FROM compute_ops) AS late_ns
    FROM launches
),
long_calls AS (  -- calls long enough to be one-off work; few, so everything after reads only these
    SELECT a.start_ns, a.end_ns, a.pid, a.correlation_id, n.name_id, n.is_launch, n.is_module_load, n.is_copy
    FROM _api_calls_by_id a JOIN names n ON n.name_id = a.name_id
    WHERE a.end_ns - a.start_ns >= ${startup_min_call_ns}
),
slow_launches AS (  -- a launch far slower than the median one: its kernel's module was loaded inside it
    SELECT c.start_ns, c.end_ns, k.name_id AS kernel_name_id, k.start_ns AS kernel_start_ns
    FROM long_calls c LEFT JOIN _kernels_by_id k ON k.pid = c.pid AND k.correlation_id = c.correlation_id,
         launch_stats s
    WHERE c.is_launch AND c.end_ns - c.start_ns >= ${startup_first_launch_ratio} * s.median_ns
),
first_of_kernel AS (
    SELECT name_id, min(start_ns) AS start_ns FROM _kernels_by_id
    WHERE name_id IN (SELECT kernel_name_id FROM slow_launches) GROUP BY name_id
),
module_loads AS (  -- slow first launches and explicit module loads, before the repeating work
    SELECT l.start_ns, l.end_ns, true AS is_launch
    FROM slow_launches l LEFT JOIN first_of_kernel f ON f.name_id = l.kernel_name_id, launch_stats s
    WHERE l.start_ns = s.first_ns OR l.kernel_start_ns = f.start_ns
    UNION ALL
    SELECT start_ns, end_ns, false FROM long_calls WHERE is_module_load
),
early_loads AS (
    SELECT m.* FROM module_loads m, launch_stats s WHERE s.late_ns IS NULL OR m.start_ns < s.late_ns
),
-- The start-up's one-off work ends with the last of: a long call before the first launch, an early module load.
event_end AS (
    SELECT greatest((SELECT max(c.end_ns) FROM long_calls c, launch_stats s WHERE c.start_ns < s.first_ns),
                    (SELECT max(end_ns) FROM early_loads)) AS ns
),
early_bytes AS (
    SELECT coalesce(sum(m.bytes), 0) AS bytes FROM memcpys m, first_call f
    WHERE m.copy_kind IN ('HtoD', 'HtoA') AND m.start_ns < f.ns
),
shape_steady AS (
    SELECT greatest(
               (SELECT c.ns FROM first_call c, early_bytes e WHERE e.bytes >= ${startup_min_bytes}),
               (SELECT min(l.start_ns) FROM launches l, event_end e WHERE l.start_ns >= e.ns)) AS ns
),
candidates AS (
    SELECT 'nvtx' AS found_by, 0 AS preference, least(b.first_call_ns, min(l.start_ns)) AS start_ns,
           max(l.end_ns) AS steady_start_ns
    FROM before_steady l, bounds b GROUP BY b.first_call_ns HAVING count(*) > 0
    UNION ALL
    SELECT 'shape', 1, b.first_call_ns, c.ns FROM shape_steady c, bounds b
    WHERE c.ns IS NOT NULL
      -- Shape alone names no start-up: one-off work before a handful of kernels is the workload itself.
      AND (SELECT count(*) FROM compute_ops WHERE start_ns >= c.ns) >= ${startup_min_steady_ops}
),
chosen AS (
    SELECT c.found_by, c.start_ns, c.steady_start_ns, b.last_ns, b.traced_ns
    FROM candidates c, bounds b
    WHERE c.steady_start_ns - c.start_ns >= ${startup_min_share} * greatest(coalesce(b.traced_ns, 0),
                                                                             b.last_ns - c.start_ns, 1)
    ORDER BY c.preference LIMIT 1
),
spans AS (  -- the load and warm-up ranges inside the start-up (the whole start-up is the load when found by shape)
    SELECT w.*,
           CASE WHEN w.found_by = 'shape' THEN w.start_ns ELSE
               (SELECT min(start_ns) FROM ranges WHERE kind = 'load' AND end_ns <= w.steady_start_ns) END AS load_start,
           CASE WHEN w.found_by = 'shape' THEN w.steady_start_ns ELSE
               (SELECT max(end_ns) FROM ranges WHERE kind = 'load' AND end_ns <= w.steady_start_ns) END AS load_end,
           (SELECT min(start_ns) FROM ranges WHERE kind = 'warmup' AND end_ns <= w.steady_start_ns
                AND w.found_by = 'nvtx') AS warm_start,
           (SELECT max(end_ns) FROM ranges WHERE kind = 'warmup' AND end_ns <= w.steady_start_ns
                AND w.found_by = 'nvtx') AS warm_end
    FROM chosen w
),
load_copies AS (
    SELECT count(*) AS n, coalesce(sum(m.bytes), 0) AS bytes, coalesce(sum(m.end_ns - m.start_ns), 0) AS ns,
           coalesce(sum(m.bytes) FILTER (WHERE m.src_mem = 'pageable'), 0) AS pageable
    FROM memcpys m, spans s
    WHERE m.copy_kind IN ('HtoD', 'HtoA') AND m.start_ns >= s.load_start AND m.start_ns < s.load_end
),
calls AS (
    SELECT count(*) FILTER (WHERE n.is_alloc) AS allocs, count(*) FILTER (WHERE n.is_capture) AS captures
    FROM _api_calls_by_id a JOIN names n ON n.name_id = a.name_id, spans s
    WHERE (n.is_alloc OR n.is_capture) AND a.start_ns >= s.start_ns AND a.start_ns < s.steady_start_ns
),
one_off AS (  -- the evidence: the longest one-off call, the module loads
    SELECT arg_max(a.name, c.end_ns - c.start_ns) AS call_name, max(c.end_ns - c.start_ns) AS call_ns
    FROM long_calls c JOIN _api_classes a ON a.name_id = c.name_id, spans s
    WHERE NOT c.is_launch AND NOT c.is_copy AND NOT c.is_module_load
      AND c.start_ns >= s.start_ns AND c.start_ns < s.steady_start_ns
),
loads AS (
    SELECT count(*) AS n, coalesce(sum(m.end_ns - m.start_ns), 0) AS ns,
           max(m.end_ns - m.start_ns) FILTER (WHERE m.is_launch) AS first_launch_ns
    FROM module_loads m, spans s WHERE m.start_ns >= s.start_ns AND m.start_ns < s.steady_start_ns
),
ops AS (
    SELECT count(*) FILTER (WHERE o.start_ns >= s.steady_start_ns) AS steady,
           count(*) FILTER (WHERE o.start_ns >= s.warm_start AND o.start_ns < s.steady_start_ns) AS warm
    FROM compute_ops o, spans s
)
SELECT s.found_by, s.start_ns, s.steady_start_ns, s.steady_start_ns - s.start_ns AS startup_ns,
       least((s.steady_start_ns - s.start_ns) / greatest(coalesce(s.traced_ns, 0), s.last_ns - s.start_ns, 1), 1)
           AS startup_fraction,
       coalesce(s.load_end - s.load_start, 0) AS load_ns, c.n AS load_copy_count, c.bytes AS load_bytes,
       c.ns AS load_copy_ns, CASE WHEN c.ns > 0 THEN c.bytes / c.ns END AS load_gbps,
       c.pageable AS pageable_bytes, CASE WHEN c.bytes > 0 THEN c.pageable / c.bytes END AS pageable_share,
       k.allocs AS alloc_count, coalesce(s.warm_end - s.warm_start, 0) AS warmup_ns,
       coalesce(o.warm, 0) AS warmup_kernel_count, k.captures AS graph_capture_count,
       greatest(s.last_ns - s.steady_start_ns, 0) AS steady_ns, o.steady AS steady_op_count,
       o.steady >= ${startup_min_steady_ops} AS judged_after,
       (SELECT bytes FROM early_bytes) >= ${startup_min_bytes} AS copied_in,
       u.call_name AS setup_call, u.call_ns AS setup_call_ns,
       m.n AS module_load_count, m.ns AS module_load_ns, m.first_launch_ns
FROM spans s, load_copies c, calls k, ops o, one_off u, loads m
