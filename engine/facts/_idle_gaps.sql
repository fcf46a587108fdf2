-- @fact _idle_gaps
-- @materialize
-- @doc One row per idle gap on a device's 'all' timeline (nothing running: no kernel, graph replay, copy or
-- @doc memset) with exactly one cause, read from what the host thread that issued the next operation was doing
-- @doc during the gap (README "Where the idle time goes"). In order of precedence:
-- @doc 'uvm': the next operation is a unified-memory migration (page faults drive it, not the host);
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
-- @doc Time inside calls on the issuing thread is read from running sums over the thread's calls (two as-of
-- @doc lookups per gap), so no gap is joined against the calls one by one.
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
-- @column pid Process that issued the next operation.
-- @column global_tid Thread that issued it (NULL when its issuing call is not in the capture).
-- @column sync_ns Time of the gap the issuing thread spent in blocking calls (ns).
-- @column allocation_ns Time of the gap it spent in allocation and free calls (ns).
-- @column launch_ns Time of the gap it spent in other CUDA calls (ns).
-- @column host_ns Time of the gap it spent outside CUDA calls (ns).
-- @column cause uvm, gpu-side, sync, allocation, launch, host or other.
WITH gaps AS (
    SELECT t.device_id, t.prev_end_ns AS gap_start_ns, t.start_ns AS gap_end_ns, t.start_ns - t.prev_end_ns AS gap_ns,
           CASE WHEN t.is_graph THEN 'graph' WHEN t.is_compute THEN 'kernel' WHEN t.is_memset THEN 'memset'
                ELSE 'memcpy' END AS next_kind,
           t.is_uvm AS next_is_uvm, t.pid, t.global_tid, t.api_start_ns, t.api_end_ns, t.follows_sync,
           t.sync_return_ns
    FROM _timeline t
    WHERE t.start_ns > t.prev_end_ns
),
calls AS (
    SELECT a.global_tid, a.start_ns, a.end_ns, c.api_class,
           -- a call that starts before an earlier call of the thread returned (never seen in real exports,
           -- but possible for nested driver calls) only counts from that return, so no time counts twice
           greatest(a.start_ns, coalesce(max(a.end_ns) OVER (PARTITION BY a.global_tid ORDER BY a.start_ns, a.end_ns
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), a.start_ns)) AS s
    FROM api_calls a JOIN _api_classes c ON c.name_id = a.name_id
    WHERE a.global_tid IN (SELECT DISTINCT global_tid FROM gaps WHERE global_tid IS NOT NULL)
),
running AS (
    -- per thread, time spent in each class of call before each call started
    SELECT global_tid, s AS start_ns, greatest(end_ns, s) AS end_ns, api_class,
           sum(greatest(end_ns - s, 0)) OVER w - greatest(end_ns - s, 0) AS api_before,
           sum(CASE WHEN api_class = 'allocation' THEN greatest(end_ns - s, 0) ELSE 0 END) OVER w
               - CASE WHEN api_class = 'allocation' THEN greatest(end_ns - s, 0) ELSE 0 END AS alloc_before,
           sum(CASE WHEN api_class = 'sync' THEN greatest(end_ns - s, 0) ELSE 0 END) OVER w
               - CASE WHEN api_class = 'sync' THEN greatest(end_ns - s, 0) ELSE 0 END AS sync_before
    FROM calls
    WINDOW w AS (PARTITION BY global_tid ORDER BY s, end_ns ROWS UNBOUNDED PRECEDING)
),
at_start AS (
    SELECT g.*,
           coalesce(r.api_before + least(greatest(g.gap_start_ns - r.start_ns, 0), r.end_ns - r.start_ns), 0) AS api0,
           coalesce(r.alloc_before + CASE WHEN r.api_class = 'allocation'
                    THEN least(greatest(g.gap_start_ns - r.start_ns, 0), r.end_ns - r.start_ns) ELSE 0 END, 0) AS alloc0,
           coalesce(r.sync_before + CASE WHEN r.api_class = 'sync'
                    THEN least(greatest(g.gap_start_ns - r.start_ns, 0), r.end_ns - r.start_ns) ELSE 0 END, 0) AS sync0
    FROM gaps g ASOF LEFT JOIN running r ON r.global_tid = g.global_tid AND r.start_ns <= g.gap_start_ns
),
at_end AS (
    SELECT g.*,
           coalesce(r.api_before + least(greatest(g.gap_end_ns - r.start_ns, 0), r.end_ns - r.start_ns), 0) - g.api0
               AS api_ns,
           coalesce(r.alloc_before + CASE WHEN r.api_class = 'allocation'
                    THEN least(greatest(g.gap_end_ns - r.start_ns, 0), r.end_ns - r.start_ns) ELSE 0 END, 0) - g.alloc0
               AS allocation_ns,
           coalesce(r.sync_before + CASE WHEN r.api_class = 'sync'
                    THEN least(greatest(g.gap_end_ns - r.start_ns, 0), r.end_ns - r.start_ns) ELSE 0 END, 0) - g.sync0
               AS sync_ns
    FROM at_start g ASOF LEFT JOIN running r ON r.global_tid = g.global_tid AND r.start_ns <= g.gap_end_ns
)
SELECT device_id, gap_start_ns, gap_end_ns, gap_ns, next_kind, next_is_uvm, pid, global_tid,
       sync_ns, allocation_ns, api_ns - allocation_ns - sync_ns AS launch_ns, gap_ns - api_ns AS host_ns,
       CASE WHEN next_is_uvm THEN 'uvm'
            WHEN api_end_ns <= gap_start_ns THEN CASE WHEN gap_ns <= ${gpu_side_max_gap_ns} THEN 'gpu-side' ELSE 'other' END
            WHEN follows_sync AND coalesce(api_start_ns - sync_return_ns, 0) < ${host_work_min_ns} THEN 'sync'
            WHEN global_tid IS NULL OR api_end_ns IS NULL THEN 'other'
            WHEN allocation_ns >= ${allocation_min_share} * gap_ns THEN 'allocation'
            WHEN sync_ns >= 0.5 * gap_ns THEN 'sync'
            WHEN gap_ns - api_ns < ${host_work_min_ns} OR api_ns >= gap_ns - api_ns THEN 'launch'
            ELSE 'host' END AS cause
FROM at_end
