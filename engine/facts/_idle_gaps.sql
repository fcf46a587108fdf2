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
-- @doc Time inside calls on the issuing thread is the overlap of the gap with the thread's calls, found by an
-- @doc equi-join on time buckets (each call and gap listed in every bucket it touches, an overlap counted in
-- @doc the bucket where it begins), so no sort of the calls or gaps is needed. A call that begins inside an
-- @doc earlier call of the same thread (nested driver calls) counts only from that call's return, so no time
-- @doc counts twice. The bucket width is the calls' span over their count (at least 1 us): each call and gap
-- @doc touches about two buckets, however long the capture.
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
-- @column phase Inference phase of the next operation (_timeline.phase): the phase the gap belongs to.
WITH gaps AS (
    SELECT t.device_id, t.prev_end_ns AS gap_start_ns, t.start_ns AS gap_end_ns, t.start_ns - t.prev_end_ns AS gap_ns,
           CASE WHEN t.is_graph THEN 'graph' WHEN t.is_compute THEN 'kernel' WHEN t.is_memset THEN 'memset'
                ELSE 'memcpy' END AS next_kind,
           t.is_uvm AS next_is_uvm, t.pid, t.global_tid, t.api_start_ns, t.api_end_ns, t.follows_sync,
           t.sync_return_ns, t.phase
    FROM _timeline t
    WHERE t.start_ns > t.prev_end_ns
),
-- The calls of the threads that issued a gap's next operation; calls with the same thread, start and end count
-- once (as one of their classes).
calls AS (
    SELECT a.global_tid, a.start_ns, a.end_ns, min(c.api_class) AS api_class
    FROM api_calls a JOIN _api_classes c ON c.name_id = a.name_id
    WHERE a.global_tid IN (SELECT DISTINCT global_tid FROM gaps WHERE global_tid IS NOT NULL)
      AND a.end_ns > a.start_ns
    GROUP BY a.global_tid, a.start_ns, a.end_ns
),
width AS (SELECT greatest((max(end_ns) - min(start_ns)) // greatest(count(*), 1), 1000) AS b FROM calls),
call_buckets AS (
    SELECT c.global_tid, c.start_ns, c.end_ns, c.api_class,
           unnest(range(c.start_ns // w.b, (c.end_ns - 1) // w.b + 1)) AS bucket
    FROM calls c CROSS JOIN width w
),
-- A call that starts inside an earlier call of its thread (earlier: by start, then end) starts at the latest
-- such return instead; nested calls are rare, so this join finds few pairs.
nested AS (
    SELECT c.global_tid, c.start_ns, c.end_ns, max(o.end_ns) AS covered_until_ns
    FROM (SELECT c.*, c.start_ns // w.b AS bucket FROM calls c CROSS JOIN width w) c
    JOIN call_buckets o ON o.global_tid = c.global_tid AND o.bucket = c.bucket
    WHERE o.start_ns <= c.start_ns AND o.end_ns > c.start_ns AND (o.start_ns, o.end_ns) < (c.start_ns, c.end_ns)
    GROUP BY ALL
),
own AS (
    -- each call's own stretch: disjoint from every other call's of the thread
    SELECT b.global_tid, greatest(b.start_ns, coalesce(n.covered_until_ns, b.start_ns)) AS start_ns, b.end_ns,
           b.api_class, b.bucket
    FROM call_buckets b
    LEFT JOIN nested n ON n.global_tid = b.global_tid AND n.start_ns = b.start_ns AND n.end_ns = b.end_ns
    WHERE coalesce(n.covered_until_ns, b.start_ns) < b.end_ns
),
gap_buckets AS (
    SELECT g.device_id, g.gap_end_ns, g.gap_start_ns, g.global_tid,
           unnest(range(g.gap_start_ns // w.b, (g.gap_end_ns - 1) // w.b + 1)) AS bucket
    FROM gaps g CROSS JOIN width w
    WHERE g.global_tid IS NOT NULL
),
inside AS (
    -- (device_id, gap_end_ns) names a gap: two operations of a device that start together cannot both end one
    SELECT g.device_id, g.gap_end_ns,
           sum(least(c.end_ns, g.gap_end_ns) - greatest(c.start_ns, g.gap_start_ns)) AS api_ns,
           coalesce(sum(least(c.end_ns, g.gap_end_ns) - greatest(c.start_ns, g.gap_start_ns))
                    FILTER (WHERE c.api_class = 'allocation'), 0) AS allocation_ns,
           coalesce(sum(least(c.end_ns, g.gap_end_ns) - greatest(c.start_ns, g.gap_start_ns))
                    FILTER (WHERE c.api_class = 'sync'), 0) AS sync_ns
    FROM gap_buckets g CROSS JOIN width w
    JOIN own c ON c.global_tid = g.global_tid AND c.bucket = g.bucket
    WHERE c.start_ns < g.gap_end_ns AND c.end_ns > g.gap_start_ns
      AND greatest(c.start_ns, g.gap_start_ns) // w.b = g.bucket
    GROUP BY g.device_id, g.gap_end_ns
),
at_end AS (
    SELECT g.*, coalesce(i.api_ns, 0) AS api_ns, coalesce(i.allocation_ns, 0) AS allocation_ns,
           coalesce(i.sync_ns, 0) AS sync_ns
    FROM gaps g LEFT JOIN inside i ON i.device_id = g.device_id AND i.gap_end_ns = g.gap_end_ns
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
            ELSE 'host' END AS cause,
       phase
FROM at_end
