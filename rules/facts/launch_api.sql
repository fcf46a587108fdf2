-- @fact launch_api
-- @doc One row per launch API (cudaLaunchKernel, cuLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch ...):
-- @doc call count and CPU latency, and the queue delay from the call's start to the start of the GPU work
-- @doc it launched (matched on pid and correlation id). A median above 20 µs is slow (the slow-launch-calls
-- @doc rule, docs/verdict.md "Rules and the verdict"); the mean is kept, but a few calls that block for milliseconds
-- @doc (a full launch queue, lazy module loading) inflate it.
-- @report
-- @per-phase
-- @needs _timeline _api_classes gpu_utilization
-- @requires api_calls
-- @column name Launch API name.
-- @column call_count Calls.
-- @column total_ns CPU time inside the calls (ns).
-- @column mean_ns Mean call duration (ns).
-- @column p50_ns Median call duration (ns).
-- @column p99_ns 99th percentile call duration (ns).
-- @column launched_ops GPU operations matched to these calls.
-- @column mean_queue_ns Mean delay from call start to GPU start (ns).
-- @column p50_queue_ns Median delay from call start to GPU start (ns).
-- @column p99_queue_ns 99th percentile delay from call start to GPU start (ns).
-- @column launch_idle_fraction GPU idle time while the host issued work (_idle_gaps cause 'launch') over the used GPUs' windows, the same on every row: what launch cost takes from the GPUs (0-1).
-- @check name not_null
-- @check name unique
-- @check call_count non_negative
-- @check total_ns non_negative
-- @check launched_ops non_negative
-- @check launch_idle_fraction range 0 1
-- Launch APIs are recognised once per name id (_api_classes: launches and host functions enqueued on a stream)
-- and then matched on the integer id.
WITH launch_ids AS (
    SELECT name_id, name, api_family IN ('graph_launch', 'multi_device_launch') AS multi_op
    FROM _api_classes
    WHERE is_launch OR api_family = 'host_function_launch'
),
calls AS (
    SELECT i.name, count(*) AS call_count, sum(a.dur_ns) AS total_ns, avg(a.dur_ns) AS mean_ns,
           quantile_cont(a.dur_ns, [0.5, 0.99]) AS q
    FROM _api_calls_by_id a JOIN launch_ids i ON i.name_id = a.name_id
    GROUP BY i.name
),
-- The GPU work of each call (_timeline carries the issuing call): its first operation starts the queue delay.
-- A kernel launch issues exactly one kernel, so only graph launches and multi-device launches (which issue
-- several operations) are grouped per call; the millions of plain launches are taken as they are.
per_op AS (
    SELECT api_name_id, pid, correlation_id, start_ns - api_start_ns AS queue_ns
    FROM _timeline WHERE is_compute AND api_name_id IN (SELECT name_id FROM launch_ids)
),
per_call AS (
    SELECT i.name, o.queue_ns, 1 AS ops FROM per_op o JOIN launch_ids i ON i.name_id = o.api_name_id
    WHERE NOT i.multi_op
    UNION ALL
    SELECT i.name, min(o.queue_ns), count(*) FROM per_op o JOIN launch_ids i ON i.name_id = o.api_name_id
    WHERE i.multi_op GROUP BY i.name, o.pid, o.correlation_id
),
queues AS (
    SELECT name, sum(ops) AS ops, avg(queue_ns) AS mean_queue_ns, quantile_cont(queue_ns, [0.5, 0.99]) AS q
    FROM per_call GROUP BY name
)
SELECT c.name, c.call_count, c.total_ns, c.mean_ns, c.q[1] AS p50_ns, c.q[2] AS p99_ns,
       coalesce(u.ops, 0) AS launched_ops, u.mean_queue_ns, u.q[1] AS p50_queue_ns, u.q[2] AS p99_queue_ns,
       (SELECT sum(idle_launch_ns) / nullif(sum(window_ns), 0) FROM gpu_utilization) AS launch_idle_fraction
FROM calls c LEFT JOIN queues u USING (name)
ORDER BY c.call_count DESC, c.name
