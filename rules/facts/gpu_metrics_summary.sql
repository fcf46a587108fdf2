-- @fact gpu_metrics_summary
-- @doc One row per GPU with GPU-metrics samples (nsys --gpu-metrics-devices): what its SMs, tensor cores, DRAM
-- @doc and links did while it worked. Metric names differ by nsys version and GPU family; each known name maps
-- @doc to one canonical metric (rules/facts/gpu_metric_names.csv, docs/measures.md "GPU metrics"), and names the table
-- @doc does not know are listed, not guessed at. The SM, tensor and DRAM means are over the samples taken while
-- @doc a kernel ran (the time the kernels are judged on); the link means over the samples taken while a
-- @doc collective (communication kernel) or a copy ran: what moves data over the links. Computed per phase too:
-- @doc then the samples are those taken while the phase's work ran.
-- @report per-phase
-- @needs _timeline gpu_utilization _kernel_classes
-- @per-phase
-- @requires gpu_metrics
-- @param link_saturated_pct 70
-- @param dram_bound_pct 60 range 0 100
-- @column device_id GPU the samples belong to.
-- @column chip GPU family of the metric set (TARGET_INFO_GPU_METRICS), when recorded.
-- @column samples Sample times inside the GPU's window of work.
-- @column kernel_samples Sample times at which a kernel was running: the samples the SM, tensor and DRAM means are over.
-- @column sample_period_ns Median time between samples (ns): 1e9 / the --gpu-metrics-frequency used.
-- @column median_kernel_ns Time-weighted median kernel duration on the GPU: half of its kernel time is in kernels at most this long (ns).
-- @column period_per_kernel sample_period_ns / median_kernel_ns: above 1, the kernels that take most of the time fall between two samples.
-- @column suggested_frequency_hz The --gpu-metrics-frequency that takes two samples per median kernel (Hz; nsys accepts 10 to 200000).
-- @column sm_active_pct SMs Active: share of SMs with at least one warp resident (%); residency, not throughput: a kernel can keep every SM resident while issuing almost nothing.
-- @column sm_issue_pct SM Issue: share of SM cycles in which an instruction was issued (%): how busy the SMs really are.
-- @column tensor_active_pct Tensor Active: share of SM cycles with the tensor cores busy (%).
-- @column dram_read_pct DRAM read bandwidth as a share of peak (%).
-- @column dram_write_pct DRAM write bandwidth as a share of peak (%).
-- @column dram_pct DRAM bandwidth, read and write, as a share of peak (%): the total metric when recorded, else read + write capped at 100.
-- @column gr_active_pct GR Active: share of time the graphics/compute engine was busy (%).
-- @column warps_in_flight_pct Compute warps in flight as a share of the SMs' warp slots (%): achieved occupancy.
-- @column unallocated_warps_pct Warp slots of active SMs left unallocated (%).
-- @column pcie_rx_pct PCIe receive (to the GPU) throughput as a share of peak, while collectives or copies ran (%).
-- @column pcie_tx_pct PCIe transmit (from the GPU) throughput as a share of peak, while collectives or copies ran (%).
-- @column nvlink_rx_pct NVLink receive throughput (request and response user data) as a share of peak, while collectives or copies ran (%).
-- @column nvlink_tx_pct NVLink transmit throughput (request and response user data) as a share of peak, while collectives or copies ran (%).
-- @column link_peak_pct The busiest of PCIe RX/TX and NVLink RX/TX: its mean while collectives or copies ran (%).
-- @column link_saturated_fraction Share of the samples in the GPU's window with a link at or above link_saturated_pct (0-1).
-- @column link_saturated_pct The fact param link_saturated_pct: the throughput (% of peak) from which a link counts as saturated.
-- @column gemm_time_share Share of the GPU's kernel time in GEMM and convolution kernels (operation class gemm, rules/vocabulary/operation_classes.yaml, less GEMVs), which tensor cores can run (0-1).
-- @column gemm_busy_fraction Their time as a share of the GPU's window (0-1).
-- @column gemm_kernels The three heaviest of those kernels: a list of {name, precision, total_ns} (precision as the name says it: fp32, tf32, fp16/bf16, fp8, int8 or unknown).
-- @column dram_bound_samples Samples taken while a kernel ran with DRAM throughput at or above dram_bound_pct.
-- @column dram_bound_pct The fact param dram_bound_pct: the DRAM throughput (% of peak) from which a sample counts as DRAM-bound.
-- @column dram_bound_classes Which operation classes ran at those samples: a list of {op_class, share} (share of those samples), by the kernel that started last before each sample.
-- @column known_metrics Canonical metrics the capture recorded.
-- @column unknown_metrics Metric names the name table does not know, comma-separated (at most 12).
-- @column compute_utilization Share of the GPU's window with kernels running (0-1): the time the metrics describe.
-- @column compute_capability The GPU's compute capability as a number (7.5 for a Turing GPU, 8.0 for an A100), from the export's GPU table (TARGET_INFO_GPU); NULL when it does not record it. Which precisions the tensor cores run follows from it: FP16 from 7.0, TF32 and BF16 from 8.0.
-- @check device_id not_null
-- @check device_id unique
-- @check samples non_negative
-- @check kernel_samples non_negative
-- @check dram_pct range 0 100
-- @check link_saturated_fraction range 0 1
-- @check gemm_time_share range 0 1
-- @check gemm_busy_fraction range 0 1
-- @check compute_utilization range 0 1
WITH win AS (SELECT device_id, window_start_ns AS s, window_end_ns AS e FROM gpu_utilization),
named AS (
    SELECT m.device_id, m.ts_ns, m.value, m.metric, m.chip, n.canonical, n.unit
    FROM gpu_metrics m
    JOIN win w ON w.device_id = m.device_id AND m.ts_ns BETWEEN w.s AND w.e
    LEFT JOIN _metric_names n ON n.name_key = lower(trim(m.metric))
),
times AS (SELECT DISTINCT device_id, ts_ns FROM named),
-- What ran at each sample time: the latest end among the kernels, and among the collectives and copies, that
-- started before it, in one pass. The running maxima are taken here, over this fact's _timeline rows, so that
-- per phase only the phase's own work counts.
ends AS (
    SELECT device_id, start_ns,
           max(end_ns) FILTER (WHERE is_compute) OVER w AS kernel_end,
           -- collectives (communication kernels) and copies: what moves data over the links
           max(end_ns) FILTER (WHERE is_comm OR NOT is_compute) OVER w AS transfer_end
    FROM _timeline WHERE device_id IN (SELECT device_id FROM times)
    WINDOW w AS (PARTITION BY device_id ORDER BY start_ns RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
covered AS (
    SELECT t.device_id, t.ts_ns, coalesce(e.kernel_end >= t.ts_ns, false) AS kernel,
           coalesce(e.transfer_end >= t.ts_ns, false) AS transfer
    FROM times t ASOF LEFT JOIN ends e ON e.device_id = t.device_id AND e.start_ns <= t.ts_ns
),
-- One value per sample time and canonical metric: the NVLink throughput is the sum of its request and response
-- user-data parts (the parts of one direction add up); other metrics have one name per metric set.
per_ts AS (
    SELECT device_id, ts_ns, canonical,
           CASE WHEN canonical IN ('nvlink_rx', 'nvlink_tx') THEN least(sum(value), 100) ELSE max(value) END AS value
    FROM named WHERE canonical IS NOT NULL AND unit = 'percent'
    GROUP BY device_id, ts_ns, canonical
),
judged AS (
    SELECT p.*, c.kernel, c.transfer FROM per_ts p JOIN covered c USING (device_id, ts_ns)
),
per_device AS (
    SELECT device_id,
           avg(value) FILTER (WHERE kernel AND canonical = 'sm_active') AS sm_active_pct,
           avg(value) FILTER (WHERE kernel AND canonical = 'sm_issue') AS sm_issue_pct,
           avg(value) FILTER (WHERE kernel AND canonical = 'tensor_active') AS tensor_active_pct,
           avg(value) FILTER (WHERE kernel AND canonical = 'dram_read') AS dram_read_pct,
           avg(value) FILTER (WHERE kernel AND canonical = 'dram_write') AS dram_write_pct,
           avg(value) FILTER (WHERE kernel AND canonical = 'dram_total') AS dram_total_pct,
           avg(value) FILTER (WHERE kernel AND canonical = 'gr_active') AS gr_active_pct,
           avg(value) FILTER (WHERE kernel AND canonical = 'warps_in_flight') AS warps_in_flight_pct,
           avg(value) FILTER (WHERE kernel AND canonical = 'unallocated_warps') AS unallocated_warps_pct,
           avg(value) FILTER (WHERE transfer AND canonical = 'pcie_rx') AS pcie_rx_pct,
           avg(value) FILTER (WHERE transfer AND canonical = 'pcie_tx') AS pcie_tx_pct,
           avg(value) FILTER (WHERE transfer AND canonical = 'nvlink_rx') AS nvlink_rx_pct,
           avg(value) FILTER (WHERE transfer AND canonical = 'nvlink_tx') AS nvlink_tx_pct,
           count(DISTINCT canonical) FILTER (WHERE canonical <> 'ignored') AS known_metrics
    FROM judged GROUP BY device_id
),
counts AS (
    SELECT device_id, count(*) AS samples, count(*) FILTER (WHERE kernel) AS kernel_samples
    FROM covered GROUP BY device_id
),
names AS (
    SELECT device_id, any_value(chip) FILTER (WHERE chip IS NOT NULL) AS chip,
           list(DISTINCT metric ORDER BY metric) FILTER (WHERE canonical IS NULL) AS unknown_list
    FROM named GROUP BY device_id
),
links AS (  -- per sample time, the busiest link
    SELECT device_id, ts_ns, max(value) AS link_pct
    FROM per_ts WHERE canonical IN ('pcie_rx', 'pcie_tx', 'nvlink_rx', 'nvlink_tx')
    GROUP BY device_id, ts_ns
),
saturation AS (
    SELECT device_id, count(*) FILTER (WHERE link_pct >= ${link_saturated_pct}) AS saturated FROM links GROUP BY 1
),
periods AS (
    SELECT device_id, quantile_cont(ts_ns - prev_ts, 0.5) AS sample_period_ns
    FROM (SELECT device_id, ts_ns, lag(ts_ns) OVER (PARTITION BY device_id ORDER BY ts_ns) AS prev_ts FROM times)
    WHERE prev_ts IS NOT NULL GROUP BY device_id
),
-- The kernels of interest are those that take the time: the time-weighted median duration splits the kernel
-- time in halves, so a few long kernels among many tiny ones still count as long.
kernel_times AS (
    SELECT device_id, min(dur_ns) FILTER (WHERE below * 2 >= total) AS median_kernel_ns
    FROM (SELECT device_id, end_ns - start_ns AS dur_ns,
                 sum(end_ns - start_ns) OVER (PARTITION BY device_id ORDER BY end_ns - start_ns
                                              ROWS UNBOUNDED PRECEDING) AS below,
                 sum(end_ns - start_ns) OVER (PARTITION BY device_id) AS total
          FROM _timeline WHERE is_compute AND device_id IN (SELECT device_id FROM times))
    GROUP BY device_id
),
-- GEMM time by operation class (rules/vocabulary/operation_classes.yaml: GEMMs and convolutions run as GEMMs), less the
-- GEMVs, which are memory-bound and gain nothing from tensor cores.
by_name AS (
    SELECT k.device_id, k.name_id, k.dur_ns, c.name,
           coalesce(c.op_class, 'other') = 'gemm' AND NOT regexp_matches(c.name, '(?i)gemv') AS is_gemm
    FROM (SELECT device_id, name_id, sum(dur_ns) AS dur_ns FROM _kernels_by_id GROUP BY device_id, name_id) k
    LEFT JOIN _kernel_classes c ON c.name_id = k.name_id
),
gemm AS (
    SELECT device_id, sum(dur_ns) FILTER (WHERE is_gemm)::DOUBLE / nullif(sum(dur_ns), 0) AS gemm_time_share,
           sum(dur_ns) FILTER (WHERE is_gemm) AS gemm_ns,
           list({'name': name, 'precision': gemm_precision_of(name), 'total_ns': dur_ns}
                ORDER BY dur_ns DESC, name) FILTER (WHERE is_gemm) AS gemm_list
    FROM by_name GROUP BY device_id
),
-- What ran while DRAM was the limit: the samples taken while a kernel ran with DRAM throughput at or above
-- dram_bound_pct, each given the class of the kernel that started last before it on the device (and still ran).
dram_samples AS (
    SELECT device_id, ts_ns FROM judged WHERE kernel
    GROUP BY device_id, ts_ns
    HAVING coalesce(max(value) FILTER (WHERE canonical = 'dram_total'),
                    least(coalesce(max(value) FILTER (WHERE canonical = 'dram_read'), 0)
                          + coalesce(max(value) FILTER (WHERE canonical = 'dram_write'), 0), 100))
           >= ${dram_bound_pct}
),
sample_classes AS (
    SELECT s.device_id, coalesce(n.op_class, 'other') AS op_class, count(*) AS n
    FROM dram_samples s
    -- only the devices with such samples: an as-of join sorts its right side even for no sample at all
    ASOF LEFT JOIN (SELECT device_id, start_ns, end_ns, name_id FROM _kernels_by_id
                    WHERE device_id IN (SELECT device_id FROM dram_samples)) k
         ON k.device_id = s.device_id AND k.start_ns <= s.ts_ns
    LEFT JOIN _kernel_classes n
         ON n.name_id = k.name_id AND k.end_ns >= s.ts_ns
    GROUP BY s.device_id, coalesce(n.op_class, 'other')
),
dram_classes AS (
    SELECT device_id, sum(n) AS dram_bound_samples,
           list({'op_class': op_class, 'share': n / total} ORDER BY n DESC, op_class) AS dram_bound_classes
    FROM (SELECT *, sum(n) OVER (PARTITION BY device_id) AS total FROM sample_classes) GROUP BY device_id
)
SELECT nm.device_id, nm.chip, n.samples, n.kernel_samples, p.sample_period_ns, k.median_kernel_ns,
       p.sample_period_ns / nullif(k.median_kernel_ns, 0) AS period_per_kernel,
       CAST(ceil(2e9 / nullif(k.median_kernel_ns, 0)) AS BIGINT) AS suggested_frequency_hz,
       d.sm_active_pct, d.sm_issue_pct, d.tensor_active_pct, d.dram_read_pct, d.dram_write_pct,
       coalesce(d.dram_total_pct, CASE WHEN d.dram_read_pct IS NOT NULL OR d.dram_write_pct IS NOT NULL
                THEN least(coalesce(d.dram_read_pct, 0) + coalesce(d.dram_write_pct, 0), 100) END) AS dram_pct,
       d.gr_active_pct, d.warps_in_flight_pct, d.unallocated_warps_pct,
       d.pcie_rx_pct, d.pcie_tx_pct, d.nvlink_rx_pct, d.nvlink_tx_pct,
       greatest(d.pcie_rx_pct, d.pcie_tx_pct, d.nvlink_rx_pct, d.nvlink_tx_pct) AS link_peak_pct,
       CASE WHEN n.samples > 0 THEN coalesce(s.saturated, 0) / n.samples ELSE 0 END AS link_saturated_fraction,
       ${link_saturated_pct} AS link_saturated_pct,
       coalesce(g.gemm_time_share, 0) AS gemm_time_share,
       CASE WHEN u.window_ns > 0 THEN least(coalesce(g.gemm_ns, 0) / u.window_ns, 1) ELSE 0 END AS gemm_busy_fraction,
       coalesce(list_slice(g.gemm_list, 1, 3), []) AS gemm_kernels,
       coalesce(c.dram_bound_samples, 0) AS dram_bound_samples, ${dram_bound_pct} AS dram_bound_pct,
       coalesce(c.dram_bound_classes, []) AS dram_bound_classes,
       coalesce(d.known_metrics, 0) AS known_metrics,
       nullif(array_to_string(list_slice(nm.unknown_list, 1, 12), ', '), '') AS unknown_metrics,
       u.utilization AS compute_utilization, v.compute_capability
FROM names nm
JOIN counts n USING (device_id)
LEFT JOIN per_device d USING (device_id)
LEFT JOIN gpu_utilization u USING (device_id)
LEFT JOIN saturation s USING (device_id)
LEFT JOIN periods p USING (device_id)
LEFT JOIN kernel_times k USING (device_id)
LEFT JOIN gemm g USING (device_id)
LEFT JOIN dram_classes c USING (device_id)
LEFT JOIN (SELECT device_id, any_value(TRY_CAST(compute_capability AS DOUBLE)) AS compute_capability FROM devices
           GROUP BY device_id) v USING (device_id)
ORDER BY nm.device_id
