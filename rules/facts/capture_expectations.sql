-- @fact capture_expectations
-- @doc One row: the GPUs and processes that did GPU work against what the run should have used
-- @doc (`diagnose profile --expect-gpus/--expect-ranks`, or facts.expected_gpus and facts.expected_ranks; 0: not
-- @doc known), and the processes that launched kernels none of which is in the capture: workers whose GPU
-- @doc activity nsys did not follow (forked without exec, vLLM's and SGLang's workers without
-- @doc --trace-fork-before-exec=true).
-- @param expected_gpus 0 range 0 inf
-- @param expected_ranks 0 range 0 inf
-- @needs _api_classes
-- @column used_gpus GPUs that ran kernels, copies, memsets or graph replays.
-- @column expected_gpus GPUs the run should have used (0: not known).
-- @column missing_gpus GPUs expected but without work in the capture (0 when not known).
-- @column gpu_processes Processes that ran kernels or graph replays.
-- @column expected_ranks Processes that should have run GPU work (0: not known).
-- @column missing_ranks Processes expected but without GPU work in the capture (0 when not known).
-- @column silent_processes Processes that called kernel or graph launches, none of whose kernels or replays is in the capture.
-- @column silent_launches Kernel and graph launch calls of those processes.
-- @column silent_names Those processes, e.g. 'python3 (pid 4242)', by launch calls.
-- @check used_gpus non_negative
-- @check missing_gpus non_negative
-- @check missing_ranks non_negative
-- @check silent_processes non_negative
-- Launch calls (_api_classes): a process that made them launched GPU work.
WITH launches AS (
    SELECT a.pid, count(*) AS n
    FROM _api_calls_by_id a JOIN _api_classes n USING (name_id)
    WHERE n.is_launch
    GROUP BY a.pid
),
working AS (
    SELECT pid FROM _kernels_by_id UNION SELECT pid FROM graph_launches
),
silent AS (
    SELECT l.pid, l.n, coalesce((SELECT max(p.name) FROM processes p WHERE p.pid = l.pid), 'process') AS name
    FROM launches l WHERE l.pid NOT IN (SELECT pid FROM working)
),
counts AS (
    SELECT (SELECT count(*) FROM devices WHERE used) AS used_gpus,
           (SELECT count(*) FROM working) AS gpu_processes
)
SELECT c.used_gpus,
       ${expected_gpus}::BIGINT AS expected_gpus,
       CASE WHEN ${expected_gpus} > c.used_gpus THEN ${expected_gpus} - c.used_gpus ELSE 0 END::BIGINT AS missing_gpus,
       c.gpu_processes,
       ${expected_ranks}::BIGINT AS expected_ranks,
       CASE WHEN ${expected_ranks} > c.gpu_processes THEN ${expected_ranks} - c.gpu_processes ELSE 0 END::BIGINT
           AS missing_ranks,
       (SELECT count(*) FROM silent) AS silent_processes,
       coalesce((SELECT sum(n) FROM silent), 0)::BIGINT AS silent_launches,
       (SELECT string_agg(name || ' (pid ' || pid || ')', ', ' ORDER BY n DESC, pid) FROM silent) AS silent_names
FROM counts c
