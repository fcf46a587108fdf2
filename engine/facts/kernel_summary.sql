-- @fact kernel_summary
-- @doc One row per kernel name (demangled), heaviest first: count and GPU time, comparable with
-- @doc `nsys stats --report cuda_gpu_kern_sum` summed per name.
-- @requires kernels
-- @column name Demangled kernel name.
-- @column short_name Base name.
-- @column count Executions.
-- @column total_ns Sum of durations (ns).
-- @column mean_ns Mean duration (ns).
-- @column p50_ns Median duration (ns).
-- @column min_ns Shortest (ns).
-- @column max_ns Longest (ns).
-- @column share_of_kernel_time total_ns / all kernel time (0-1).
-- @column is_communication NCCL or other collective-communication kernel.
SELECT name, any_value(short_name) AS short_name, count(*) AS count, sum(dur_ns) AS total_ns,
       avg(dur_ns) AS mean_ns, quantile_cont(dur_ns, 0.5) AS p50_ns, min(dur_ns) AS min_ns, max(dur_ns) AS max_ns,
       sum(dur_ns) / nullif(any_value(t.total_ns), 0) AS share_of_kernel_time,
       bool_or(regexp_matches(name, '(?i)nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device_reduce|alltoall'))
           AS is_communication
FROM kernels CROSS JOIN (SELECT sum(dur_ns) AS total_ns FROM kernels) t
GROUP BY name
ORDER BY total_ns DESC, name
