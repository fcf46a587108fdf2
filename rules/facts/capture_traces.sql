-- @fact capture_traces
-- @whole-capture
-- @doc One row: how much of each optional kind of data the capture recorded, counted over the whole capture
-- @doc (a start-up included, which the other facts leave out), so that advice to capture a kind of data is given
-- @doc only when the capture holds none of it: OS-runtime calls (nsys profile --trace=osrt), CPU samples
-- @doc (--sample=cpu), NVTX ranges (--trace=nvtx and an annotated program) and GPU metrics (--gpu-metrics-devices).
-- @column osrt_call_count OS-runtime calls traced.
-- @column cpu_sample_count CPU samples taken.
-- @column nvtx_range_count NVTX ranges traced.
-- @column gpu_metric_samples GPU-metrics rows.
-- @check osrt_call_count non_negative
-- @check cpu_sample_count non_negative
-- @check nvtx_range_count non_negative
-- @check gpu_metric_samples non_negative
SELECT (SELECT count(*) FROM osrt_calls) AS osrt_call_count,
       (SELECT count(*) FROM cpu_samples) AS cpu_sample_count,
       (SELECT count(*) FROM nvtx_ranges) AS nvtx_range_count,
       (SELECT count(*) FROM gpu_metrics) AS gpu_metric_samples
