-- @fact _idle_gaps
-- @doc One row per idle gap on a device's 'all' timeline (nothing running: no kernel, graph replay,
-- @doc copy or memset), with its most likely cause. A gap is 'sync' when a blocking call of a process
-- @doc that used the device began while the GPU was still busy and returned inside the gap (the host waited for the
-- @doc GPU for at least sync_min_wait_ns (a parameter of _timeline) before it went idle: a real wait, not a call that found the
-- @doc GPU already done); 'uvm' when the next operation is a unified-memory migration (page
-- @doc faults drive the transfers, not launches); 'host' when the call that issued the next operation was still
-- @doc running when the GPU went idle (the work was not queued in time: launch overhead); 'other'
-- @doc otherwise (dependencies, events, work queued earlier, or uncorrelated activity). The blocking call is the
-- @doc latest one that returned before the next operation (_timeline).
-- @needs _timeline
-- @column device_id CUDA device index.
-- @column gap_start_ns When the GPU went idle (ns).
-- @column gap_end_ns When the next operation started (ns).
-- @column gap_ns Idle time (ns).
-- @column next_kind Kind of the operation that ended the gap.
-- @column next_is_uvm The next operation is a unified-memory migration.
-- @column cause sync, uvm, host or other.
SELECT device_id, prev_end_ns AS gap_start_ns, start_ns AS gap_end_ns, start_ns - prev_end_ns AS gap_ns,
       CASE WHEN is_graph THEN 'graph' WHEN is_compute THEN 'kernel' WHEN is_memset THEN 'memset' ELSE 'memcpy' END
           AS next_kind,
       is_uvm AS next_is_uvm,
       CASE WHEN follows_sync THEN 'sync'
            WHEN is_uvm THEN 'uvm'
            WHEN api_end_ns >= prev_end_ns THEN 'host'
            ELSE 'other' END AS cause
FROM _timeline
WHERE start_ns > prev_end_ns
