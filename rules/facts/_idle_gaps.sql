-- @fact _idle_gaps
-- @whole-run
-- @materialize
-- @doc One row per idle gap on a device's 'all' timeline (nothing running: no kernel, graph replay, copy or
-- @doc memset) with exactly one cause, read from what the host thread that issued the next operation was doing
-- @doc during the gap (docs/measures.md "Where the idle time goes"). In order of precedence:
-- @doc 'uvm': the next operation is a unified-memory migration that page faults drive (any migration cause but a
-- @doc user prefetch, CUPTI's CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER = 1), unless CPU samples show the
-- @doc host thread running its own code for most of the gap: host code that formats output while it touches
-- @doc managed pages is host work, however many pages it faults back. A migration has no issuing call, so the
-- @doc host thread of a gap that ends in one is the thread that issued the device's next other operation; a gap
-- @doc that ends in the program's own prefetch (cudaMemPrefetchAsync) is judged by that thread like any other;
-- @doc 'gpu-side': the next operation was already queued (its issuing call returned before the GPU went idle)
-- @doc and the gap is at most gpu_side_max_gap_ns: the fixed cost of one more operation on the GPU; queued work
-- @doc that waited longer is 'other' (a dependency on another stream, device or event);
-- @doc 'sync': a blocking call of a process that used the device began while the GPU was busy, had waited at
-- @doc least sync_min_wait_ns (a parameter of _timeline) when the GPU went idle, returned inside the gap, and the
-- @doc host issued the next operation within host_work_min_ns of its return (a sync followed by long host work
-- @doc is not what kept the GPU idle);
-- @doc 'other' as well when the issuing call of the next operation is not in the capture;
-- @doc 'allocation': the issuing thread spent at least allocation_min_share of the gap inside allocation or
-- @doc free calls (_api_classes);
-- @doc 'sync' when the issuing thread spent most of the gap blocked in a synchronising call (on other work);
-- @doc 'launch': the host was issuing work: outside CUDA calls for less than host_work_min_ns of the gap (the
-- @doc per-operation cost of a launch call and the framework code around it), or inside CUDA calls longer than
-- @doc outside them;
-- @doc 'host': the issuing thread was outside any CUDA call for at least host_work_min_ns and for most of the gap
-- @doc (Python, a scheduler, tokenisation, I/O, waiting for input).
-- @doc Time inside calls on the issuing thread is the overlap of the gap with the thread's calls, found by an
-- @doc equi-join on time buckets (each call and gap listed in every bucket it touches, an overlap counted in
-- @doc the bucket where it begins), so the gaps are never sorted. A call that begins inside an earlier call of
-- @doc the same thread (nested driver calls) counts only from that call's return, so no time counts twice (one
-- @doc window over the calls). The bucket width is the span of the calls and gaps over the larger of their
-- @doc counts (at least 1 us), so a call or gap touches about two buckets on average, however long the capture.
-- @needs _timeline _api_classes
-- @param host_work_min_ns 100000
-- @param gpu_side_max_gap_ns 20000
-- @param allocation_min_share 0.25
-- @column device_id CUDA device index.
-- @column gap_start_ns When the GPU went idle (ns).
-- @column gap_end_ns When the next operation started (ns).
-- @column gap_ns Idle time (ns).
-- @column next_kind Kind of the operation that ended the gap.
-- @column next_is_uvm The next operation is a unified-memory migration.
-- @column pid Process that issued the next operation (for a migration, the next other operation).
-- @column global_tid Thread that issued it (NULL when its issuing call is not in the capture).
-- @column sync_ns Time of the gap the issuing thread spent in blocking calls (ns).
-- @column allocation_ns Time of the gap it spent in allocation and free calls (ns).
-- @column launch_ns Time of the gap it spent in other CUDA calls (ns).
-- @column host_ns Time of the gap it spent outside CUDA calls (ns).
-- @column cause uvm, gpu-side, sync, allocation, launch, host or other.
-- @column phase Inference phase of the next operation (_timeline.phase): the phase the gap belongs to.
-- The gaps whose next operation's issuing call is known, narrow: the wide columns are read from _timeline once
-- the time inside calls is summed, so millions of gaps are not carried through the joins.
WITH uvm_gaps AS (
    SELECT device_id, prev_end_ns AS gap_start_ns, start_ns AS gap_end_ns FROM _timeline
    WHERE is_uvm AND start_ns > prev_end_ns
),
-- Only on the devices with such a gap: an as-of join sorts its whole right side, millions of operations when
-- there is no migration at all.
issued AS (
    SELECT device_id, start_ns, pid, global_tid, api_start_ns, api_end_ns FROM _timeline
    WHERE NOT is_uvm AND global_tid IS NOT NULL AND device_id IN (SELECT device_id FROM uvm_gaps)
),
-- A migration has no issuing call: the GPU waits for the thread that issues its next other operation. After the
-- last one (host code reading results from managed memory), the thread that issued the one before; its calls
-- are over, so the gap is judged by its time inside calls as though it issued work at the gap's end.
uvm_ends AS (
    SELECT u.device_id, u.gap_start_ns, u.gap_end_ns,
           coalesce(n.pid, b.pid) AS pid, coalesce(n.global_tid, b.global_tid) AS global_tid,
           CASE WHEN n.global_tid IS NOT NULL THEN n.api_start_ns WHEN b.global_tid IS NOT NULL THEN u.gap_end_ns END
               AS api_start_ns,
           CASE WHEN n.global_tid IS NOT NULL THEN n.api_end_ns WHEN b.global_tid IS NOT NULL THEN u.gap_end_ns END
               AS api_end_ns
    FROM uvm_gaps u
    ASOF LEFT JOIN issued n ON n.device_id = u.device_id AND u.gap_end_ns <= n.start_ns
    ASOF LEFT JOIN issued b ON b.device_id = u.device_id AND u.gap_end_ns >= b.start_ns
),
-- Whether the migrations that end a gap are all user prefetches (migration cause 1, CUPTI's
-- CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER): the program asked for them, no page fault did.
uvm_causes AS (
    SELECT u.device_id, u.gap_end_ns, bool_and(coalesce(m.migration_cause = 1, false)) AS prefetch
    FROM uvm_ends u JOIN memcpys m ON m.device_id = u.device_id AND m.start_ns = u.gap_end_ns AND m.is_uvm
    GROUP BY ALL
),
-- The host thread's CPU samples in gaps that end in a migration: user-mode samples outside the CUDA driver and
-- runtime libraries are its own code (formatting output, computing); kernel-mode ones include fault handling.
uvm_samples AS (
    SELECT u.device_id, u.gap_end_ns, count(*) AS samples,
           count(*) FILTER (WHERE NOT coalesce(s.kernel_mode, false)
                              AND NOT regexp_matches(coalesce(s.module, ''), '(?i)libcuda|libnvidia|libcupti'))
               AS own_samples
    FROM cpu_samples s ASOF JOIN uvm_ends u ON u.global_tid = s.global_tid AND u.gap_start_ns <= s.ts_ns
    -- only the samples of those threads reach the join, which sorts what it is given
    WHERE s.ts_ns < u.gap_end_ns AND s.global_tid IN (SELECT global_tid FROM uvm_ends)
    GROUP BY ALL
),
ends AS (
    SELECT t.device_id, t.prev_end_ns AS gap_start_ns, t.start_ns AS gap_end_ns, t.is_graph, t.is_compute,
           t.is_memset, t.is_uvm, t.follows_sync, t.sync_return_ns, t.phase,
           CASE WHEN t.is_uvm THEN u.pid ELSE t.pid END AS pid,
           CASE WHEN t.is_uvm THEN u.global_tid ELSE t.global_tid END AS global_tid,
           CASE WHEN t.is_uvm THEN u.api_start_ns ELSE t.api_start_ns END AS api_start_ns,
           CASE WHEN t.is_uvm THEN u.api_end_ns ELSE t.api_end_ns END AS api_end_ns,
           t.is_uvm AND NOT coalesce(c.prefetch, false)
               AND NOT coalesce(2 * s.own_samples > s.samples, false) AS fault_wait
    FROM _timeline t
    LEFT JOIN uvm_ends u ON t.is_uvm AND u.device_id = t.device_id AND u.gap_end_ns = t.start_ns
    LEFT JOIN uvm_causes c ON t.is_uvm AND c.device_id = t.device_id AND c.gap_end_ns = t.start_ns
    LEFT JOIN uvm_samples s ON t.is_uvm AND s.device_id = t.device_id AND s.gap_end_ns = t.start_ns
    WHERE t.start_ns > t.prev_end_ns
),
-- The gaps with a known issuing thread, read from _timeline and uvm_ends rather than from ends: ends is then read
-- once, streamed into the last join, instead of stored whole (a wide row per gap) for two readers.
gaps AS (
    SELECT device_id, prev_end_ns AS gap_start_ns, start_ns AS gap_end_ns, global_tid FROM _timeline
    WHERE start_ns > prev_end_ns AND NOT is_uvm AND global_tid IS NOT NULL
    UNION ALL
    SELECT device_id, gap_start_ns, gap_end_ns, global_tid FROM uvm_ends WHERE global_tid IS NOT NULL
),
-- The calls of the threads that issued a gap's next operation, each from the latest return of the calls before
-- it on its thread (by start, end, then class: of calls with the same start and end, one counts), so calls
-- nested in others (driver calls inside runtime calls) never count twice: one window over the calls.
own AS (
    SELECT global_tid, greatest(start_ns, coalesce(covered_until_ns, start_ns)) AS start_ns, end_ns, api_class
    FROM (SELECT a.global_tid, a.start_ns, a.end_ns, c.api_class,
                 max(a.end_ns) OVER (PARTITION BY a.global_tid ORDER BY a.start_ns, a.end_ns, c.api_class
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered_until_ns
          FROM _api_calls_by_id a JOIN _api_classes c ON c.name_id = a.name_id
          WHERE a.global_tid IN (SELECT DISTINCT global_tid FROM gaps) AND a.end_ns > a.start_ns)
    WHERE coalesce(covered_until_ns, start_ns) < end_ns
),
-- Buckets as wide as the span of calls and gaps over the larger of their counts: a thread that issued its calls
-- in one burst while the GPU worked through long gaps afterwards still lists each gap in a few buckets.
width AS (
    SELECT greatest((greatest(c.e, g.e) - least(c.s, g.s)) // greatest(c.n, g.n, 1), 1000) AS b
    FROM (SELECT min(start_ns) AS s, max(end_ns) AS e, count(*) AS n FROM own) c,
         (SELECT min(gap_start_ns) AS s, max(gap_end_ns) AS e, count(*) AS n FROM gaps) g
),
call_buckets AS (
    SELECT c.global_tid, c.start_ns, c.end_ns, c.api_class,
           unnest(range(c.start_ns // w.b, (c.end_ns - 1) // w.b + 1)) AS bucket
    FROM own c CROSS JOIN width w
),
gap_buckets AS (
    SELECT g.device_id, g.gap_end_ns, g.gap_start_ns, g.global_tid,
           unnest(range(g.gap_start_ns // w.b, (g.gap_end_ns - 1) // w.b + 1)) AS bucket
    FROM gaps g CROSS JOIN width w
),
inside AS (
    -- (device_id, gap_end_ns) names a gap: two operations of a device that start together cannot both end one
    -- BIGINT, not the HUGEINT that sum() gives: no gap holds 292 years of calls, and _idle_gaps stays resident
    -- (a row per gap), so 8 bytes a column instead of 16 keep millions of gaps in memory instead of on disk.
    SELECT g.device_id, g.gap_end_ns,
           CAST(sum(least(c.end_ns, g.gap_end_ns) - greatest(c.start_ns, g.gap_start_ns)) AS BIGINT) AS api_ns,
           CAST(coalesce(sum(least(c.end_ns, g.gap_end_ns) - greatest(c.start_ns, g.gap_start_ns))
                         FILTER (WHERE c.api_class = 'allocation'), 0) AS BIGINT) AS allocation_ns,
           CAST(coalesce(sum(least(c.end_ns, g.gap_end_ns) - greatest(c.start_ns, g.gap_start_ns))
                         FILTER (WHERE c.api_class = 'sync'), 0) AS BIGINT) AS sync_ns
    FROM gap_buckets g CROSS JOIN width w
    JOIN call_buckets c ON c.global_tid = g.global_tid AND c.bucket = g.bucket
    WHERE c.start_ns < g.gap_end_ns AND c.end_ns > g.gap_start_ns
      AND greatest(c.start_ns, g.gap_start_ns) // w.b = g.bucket
    GROUP BY g.device_id, g.gap_end_ns
),
at_end AS (
    SELECT t.device_id, t.gap_start_ns, t.gap_end_ns, t.gap_end_ns - t.gap_start_ns AS gap_ns,
           CASE WHEN t.is_graph THEN 'graph' WHEN t.is_compute THEN 'kernel' WHEN t.is_memset THEN 'memset'
                ELSE 'memcpy' END AS next_kind,
           t.is_uvm AS next_is_uvm, t.fault_wait, t.pid, t.global_tid, t.api_start_ns, t.api_end_ns,
           t.follows_sync, t.sync_return_ns, t.phase,
           coalesce(i.api_ns, 0) AS api_ns, coalesce(i.allocation_ns, 0) AS allocation_ns,
           coalesce(i.sync_ns, 0) AS sync_ns
    FROM ends t LEFT JOIN inside i ON i.device_id = t.device_id AND i.gap_end_ns = t.gap_end_ns
)
SELECT device_id, gap_start_ns, gap_end_ns, gap_ns, next_kind, next_is_uvm, pid, global_tid,
       sync_ns, allocation_ns, api_ns - allocation_ns - sync_ns AS launch_ns, gap_ns - api_ns AS host_ns,
       CASE WHEN fault_wait THEN 'uvm'
            WHEN api_end_ns <= gap_start_ns THEN CASE WHEN gap_ns <= ${gpu_side_max_gap_ns} THEN 'gpu-side' ELSE 'other' END
            WHEN follows_sync AND coalesce(api_start_ns - sync_return_ns, 0) < ${host_work_min_ns} THEN 'sync'
            WHEN global_tid IS NULL OR api_end_ns IS NULL THEN 'other'
            WHEN allocation_ns >= ${allocation_min_share} * gap_ns THEN 'allocation'
            WHEN sync_ns >= 0.5 * gap_ns THEN 'sync'
            WHEN gap_ns - api_ns < ${host_work_min_ns} OR api_ns >= gap_ns - api_ns THEN 'launch'
            ELSE 'host' END AS cause,
       phase
FROM at_end
