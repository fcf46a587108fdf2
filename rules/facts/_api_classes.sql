-- @fact _api_classes
-- @whole-run
-- @materialize
-- @doc What each CUDA API name (one row per name id of api_calls) means for the host thread that calls it:
-- @doc 'allocation' for device and pinned-host allocation and free calls, which take the driver's lock and often
-- @doc synchronise the device (CUDA Runtime API, "Memory Management": cudaFree and cudaFreeHost wait for the
-- @doc device; cudaMalloc may); 'sync' for calls that block the host until GPU work finishes (explicit
-- @doc synchronisations, synchronous copies and memsets); 'launch' for every other CUDA call (kernel and graph
-- @doc launches, asynchronous copies, events, stream management), the cost of issuing work.
-- @needs _api_names
-- @column name_id StringIds id (api_calls.name_id).
-- @column name API name without the version suffix.
-- @column api_class allocation, sync or launch.
SELECT name_id, name,
       CASE WHEN regexp_matches(name, '^(cuda(Malloc|Free|HostAlloc|HostRegister|HostUnregister|MemPoolTrimTo)'
                                      || '|cuMem(Alloc|Free|HostAlloc|HostRegister|HostUnregister|Create|Release'
                                      || '|Map|Unmap|AddressReserve|AddressFree)|cuArray(Create|Destroy))')
                THEN 'allocation'
            WHEN name IN ('cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventSynchronize',
                          'cudaThreadSynchronize', 'cuCtxSynchronize', 'cuStreamSynchronize', 'cuEventSynchronize',
                          'cudaMemcpy', 'cudaMemcpy2D', 'cudaMemcpy3D', 'cudaMemcpyToSymbol',
                          'cudaMemcpyFromSymbol', 'cudaMemcpyPeer', 'cudaMemset', 'cuMemcpy', 'cuMemcpyHtoD',
                          'cuMemcpyDtoH', 'cuMemcpyDtoD', 'cuMemcpyPeer', 'cuMemsetD8', 'cuMemsetD16',
                          'cuMemsetD32')
                THEN 'sync'
            ELSE 'launch' END AS api_class
FROM _api_names
