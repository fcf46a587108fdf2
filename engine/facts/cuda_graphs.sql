-- @fact cuda_graphs
-- @doc One row for the profile: how much GPU work was launched through CUDA graphs and how the capture
-- @doc traced them. In graph trace mode (`--cuda-graph-trace=graph`, nsys's default) each replay is one
-- @doc opaque interval and its kernels are missing from the kernel table; node mode shows every kernel.
-- @requires kernels|graph_launches
-- @column kernel_count Kernels in the kernel table.
-- @column graph_kernel_count Kernels that ran as CUDA-graph nodes (node trace mode).
-- @column graph_kernel_share graph_kernel_count / kernel_count (0-1).
-- @column graph_replays Graph replays traced as opaque intervals (graph trace mode).
-- @column graph_replay_ns GPU time of those replays (ns).
-- @column graph_launch_calls cudaGraphLaunch / cuGraphLaunch calls.
-- @column trace_mode 'graph', 'node' or NULL, from the data first, else from the capture options.
-- @column trace_setting Graph-trace option recorded by the capture, if any.
-- @check kernel_count not_null
-- @check kernel_count non_negative
-- @check graph_kernel_count non_negative
-- @check graph_kernel_share range 0 1
-- @check graph_replays non_negative
-- @check trace_mode accepted_values graph node
SELECT (SELECT count(*) FROM kernels) AS kernel_count,
       (SELECT count(*) FROM kernels WHERE graph_node_id IS NOT NULL) AS graph_kernel_count,
       CASE WHEN (SELECT count(*) FROM kernels) > 0
            THEN (SELECT count(*) FROM kernels WHERE graph_node_id IS NOT NULL) / (SELECT count(*) FROM kernels)
            ELSE 0 END AS graph_kernel_share,
       (SELECT count(*) FROM graph_launches) AS graph_replays,
       (SELECT coalesce(sum(dur_ns), 0) FROM graph_launches) AS graph_replay_ns,
       (SELECT count(*) FROM api_calls WHERE name LIKE 'cudaGraphLaunch%' OR name LIKE 'cuGraphLaunch%')
           AS graph_launch_calls,
       (SELECT value FROM profile_info WHERE key = 'graph_trace_mode') AS trace_mode,
       (SELECT value FROM profile_info WHERE key = 'graph_trace_setting') AS trace_setting
