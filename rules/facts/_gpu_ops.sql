-- @fact _gpu_ops
-- @doc Every interval of GPU work: kernels, CUDA-graph replays (graph trace mode), copies, memsets.
-- @whole-run
-- @needs _kernel_classes
-- @column device_id CUDA device index.
-- @column start_ns Start (ns).
-- @column end_ns End (ns).
-- @column kind kernel, graph, memcpy or memset.
-- @column pid Process that issued it.
-- @column correlation_id Correlation id of the issuing API call.
-- @column stream_id CUDA stream.
-- @column is_uvm True for unified-memory page migrations.
-- @column is_comm True for communication kernels: the class communication (_kernel_classes, rules/vocabulary/operation_classes.yaml).
-- @column name_id The kernel's name id (kernels.name_id); NULL for graph replays, copies and memsets.
-- Kernels are matched on the integer id of their name, not its text.
WITH comm_names AS (SELECT name_id FROM _kernel_classes WHERE op_class = 'communication')
SELECT device_id, start_ns, end_ns, 'kernel' AS kind, pid, correlation_id, stream_id, false AS is_uvm,
       coalesce(name_id IN (SELECT name_id FROM comm_names), false) AS is_comm, name_id
FROM _kernels_by_id WHERE end_ns >= start_ns AND device_id IS NOT NULL
UNION ALL
SELECT device_id, start_ns, end_ns, 'graph', pid, correlation_id, stream_id, false, false, NULL
FROM graph_launches WHERE end_ns >= start_ns AND device_id IS NOT NULL
UNION ALL
SELECT device_id, start_ns, end_ns, 'memcpy', pid, correlation_id, stream_id, coalesce(is_uvm, false), false, NULL
FROM memcpys WHERE end_ns >= start_ns AND device_id IS NOT NULL
UNION ALL
SELECT device_id, start_ns, end_ns, 'memset', pid, correlation_id, stream_id, false, false, NULL
FROM memsets WHERE end_ns >= start_ns AND device_id IS NOT NULL
