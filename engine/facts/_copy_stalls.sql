-- @fact _copy_stalls
-- @materialize
-- @doc Every copy and memset with the part of it during which no kernel or graph replay ran on its device
-- @doc (the GPU's compute engines were stalled waiting for the transfer).
-- @needs _busy_intervals
-- @column device_id CUDA device index.
-- @column op memcpy or memset.
-- @column copy_kind Direction (memcpys.copy_kind; 'memset' for memsets).
-- @column src_mem Source memory kind.
-- @column dst_mem Destination memory kind.
-- @column is_uvm Unified-memory migration.
-- @column bytes Bytes moved.
-- @column dur_ns Duration (ns).
-- @column stall_ns Part of the duration with no compute on the device (ns).
WITH ops AS (
    SELECT row_number() OVER (ORDER BY device_id, start_ns, end_ns, op) AS op_id, * FROM (
        SELECT device_id, 'memcpy' AS op, copy_kind, src_mem, dst_mem, is_uvm, bytes, start_ns, end_ns
        FROM memcpys WHERE end_ns >= start_ns
        UNION ALL
        SELECT device_id, 'memset', 'memset', mem_kind, mem_kind, false, bytes, start_ns, end_ns
        FROM memsets WHERE end_ns >= start_ns)
),
compute AS (SELECT device_id, start_ns, end_ns FROM _busy_intervals WHERE scope = 'compute'),
overlap AS (
    SELECT o.op_id, sum(least(o.end_ns, c.end_ns) - greatest(o.start_ns, c.start_ns)) AS overlap_ns
    FROM ops o JOIN compute c
      ON c.device_id = o.device_id AND c.start_ns < o.end_ns AND c.end_ns > o.start_ns
    GROUP BY o.op_id
)
SELECT o.device_id, o.op, o.copy_kind, o.src_mem, o.dst_mem, o.is_uvm, o.bytes, o.end_ns - o.start_ns AS dur_ns,
       greatest(o.end_ns - o.start_ns - coalesce(v.overlap_ns, 0), 0) AS stall_ns
FROM ops o LEFT JOIN overlap v USING (op_id)
