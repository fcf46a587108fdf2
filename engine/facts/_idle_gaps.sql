-- @fact _idle_gaps
-- @materialize
-- @doc One row per idle gap on a device's 'all' timeline (nothing running: no kernel, graph replay,
-- @doc copy or memset), with its most likely cause. A gap is 'sync' when a blocking call of the issuing
-- @doc process began while the GPU was still busy and returned inside the gap (the host waited for the
-- @doc GPU for at least sync_min_wait_ns before it went idle: a real wait, not a call that found the
-- @doc GPU already done); 'uvm' when the next operation is a unified-memory migration (page
-- @doc faults drive the transfers, not launches); 'host' when the call that issued the next operation was still
-- @doc running when the GPU went idle (the work was not queued in time: launch overhead); 'other'
-- @doc otherwise (dependencies, events, work queued earlier, or uncorrelated activity).
-- @needs _ordered_ops _sync_calls _issuing_calls
-- @param sync_min_wait_ns 5000
-- @column device_id CUDA device index.
-- @column gap_start_ns When the GPU went idle (ns).
-- @column gap_end_ns When the next operation started (ns).
-- @column gap_ns Idle time (ns).
-- @column next_kind Kind of the operation that ended the gap.
-- @column next_is_uvm The next operation is a unified-memory migration.
-- @column cause sync, uvm, host or other.
WITH gaps AS (
    SELECT device_id, prev_end_ns AS gap_start_ns, start_ns AS gap_end_ns, start_ns - prev_end_ns AS gap_ns,
           kind AS next_kind, is_uvm AS next_is_uvm, pid, correlation_id
    FROM _ordered_ops
    WHERE scope = 'all' AND prev_end_ns IS NOT NULL AND start_ns > prev_end_ns
),
blocking AS (
    SELECT pid, start_ns, end_ns FROM _sync_calls WHERE kind IN ('sync', 'sync_copy')
),
with_sync AS (
    SELECT g.*, b.start_ns AS sync_start_ns, b.end_ns AS sync_end_ns
    FROM gaps g ASOF LEFT JOIN blocking b ON g.pid = b.pid AND g.gap_end_ns >= b.end_ns
)
SELECT w.device_id, w.gap_start_ns, w.gap_end_ns, w.gap_ns, w.next_kind, w.next_is_uvm,
       CASE WHEN w.sync_end_ns >= w.gap_start_ns
                 AND w.gap_start_ns - w.sync_start_ns >= ${sync_min_wait_ns} THEN 'sync'
            WHEN w.next_is_uvm THEN 'uvm'
            WHEN l.api_end_ns >= w.gap_start_ns THEN 'host'
            ELSE 'other' END AS cause
FROM with_sync w
LEFT JOIN _issuing_calls l ON l.pid = w.pid AND l.correlation_id = w.correlation_id
