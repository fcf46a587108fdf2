-- @fact _api_classes
-- @whole-run
-- @materialize
-- @doc What each CUDA API name (one row per name id of api_calls) is and means for the host thread that calls it:
-- @doc the one definition of a launch, a synchronisation and an allocation, which every other fact reads instead
-- @doc of spelling API names. api_family is the first family of rules/vocabulary/api_names.yaml one of whose
-- @doc names matches the call's name: allocation, sync, sync_copy, wait, kernel_launch, multi_device_launch,
-- @doc graph_launch, host_function_launch. api_class:
-- @doc 'allocation' for device and pinned-host allocation and free calls, which take the driver's lock and often
-- @doc synchronise the device (CUDA Runtime API, "Memory Management": cudaFree and cudaFreeHost wait for the
-- @doc device; cudaMalloc may); 'sync' for calls that block the host until GPU work finishes (explicit
-- @doc synchronisations, synchronous copies and memsets); 'launch' for every other CUDA call (kernel and graph
-- @doc launches, asynchronous copies, events, stream management), the cost of issuing work.
-- @needs _api_names
-- @column name_id StringIds id (api_calls.name_id).
-- @column name API name without the version suffix.
-- @column api_family Its family in rules/vocabulary/api_names.yaml; NULL when none names it.
-- @column api_class allocation, sync or launch.
-- @column is_launch True for a call that launches GPU work: a kernel, multi-device or graph launch (a host function enqueued on a stream is none).
-- The few distinct names are matched against the listed globs here, once; facts match the calls on the integer id.
WITH matched AS (
    SELECT n.name_id, arg_min(p.family, p.rank) AS api_family
    FROM _api_names n JOIN _api_name_patterns p ON n.name GLOB p.pattern
    GROUP BY n.name_id
)
SELECT n.name_id, n.name, m.api_family,
       CASE WHEN m.api_family = 'allocation' THEN 'allocation'
            WHEN m.api_family IN ('sync', 'sync_copy') THEN 'sync'
            ELSE 'launch' END AS api_class,
       coalesce(m.api_family IN ('kernel_launch', 'multi_device_launch', 'graph_launch'), false) AS is_launch
FROM _api_names n LEFT JOIN matched m ON m.name_id = n.name_id
