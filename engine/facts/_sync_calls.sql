-- @fact _sync_calls
-- @materialize
-- @doc CPU calls that block until GPU work finishes: explicit synchronisations, stream waits and
-- @doc synchronous copies/memsets (no Async suffix).
-- @column pid Process.
-- @column global_tid Thread.
-- @column start_ns Call start (ns).
-- @column end_ns Call end (ns).
-- @column name API name.
-- @column kind 'sync' for explicit synchronisation, 'wait' for stream waits, 'sync_copy' for synchronous copies.
SELECT pid, global_tid, start_ns, end_ns, name,
       CASE WHEN name IN ('cudaStreamWaitEvent', 'cuStreamWaitEvent') THEN 'wait'
            WHEN name LIKE '%Memcpy%' OR name LIKE '%Memset%' THEN 'sync_copy'
            ELSE 'sync' END AS kind
FROM api_calls
WHERE name IN ('cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventSynchronize',
               'cudaThreadSynchronize', 'cudaStreamWaitEvent', 'cuCtxSynchronize', 'cuStreamSynchronize',
               'cuEventSynchronize', 'cuStreamWaitEvent')
   OR (name IN ('cudaMemcpy', 'cudaMemcpy2D', 'cudaMemcpy3D', 'cudaMemcpyToSymbol', 'cudaMemcpyFromSymbol',
                'cudaMemcpyPeer', 'cudaMemset', 'cuMemcpy', 'cuMemcpyHtoD', 'cuMemcpyDtoH', 'cuMemcpyDtoD',
                'cuMemcpyPeer', 'cuMemsetD8', 'cuMemsetD16', 'cuMemsetD32'))
