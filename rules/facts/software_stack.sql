-- @fact software_stack
-- @doc What software produced the GPU work, one row per stack with evidence: kernel-name namespaces
-- @doc (vllm::, sgl_kernel, tensorrt_llm, at::native, triton_, XLA fusions, cudf/rmm, PGI/NVHPC OpenACC
-- @doc and OpenMP-offload kernel naming), NVTX domains and range text, and process names, each matched by the
-- @doc `detect` patterns of rules/vocabulary/stacks.yaml (stack_of_kernel(), stack_of_nvtx(),
-- @doc stack_of_process(): the first stack in the file whose pattern matches). Only the processes
-- @doc that launched GPU work (kernels, CUDA-graph replays, copies or memsets: the pid of those rows, which is
-- @doc the pid of the API call that issued them) speak for the stack: on a shared host an unrelated process
-- @doc named like sglang::detokenizer that did no CUDA work is listed with source `host`, as context, and
-- @doc never decides. An export with no GPU work at all (NVTX only, an empty capture) reads every process.
-- @doc The report's profile.stack is the most specific stack with evidence from the processes that decide
-- @doc (engine/diagnosis/stacks.py), and rules show that stack's remediation steps first. serves_tokens, the same
-- @doc on every row, says whether the run serves or generates tokens: a serving stack (`serving: true` in
-- @doc stacks.yaml: vLLM, SGLang, TensorRT-LLM) among the evidence that decides, or work in a prefill or decode
-- @doc phase (_phase_ranges: NVTX text naming the phase, or steps of that shape); remediation steps about
-- @doc batching requests, KV caches and decode attention are shown only then
-- @doc (`when: [software_stack.serves_tokens == true]`). A run with no stack evidence has one row, stack cuda
-- @doc (the last of stacks.yaml) with source none and no matches, so serves_tokens is there for a plain CUDA
-- @doc program too: a hand-written CUDA LLM with NVTX decode ranges gets the token steps, a CUDA stencil none.
-- @needs _phase_ranges
-- @column stack Stack id (the key of its entry in rules/vocabulary/stacks.yaml).
-- @column source Where the evidence is: kernels, nvtx, process (a process that launched GPU work), host (one that launched none: context only) or none (no evidence at all: the one row of a plain CUDA run).
-- @column matches Kernels, NVTX ranges or processes that match.
-- @column time_share For kernel evidence, the matching kernels' share of all kernel time (0-1).
-- @column example One matching name: the one with the most kernel time or ranges (the first by name on a tie).
-- @column serves_tokens True on every row when the run serves or generates tokens (a serving stack decides, or a prefill or decode phase holds work).
-- @check stack not_null
-- @check time_share range 0 1
WITH gpu_pids AS (
    SELECT pid FROM _kernels_by_id WHERE pid IS NOT NULL
    UNION SELECT pid FROM graph_launches WHERE pid IS NOT NULL
    UNION SELECT pid FROM memcpys WHERE pid IS NOT NULL
    UNION SELECT pid FROM memsets WHERE pid IS NOT NULL
),
-- True when some process launched GPU work: then only those processes decide; else every process does.
gpu_known AS (SELECT count(*) > 0 AS yes FROM gpu_pids),
kernel_names AS (
    SELECT name, count(*) AS n, sum(end_ns - start_ns) AS t FROM kernels WHERE name IS NOT NULL GROUP BY name
),
kernel_stack AS (
    SELECT stack_of_kernel(name) AS stack, name, n, t FROM kernel_names
),
total AS (SELECT nullif(sum(t), 0) AS t FROM kernel_names),
range_texts AS (
    SELECT coalesce(domain, '') || ' ' || text AS label, count(*) AS n
    FROM nvtx_ranges
    WHERE (text IS NOT NULL OR domain IS NOT NULL)
      AND (pid IN (SELECT pid FROM gpu_pids) OR NOT (SELECT yes FROM gpu_known))
    GROUP BY 1
),
range_stack AS (
    SELECT stack_of_nvtx(label) AS stack, label, n FROM range_texts
),
process_stack AS (
    SELECT stack_of_process(name) AS stack, name,
           coalesce(pid IN (SELECT pid FROM gpu_pids), false) OR NOT (SELECT yes FROM gpu_known) AS decides
    FROM processes WHERE name IS NOT NULL
),
-- The example is the name with the most time (or ranges), the first in name order on a tie, so it is the same on
-- every run.
evidence AS (
SELECT stack, 'kernels' AS source, CAST(sum(n) AS BIGINT) AS matches,
       least(sum(t) / (SELECT t FROM total), 1.0) AS time_share, first(name ORDER BY t DESC, name) AS example
FROM kernel_stack WHERE stack IS NOT NULL GROUP BY stack
UNION ALL
SELECT stack, 'nvtx', CAST(sum(n) AS BIGINT), NULL, first(label ORDER BY n DESC, label) FROM range_stack
WHERE stack IS NOT NULL GROUP BY stack
UNION ALL
SELECT stack, CASE WHEN decides THEN 'process' ELSE 'host' END, count(*), NULL, min(name) FROM process_stack
WHERE stack IS NOT NULL GROUP BY stack, decides
),
-- No evidence at all: one row for plain CUDA (the last stack of stacks.yaml), so the run's serves_tokens is there
-- for the rules to read.
stack_rows AS (
SELECT * FROM evidence
UNION ALL
SELECT (SELECT max_by(stack, rank) FROM _stacks), 'none', 0, NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM evidence)
)
SELECT stack, source, matches, time_share, example,
       coalesce((SELECT bool_or(stack IN (SELECT stack FROM _stacks WHERE serving)
                                AND source NOT IN ('host', 'none'))
                 FROM stack_rows), false)
           OR EXISTS (SELECT 1 FROM _phase_ranges WHERE phase IN ('prefill', 'decode')) AS serves_tokens
FROM stack_rows
ORDER BY stack, source
