-- @fact gpu_metrics_summary
-- @doc One row per GPU with GPU-metrics samples (nsys --gpu-metrics-devices): mean DRAM and SM
-- @doc throughput while the GPU was working. Metric names differ by nsys version and GPU family, so they
-- @doc are matched by pattern; a metric the capture lacks is NULL.
-- @needs gpu_utilization
-- @requires gpu_metrics
-- @column device_id GPU (low byte of GPU_METRICS.typeId).
-- @column samples Samples taken inside the GPU's window of work.
-- @column dram_read_pct Mean DRAM read throughput (% of peak).
-- @column dram_write_pct Mean DRAM write throughput (% of peak).
-- @column dram_pct dram_read_pct + dram_write_pct, capped at 100.
-- @column sm_active_pct Mean share of SMs with at least one warp resident (%).
-- @column sm_issue_pct Mean SM instruction-issue throughput (%).
-- @column tensor_active_pct Mean tensor-core activity (%).
-- @column pcie_rx_pct Mean PCIe receive throughput (%).
-- @column pcie_tx_pct Mean PCIe transmit throughput (%).
-- @column compute_utilization Share of the GPU's window with kernels running (0-1): the time the metrics describe.
-- @check device_id not_null
-- @check device_id unique
-- @check samples non_negative
-- @check dram_pct range 0 100
-- @check compute_utilization range 0 1
WITH win AS (SELECT device_id, window_start_ns AS s, window_end_ns AS e FROM gpu_utilization),
classified AS (
    SELECT m.device_id, m.ts_ns, m.value,
           CASE WHEN regexp_matches(m.metric, '(?i)dram\s*read') THEN 'dram_read'
                WHEN regexp_matches(m.metric, '(?i)dram\s*write') THEN 'dram_write'
                WHEN regexp_matches(m.metric, '(?i)^sm\s*active') THEN 'sm_active'
                WHEN regexp_matches(m.metric, '(?i)^sm\s*issue') THEN 'sm_issue'
                WHEN regexp_matches(m.metric, '(?i)tensor\s*active') THEN 'tensor_active'
                WHEN regexp_matches(m.metric, '(?i)pcie\s*(rx|read)') THEN 'pcie_rx'
                WHEN regexp_matches(m.metric, '(?i)pcie\s*(tx|write)') THEN 'pcie_tx'
           END AS class
    FROM gpu_metrics m
    LEFT JOIN win w ON w.device_id = m.device_id
    WHERE w.device_id IS NULL OR m.ts_ns BETWEEN w.s AND w.e
)
SELECT device_id,
       count(DISTINCT ts_ns) AS samples,
       avg(value) FILTER (WHERE class = 'dram_read') AS dram_read_pct,
       avg(value) FILTER (WHERE class = 'dram_write') AS dram_write_pct,
       least(coalesce(avg(value) FILTER (WHERE class = 'dram_read'), 0)
             + coalesce(avg(value) FILTER (WHERE class = 'dram_write'), 0), 100) AS dram_pct,
       avg(value) FILTER (WHERE class = 'sm_active') AS sm_active_pct,
       avg(value) FILTER (WHERE class = 'sm_issue') AS sm_issue_pct,
       avg(value) FILTER (WHERE class = 'tensor_active') AS tensor_active_pct,
       avg(value) FILTER (WHERE class = 'pcie_rx') AS pcie_rx_pct,
       avg(value) FILTER (WHERE class = 'pcie_tx') AS pcie_tx_pct,
       any_value(u.utilization) AS compute_utilization
FROM classified LEFT JOIN gpu_utilization u USING (device_id)
GROUP BY device_id
ORDER BY device_id
