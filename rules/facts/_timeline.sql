-- @fact _timeline
-- @whole-run
-- @materialize
-- @doc Every GPU operation of each device in start order, with the latest end among the earlier operations
-- @doc of the device, kept four times: over all work, over compute (kernels and graph replays), over
-- @doc communication kernels and over the other compute. One sort of the operations feeds utilisation, gaps,
-- @doc communication overlap and the timeline: start_ns - prev_end_ns > 0 is an idle gap before the operation,
-- @doc and greatest(end_ns - greatest(start_ns, prev_end_ns), 0) is the time the operation adds to the union
-- @doc of busy intervals (those pieces are disjoint, so their sum is the busy time). The same sort carries
-- @doc the latest blocking call (synchronisation or synchronous copy) that returned before each operation,
-- @doc from any process that used the device, and each operation carries the CPU call that issued it
-- @doc (joined after the sort, so the sort stays narrow). A stretch in which the server was idle (_server_idle)
-- @doc counts as one more earlier operation on every device, so no idle gap spans it: the first operation
-- @doc after it has prev_end_ns at the stretch's end.
-- @needs _gpu_ops _issuing_calls _sync_calls _server_idle _phase_stretches
-- @param sync_min_wait_ns 5000
-- @column device_id CUDA device index.
-- @column start_ns Start (ns).
-- @column end_ns End (ns).
-- @column is_compute True for kernels and graph replays.
-- @column is_graph True for CUDA-graph replays (graph trace mode).
-- @column is_memset True for memsets (copies: not compute and not memset).
-- @column is_uvm True for unified-memory page migrations.
-- @column is_comm True for collective-communication kernels.
-- @column pid Issuing process.
-- @column correlation_id Correlation id of the issuing call.
-- @column stream_id CUDA stream.
-- @column prev_end_ns Latest end of any earlier operation on the device (NULL for the first).
-- @column prev_compute_end_ns Latest end of an earlier kernel or graph replay.
-- @column prev_comm_end_ns Latest end of an earlier communication kernel.
-- @column prev_noncomm_end_ns Latest end of an earlier kernel or graph replay that is not communication.
-- @column follows_sync The idle gap before this operation follows a blocking call: the host had waited sync_min_wait_ns in it when the GPU went idle, and it returned before the operation started.
-- @column sync_return_ns When the latest blocking call that returned before this operation returned (ns).
-- @column global_tid Thread of the issuing call (NULL when no call matched).
-- @column api_name_id StringIds id of the issuing call's API name (see api_calls.name_id).
-- @column api_start_ns When the issuing call started (ns).
-- @column api_end_ns When the issuing call returned (ns).
-- @column phase Inference phase of the issuing call (_phase_stretches, as _call_phases gives it), NULL when no phase range claims it.
-- @column name_id The kernel's name id (kernels.name_id); NULL for graph replays, copies and memsets.
WITH blocking AS (SELECT pid, start_ns, end_ns FROM _sync_calls WHERE kind IN ('sync', 'sync_copy')),
-- When several blocking calls return at the same nanosecond, the one that started first (the longest wait).
returns AS (SELECT end_ns, min(start_ns) AS start_ns FROM blocking GROUP BY end_ns),
ops AS (
    -- Flags, not the kind text, travel through the sort: cheaper to move and to test in every FILTER.
    SELECT device_id, start_ns, end_ns, kind IN ('kernel', 'graph') AS is_compute, kind = 'graph' AS is_graph,
           kind = 'memset' AS is_memset, false AS is_sync, false AS is_idle, pid, correlation_id, stream_id, is_uvm,
           is_comm, name_id
    FROM _gpu_ops
    UNION ALL
    -- Blocking calls ride along as marker rows at the moment they returned (end_ns NULL keeps them out of
    -- every running maximum), on each device their process used; they are dropped after the sort.
    SELECT u.device_id, b.end_ns, NULL, false, false, false, true, false, b.pid, NULL, NULL, false, false, NULL
    FROM blocking b JOIN (SELECT DISTINCT pid, device_id FROM _gpu_ops) u ON u.pid = b.pid
    UNION ALL
    -- The server's idle stretches, as marker rows on every device that had worked before them (so no device's
    -- first operation gains a gap); dropped after the sort too.
    SELECT d.device_id, i.start_ns, i.end_ns, false, false, false, false, true, NULL, NULL, NULL, false, false, NULL
    FROM _server_idle i JOIN (SELECT device_id, min(start_ns) AS first_ns FROM _gpu_ops GROUP BY device_id) d
         ON i.start_ns >= d.first_ns
),
ordered AS (
    SELECT device_id, start_ns, end_ns, is_compute, is_graph, is_memset, is_sync, is_idle, pid, correlation_id,
           stream_id, is_uvm, is_comm, name_id,
           max(end_ns) OVER w AS prev_end_ns,
           max(end_ns) FILTER (WHERE is_comm OR is_idle) OVER w AS prev_comm_end_ns,
           max(end_ns) FILTER (WHERE (is_compute AND NOT is_comm) OR is_idle) OVER w AS prev_noncomm_end_ns,
           max(start_ns) FILTER (WHERE is_sync) OVER w AS last_sync_end_ns
    FROM ops
    -- NULLS FIRST: a call that returned at the very nanosecond an operation started counts as before it.
    WINDOW w AS (PARTITION BY device_id ORDER BY start_ns, end_ns NULLS FIRST
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
-- Each operation with the CPU call that issued it, and the bucket of that call's start for the phase lookup below (a
-- column before the join: as an expression in the ON clause DuckDB joins on the thread alone).
issued AS (
    SELECT o.*, l.global_tid, l.name_id AS api_name_id, l.api_start_ns, l.api_end_ns,
           (l.api_start_ns - w.origin_ns) // w.bucket_ns AS bucket
    FROM ordered o
    LEFT JOIN _issuing_calls l ON l.pid = o.pid AND l.correlation_id = o.correlation_id
    CROSS JOIN (SELECT any_value(origin_ns) AS origin_ns, any_value(bucket_ns) AS bucket_ns FROM _phase_stretches) w
    WHERE NOT o.is_sync AND NOT o.is_idle
)
SELECT o.device_id, o.start_ns, o.end_ns, o.is_compute, o.is_graph, o.is_memset, o.is_uvm, o.is_comm, o.pid,
       o.correlation_id, o.stream_id, o.prev_end_ns,
       -- communication kernels are compute, so the compute before an operation is the communication and the other
       -- compute before it: one running maximum fewer over the sort (greatest() skips a NULL)
       greatest(o.prev_comm_end_ns, o.prev_noncomm_end_ns) AS prev_compute_end_ns, o.prev_comm_end_ns,
       o.prev_noncomm_end_ns,
       coalesce(o.last_sync_end_ns >= o.prev_end_ns AND o.prev_end_ns - r.start_ns >= ${sync_min_wait_ns}, false)
           AS follows_sync,
       o.last_sync_end_ns AS sync_return_ns,
       o.global_tid, o.api_name_id, o.api_start_ns, o.api_end_ns, p.phase, o.name_id
FROM issued o
-- The phase of the issuing call rides along so each phase's operations and gaps are a filter, not a join
-- (engine/facts/scopes.py): the stretch of the call's thread its start falls in, found on the thread and bucket
-- against a table of a few rows per phase range, not of every call.
LEFT JOIN _phase_stretches p ON p.global_tid = o.global_tid AND p.bucket = o.bucket
                            AND o.api_start_ns >= p.start_ns AND o.api_start_ns <= p.end_ns
LEFT JOIN returns r ON r.end_ns = o.last_sync_end_ns
