-- @fact cuda_graphs
-- @doc One row for the profile: how much GPU work was launched through CUDA graphs and how the capture
-- @doc traced them. In graph trace mode (`--cuda-graph-trace=graph`, nsys's default) each replay is one
-- @doc opaque interval and its kernels are missing from the kernel table; node mode shows every kernel.
-- @report
-- @needs _api_classes
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
-- One aggregate per source table: scalar subqueries, one per column, would each join the names back into
-- the kernels and calls, and planning those joins is most of the cost on a short capture.
WITH k AS (SELECT count(*) AS n, count(graph_node_id) AS graph_n FROM _kernels_by_id),
g AS (SELECT count(*) AS n, coalesce(sum(dur_ns), 0) AS ns FROM graph_launches),
launches AS (
    SELECT count(*) AS n FROM _api_calls_by_id
    WHERE name_id IN (SELECT name_id FROM _api_classes WHERE api_family = 'graph_launch')
),
info AS (SELECT any_value(value) FILTER (WHERE key = 'graph_trace_mode') AS mode,
                any_value(value) FILTER (WHERE key = 'graph_trace_setting') AS setting
         FROM profile_info)
SELECT k.n AS kernel_count, k.graph_n AS graph_kernel_count,
       CASE WHEN k.n > 0 THEN k.graph_n / k.n ELSE 0 END AS graph_kernel_share,
       g.n AS graph_replays, g.ns AS graph_replay_ns, launches.n AS graph_launch_calls,
       info.mode AS trace_mode, info.setting AS trace_setting
FROM k, g, launches, info
