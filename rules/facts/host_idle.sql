-- @fact host_idle
-- @doc One row per GPU that ran kernels: the idle time the host caused by working outside CUDA calls between
-- @doc operations (_idle_gaps cause 'host': Python, a scheduler, tokenisation, I/O, waiting for input), and
-- @doc what the issuing thread was doing meanwhile, as far as the capture records it: the innermost NVTX
-- @doc ranges open during those gaps (_host_gap_ranges), the OS-runtime calls it was in (_host_gap_os_calls,
-- @doc with --trace=osrt) and the functions its CPU samples caught (_host_gap_samples, with --sample).
-- @per-phase
-- @needs _idle_gaps _host_gap_ranges _host_gap_os_calls _host_gap_samples gpu_utilization launch_overhead
-- @requires kernels|graph_launches
-- @param top_ranges 3 range 1 inf
-- @param top_calls 3 range 1 inf
-- @column device_id CUDA device index.
-- @column host_idle_ns Idle time while the issuing thread worked outside CUDA calls (ns).
-- @column host_idle_share host_idle_ns / all idle time of the device (0-1).
-- @column host_idle_fraction host_idle_ns / the device window (0-1).
-- @column host_gap_count Idle gaps caused by host work.
-- @column median_host_gap_ns Median length of those gaps (ns).
-- @column longest_host_gap_ns The longest of them (ns).
-- @column nvtx_share Share of host_idle_ns inside some NVTX range on the issuing thread (0-1).
-- @column top_ranges The innermost NVTX ranges that cover most of host_idle_ns (at least 1 % of it), longest first: a list of {name, ns, share} (share of host_idle_ns).
-- @column top_range Name of the first of them (NULL when no NVTX range covers host work).
-- @column os_call_share Share of host_idle_ns inside OS-runtime calls of the issuing thread (0-1; 0 without --trace=osrt).
-- @column top_os_calls The OS-runtime calls that cover most of host_idle_ns (at least 1 % of it): a list of {name, ns, share}.
-- @column gap_sample_count CPU samples of the issuing thread taken during those gaps (0 without --sample).
-- @column top_functions The leaf functions most of those samples caught: a list of {name, module, samples, share} (share of gap_sample_count).
-- @column graph_share Share of the device's kernel time run from CUDA graphs (launch_overhead) (0-1).
-- @column data_loading The run shows input loading a DataLoader would take off the GPU's thread: a process named like a PyTorch DataLoader worker (pt_data_worker) or DataLoader, an NVTX range naming a DataLoader (the PyTorch profiler's enumerate(DataLoader)), or file reads and opens (read, pread, fread, open ...) of the issuing thread in those gaps.
-- @column op_count GPU operations on the device (gpu_utilization).
-- @column window_ns The device window (ns).
-- @column range_source What the ranges are: 'nvtx' (an nsys export), or 'record_function' (the record_function ranges and ATen operators of a PyTorch-profiler trace).
-- @check device_id not_null
-- @check device_id unique
-- @check host_idle_ns non_negative
-- @check host_idle_share range 0 1
-- @check host_idle_fraction range 0 1
-- @check nvtx_share range 0 1
-- @check os_call_share range 0 1
-- @check gap_sample_count non_negative
-- @check graph_share range 0 1
WITH gaps AS (
    SELECT device_id, count(*) AS n, quantile_cont(gap_ns, 0.5) AS median_ns, max(gap_ns) AS longest_ns
    FROM _idle_gaps WHERE cause = 'host' GROUP BY device_id
),
named AS (
    SELECT device_id, name, covered_ns,
           row_number() OVER (PARTITION BY device_id ORDER BY covered_ns DESC, name) AS rank
    FROM _host_gap_ranges WHERE name <> '(no NVTX range)'
),
top AS (
    SELECT n.device_id,
           list({'name': n.name, 'ns': n.covered_ns, 'share': n.covered_ns / nullif(u.idle_host_ns, 0)}
                ORDER BY n.rank) FILTER (WHERE n.rank <= ${top_ranges} AND n.covered_ns >= 0.01 * u.idle_host_ns)
               AS top_ranges,
           sum(n.covered_ns) AS named_ns
    FROM named n JOIN gpu_utilization u USING (device_id)
    GROUP BY n.device_id
),
os_calls AS (
    SELECT o.device_id, sum(o.covered_ns) AS os_ns,
           list({'name': o.name, 'ns': o.covered_ns, 'share': o.covered_ns / nullif(u.idle_host_ns, 0)}
                ORDER BY o.covered_ns DESC, o.name) FILTER (WHERE o.covered_ns >= 0.01 * u.idle_host_ns)
               [1:${top_calls}] AS top_os_calls
    FROM _host_gap_os_calls o JOIN gpu_utilization u USING (device_id)
    GROUP BY o.device_id
),
samples AS (
    SELECT device_id, sum(sample_count) AS n,
           list({'name': name, 'module': module, 'samples': sample_count}
                ORDER BY sample_count DESC, name)[1:${top_calls}] AS top
    FROM _host_gap_samples GROUP BY device_id
),
-- The evidence of input loading: DataLoader names (PyTorch names its worker processes pt_data_worker), or the issuing
-- thread reading files while the GPU waits.
loader_named AS (
    SELECT EXISTS (SELECT 1 FROM processes WHERE name ILIKE '%pt_data_worker%' OR name ILIKE '%dataloader%')
           OR EXISTS (SELECT 1 FROM (SELECT DISTINCT text FROM nvtx_ranges) WHERE text ILIKE '%dataloader%') AS yes
),
file_reads AS (
    SELECT DISTINCT device_id FROM _host_gap_os_calls
    WHERE regexp_matches(name, '^(read|pread(64)?|readv|preadv2?|fread(_unlocked)?|open(64)?|openat(64)?|fopen(64)?)$')
),
sampled AS (
    SELECT device_id, n,
           list_transform(top, f -> {'name': f.name, 'module': f.module, 'samples': f.samples,
                                     'share': f.samples / n}) AS top_functions
    FROM samples
)
SELECT u.device_id, u.idle_host_ns AS host_idle_ns,
       CASE WHEN u.idle_ns > 0 THEN least(u.idle_host_ns / u.idle_ns, 1) ELSE 0 END AS host_idle_share,
       CASE WHEN u.window_ns > 0 THEN u.idle_host_ns / u.window_ns ELSE 0 END AS host_idle_fraction,
       coalesce(g.n, 0) AS host_gap_count, g.median_ns AS median_host_gap_ns, g.longest_ns AS longest_host_gap_ns,
       CASE WHEN u.idle_host_ns > 0 THEN least(coalesce(t.named_ns, 0) / u.idle_host_ns, 1) ELSE 0 END AS nvtx_share,
       coalesce(t.top_ranges, []) AS top_ranges,
       t.top_ranges[1].name AS top_range,
       CASE WHEN u.idle_host_ns > 0 THEN least(coalesce(os.os_ns, 0) / u.idle_host_ns, 1) ELSE 0 END AS os_call_share,
       coalesce(os.top_os_calls, []) AS top_os_calls,
       coalesce(sp.n, 0) AS gap_sample_count, coalesce(sp.top_functions, []) AS top_functions,
       l.graph_share, (SELECT yes FROM loader_named) OR fr.device_id IS NOT NULL AS data_loading,
       u.op_count, u.window_ns,
       coalesce((SELECT CASE any_value(value) WHEN 'kineto' THEN 'record_function' END FROM profile_info
                 WHERE key = 'source_format'), 'nvtx') AS range_source
FROM gpu_utilization u
JOIN launch_overhead l USING (device_id)
LEFT JOIN gaps g USING (device_id)
LEFT JOIN top t USING (device_id)
LEFT JOIN os_calls os USING (device_id)
LEFT JOIN sampled sp USING (device_id)
LEFT JOIN file_reads fr USING (device_id)
ORDER BY u.device_id
