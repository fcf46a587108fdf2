-- @fact _sync_calls
-- @materialize
-- @doc CPU calls that block until GPU work finishes: explicit synchronisations, stream waits and
-- @doc synchronous copies/memsets (no Async suffix).
-- @needs _api_classes
-- @column pid Process.
-- @column global_tid Thread.
-- @column start_ns Call start (ns).
-- @column end_ns Call end (ns).
-- @column name API name.
-- @column kind 'sync' for explicit synchronisation, 'wait' for stream waits, 'sync_copy' for synchronous copies.
-- The blocking APIs are _api_classes' sync, sync_copy and wait families; calls are matched on the integer id.
WITH blocking_names AS (
    SELECT name_id, name, api_family FROM _api_classes WHERE api_family IN ('sync', 'sync_copy', 'wait')
)
SELECT a.pid, a.global_tid, a.start_ns, a.end_ns, n.name, n.api_family AS kind
FROM _api_calls_by_id a JOIN blocking_names n ON n.name_id = a.name_id
