-- @fact worst_offenders
-- @doc The individual worst events, each with the moment it started, so it can be found on the Nsight Systems
-- @doc timeline: the worst_per_kind longest idle gaps of each GPU (with their cause, _idle_gaps), and over the
-- @doc whole capture the worst_per_kind longest copies, blocking synchronisations (_sync_calls: explicit
-- @doc synchronisations and synchronous copies and memsets) and other CUDA API calls. Times are the export's own:
-- @doc nanoseconds since the start of the profiling session, the origin of the timeline the Nsight Systems GUI
-- @doc and `nsys stats` traces show. No kind sorts all its events: each keeps its N longest first.
-- @report
-- @needs _idle_gaps _issuing_calls _sync_calls _api_classes
-- @requires kernels|graph_launches|memcpys|memsets|api_calls
-- @param worst_per_kind 5 range 1 inf
-- @column kind idle_gap, copy, sync or api_call.
-- @column rank 1 for the longest of its kind (of its GPU for idle gaps).
-- @column device_id CUDA device index (NULL for synchronisations and API calls, which run on a CPU thread).
-- @column name What happened: for an idle gap the kind of operation that ended it (kernel, graph, memcpy or memset), for a copy its direction and memory ('HtoD pageable→device'), else the API name.
-- @column cause For an idle gap its cause (uvm, gpu-side, sync, allocation, launch, host or other; _idle_gaps), else NULL.
-- @column bytes Bytes copied (copies only).
-- @column start_ns When it started (ns on the export's timeline: since the start of the profiling session).
-- @column start_s start_ns in seconds, the time the Nsight Systems timeline shows.
-- @column dur_ns How long it lasted (ns).
-- @column pid Process of the thread involved (for an idle gap and a copy: the thread that issued the next or the copying operation; NULL when its call is not in the capture).
-- @column tid Thread id of that thread.
-- @check kind accepted_values idle_gap copy sync api_call
-- @check rank non_negative
-- @check start_ns non_negative
-- @check dur_ns non_negative
-- The N longest gaps of a device are those at least as long as its N-th longest (max(x, N) keeps the N largest
-- values without sorting); only they are ranked.
WITH cut AS (
    SELECT device_id, list_min(max(gap_ns, ${worst_per_kind})) AS min_gap_ns FROM _idle_gaps GROUP BY device_id
),
gaps AS (
    SELECT g.device_id, g.gap_start_ns AS start_ns, g.gap_ns AS dur_ns, g.next_kind, g.cause, g.pid, g.global_tid
    FROM _idle_gaps g JOIN cut c ON c.device_id = g.device_id AND g.gap_ns >= c.min_gap_ns
),
copies AS (
    SELECT device_id, start_ns, dur_ns, pid, correlation_id, bytes,
           copy_kind || ' ' || src_mem || '→' || dst_mem AS name
    FROM memcpys ORDER BY dur_ns DESC, start_ns LIMIT ${worst_per_kind}
),
syncs AS (
    SELECT pid, global_tid, start_ns, end_ns - start_ns AS dur_ns, name
    FROM _sync_calls WHERE kind IN ('sync', 'sync_copy')
    ORDER BY dur_ns DESC, start_ns LIMIT ${worst_per_kind}
),
calls AS (
    SELECT pid, tid, start_ns, dur_ns, name_id
    FROM _api_calls_by_id a ANTI JOIN (SELECT name_id FROM _api_classes WHERE api_class = 'sync') s USING (name_id)
    ORDER BY dur_ns DESC, start_ns LIMIT ${worst_per_kind}
),
offenders AS (
    SELECT 'idle_gap' AS kind, 1 AS kind_order,
           row_number() OVER (PARTITION BY device_id ORDER BY dur_ns DESC, start_ns) AS rank, device_id,
           next_kind AS name, cause, NULL::BIGINT AS bytes, start_ns, dur_ns,
           pid, global_tid & 16777215 AS tid
    FROM gaps
    UNION ALL
    SELECT 'copy', 2, row_number() OVER (ORDER BY c.dur_ns DESC, c.start_ns), c.device_id, c.name, NULL, c.bytes,
           c.start_ns, c.dur_ns, c.pid, i.global_tid & 16777215
    FROM copies c LEFT JOIN _issuing_calls i ON i.pid = c.pid AND i.correlation_id = c.correlation_id
    UNION ALL
    SELECT 'sync', 3, row_number() OVER (ORDER BY dur_ns DESC, start_ns), NULL, name, NULL, NULL, start_ns, dur_ns,
           pid, global_tid & 16777215
    FROM syncs
    UNION ALL
    SELECT 'api_call', 4, row_number() OVER (ORDER BY c.dur_ns DESC, c.start_ns), NULL, n.name, NULL, NULL,
           c.start_ns, c.dur_ns, c.pid, c.tid
    FROM calls c JOIN _api_classes n USING (name_id)
)
SELECT kind, rank, device_id, name, cause, bytes, start_ns, start_ns / 1e9 AS start_s, dur_ns, pid, tid
FROM offenders
WHERE rank <= ${worst_per_kind}
ORDER BY kind_order, CASE WHEN kind = 'idle_gap' THEN device_id END, rank
