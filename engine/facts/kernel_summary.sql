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
-- @check name not_null
-- @check count non_negative
-- @check total_ns non_negative
-- @check min_ns non_negative
-- @check share_of_kernel_time range 0 1
-- @check is_communication not_null
-- Grouped on the integer name id (one per distinct name), the text is looked at once per group.
WITH per_name AS (
    SELECT name_id, any_value(name) AS name, any_value(short_name) AS short_name, count(*) AS count,
           sum(dur_ns) AS total_ns, avg(dur_ns) AS mean_ns, quantile_cont(dur_ns, 0.5) AS p50_ns,
           min(dur_ns) AS min_ns, max(dur_ns) AS max_ns
    FROM kernels GROUP BY name_id
)
SELECT name, short_name, count, total_ns, mean_ns, p50_ns, min_ns, max_ns,
       total_ns / nullif((SELECT sum(total_ns) FROM per_name), 0) AS share_of_kernel_time,
       coalesce(regexp_matches(name, '(?i)nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device_reduce|alltoall'),
                false) AS is_communication
FROM per_name
ORDER BY total_ns DESC, name
