-- @fact _gpu_ops
-- @doc Every interval of GPU work: kernels, CUDA-graph replays (graph trace mode), copies, memsets.
-- @whole-run
-- @column device_id CUDA device index.
-- @column start_ns Start (ns).
-- @column end_ns End (ns).
-- @column kind kernel, graph, memcpy or memset.
-- @column pid Process that issued it.
-- @column correlation_id Correlation id of the issuing API call.
-- @column stream_id CUDA stream.
-- @column is_uvm True for unified-memory page migrations.
-- @column is_comm True for communication kernels: the class communication of op_class_of() (rules/operation_classes.yaml).
-- Each distinct kernel name is matched once, and kernels are matched on its integer id, not its text. The
-- name is an aggregate (not a DISTINCT column) so that DuckDB cannot push the regular expression below the
-- grouping, where it would run once per kernel.
WITH comm_names AS (
    SELECT name_id FROM (SELECT name_id, any_value(name) AS name FROM kernels GROUP BY name_id)
    WHERE op_class_of(name) = 'communication'
)
SELECT device_id, start_ns, end_ns, 'kernel' AS kind, pid, correlation_id, stream_id, false AS is_uvm,
       coalesce(name_id IN (SELECT name_id FROM comm_names), false) AS is_comm
FROM kernels WHERE end_ns >= start_ns AND device_id IS NOT NULL
UNION ALL
SELECT device_id, start_ns, end_ns, 'graph', pid, correlation_id, stream_id, false, false
FROM graph_launches WHERE end_ns >= start_ns AND device_id IS NOT NULL
UNION ALL
SELECT device_id, start_ns, end_ns, 'memcpy', pid, correlation_id, stream_id, coalesce(is_uvm, false), false
FROM memcpys WHERE end_ns >= start_ns AND device_id IS NOT NULL
UNION ALL
SELECT device_id, start_ns, end_ns, 'memset', pid, correlation_id, stream_id, false, false
FROM memsets WHERE end_ns >= start_ns AND device_id IS NOT NULL
