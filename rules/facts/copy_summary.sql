-- @fact copy_summary
-- @doc Copies and memsets by device, traffic (host-device copies over PCIe, device-to-device, peer,
-- @doc unified-memory migrations, memsets), direction and memory kind: count, bytes, time, effective
-- @doc bandwidth, copies longer than the threshold (default 100 µs, the mark of a PCIe-bound transfer of
-- @doc the pcie-bound rule, docs/verdict.md "Rules and the verdict"), and the time the GPU had nothing else to do
-- @doc while they ran.
-- @report
-- @needs _copy_stalls
-- @param long_copy_ns 100000
-- @column device_id CUDA device index.
-- @column op memcpy or memset.
-- @column traffic host_device (HtoD, DtoH, HtoA, AtoH: the copies that cross PCIe), device (DtoD, DtoA, AtoD, AtoA), peer (PtoP), uvm (unified-memory migrations), memset or other (HtoH, unknown).
-- @column copy_kind HtoD, DtoH, DtoD, PtoP, 'UVM HtoD' ... or memset.
-- @column src_mem Source memory kind (pageable, pinned, device, managed ...).
-- @column dst_mem Destination memory kind.
-- @column is_uvm Unified-memory migrations.
-- @column count Operations.
-- @column total_bytes Bytes moved.
-- @column total_ns Time (ns).
-- @column mean_ns Mean duration (ns).
-- @column gbps Effective bandwidth: total_bytes / total_ns (GB/s).
-- @column long_count Operations longer than long_copy_ns.
-- @column long_ns Time in those long operations (ns).
-- @column stall_ns Time during which no kernel ran on the device (ns).
-- @check device_id not_null
-- @check op accepted_values memcpy memset
-- @check traffic accepted_values host_device device peer uvm memset other
-- @check count non_negative
-- @check total_bytes non_negative
-- @check total_ns non_negative
-- @check long_count non_negative
-- @check stall_ns non_negative
SELECT device_id, op, traffic, copy_kind, src_mem, dst_mem, is_uvm, count(*) AS count,
       coalesce(sum(bytes), 0) AS total_bytes, sum(dur_ns) AS total_ns, avg(dur_ns) AS mean_ns,
       CASE WHEN sum(dur_ns) > 0 THEN coalesce(sum(bytes), 0) / sum(dur_ns) END AS gbps,
       count(*) FILTER (WHERE dur_ns > ${long_copy_ns}) AS long_count,
       coalesce(sum(dur_ns) FILTER (WHERE dur_ns > ${long_copy_ns}), 0) AS long_ns,
       sum(stall_ns) AS stall_ns
FROM _copy_stalls
GROUP BY ALL
ORDER BY total_ns DESC, device_id, op, traffic, copy_kind, src_mem, dst_mem, is_uvm
