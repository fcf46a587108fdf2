-- @fact _ordered_ops
-- @materialize
-- @doc GPU operations per device in start order, on two timelines: 'all' (every kind of GPU work) and
-- @doc 'compute' (kernels and graph replays). prev_end_ns is the latest end of any earlier operation of
-- @doc the same timeline, so start_ns - prev_end_ns > 0 is an idle gap before this operation.
-- @needs _gpu_ops
-- @column scope 'all' or 'compute'.
-- @column device_id CUDA device index.
-- @column start_ns Start (ns).
-- @column end_ns End (ns).
-- @column kind kernel, graph, memcpy or memset.
-- @column pid Issuing process.
-- @column correlation_id Correlation id of the issuing call.
-- @column stream_id CUDA stream.
-- @column is_uvm True for unified-memory page migrations.
-- @column prev_end_ns Latest end among earlier operations on the same device and timeline (NULL for the first).
WITH scoped AS (
    SELECT 'all' AS scope, * FROM _gpu_ops
    UNION ALL
    SELECT 'compute', * FROM _gpu_ops WHERE kind IN ('kernel', 'graph')
)
SELECT scope, device_id, start_ns, end_ns, kind, pid, correlation_id, stream_id, is_uvm,
       max(end_ns) OVER (PARTITION BY scope, device_id ORDER BY start_ns, end_ns
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
FROM scoped
