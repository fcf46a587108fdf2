-- @fact launch_api
-- @doc One row per launch API (cudaLaunchKernel, cuLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch ...):
-- @doc call count and CPU latency, and the queue delay from the call's start to the start of the GPU work
-- @doc it launched (matched on pid and correlation id). The seed article's typical cudaLaunchKernel cost
-- @doc is 5-20 µs.
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
WITH launches AS (
    SELECT pid, correlation_id, name, start_ns, dur_ns FROM api_calls
    WHERE name IN ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cudaLaunchCooperativeKernel',
                   'cudaLaunchCooperativeKernelMultiDevice', 'cuLaunchKernel', 'cuLaunchKernelEx',
                   'cuLaunchCooperativeKernel', 'cudaGraphLaunch', 'cuGraphLaunch', 'cudaLaunchHostFunc')
       OR name LIKE 'cudaLaunchKernel%' OR name LIKE 'cuLaunchKernel%' OR name LIKE 'cudaGraphLaunch%'
       OR name LIKE 'cuGraphLaunch%'
),
first_op AS (
    SELECT pid, correlation_id, min(start_ns) AS gpu_start_ns, count(*) AS ops
    FROM (SELECT pid, correlation_id, start_ns FROM kernels
          UNION ALL SELECT pid, correlation_id, start_ns FROM graph_launches)
    GROUP BY pid, correlation_id
),
joined AS (
    SELECT l.name, l.dur_ns, f.ops, f.gpu_start_ns - l.start_ns AS queue_ns
    FROM launches l LEFT JOIN first_op f ON f.pid = l.pid AND f.correlation_id = l.correlation_id
)
SELECT name, count(*) AS call_count, sum(dur_ns) AS total_ns, avg(dur_ns) AS mean_ns,
       quantile_cont(dur_ns, 0.5) AS p50_ns, quantile_cont(dur_ns, 0.99) AS p99_ns,
       coalesce(sum(ops), 0) AS launched_ops,
       avg(queue_ns) AS mean_queue_ns, quantile_cont(queue_ns, 0.5) AS p50_queue_ns,
       quantile_cont(queue_ns, 0.99) AS p99_queue_ns
FROM joined GROUP BY name ORDER BY call_count DESC, name
