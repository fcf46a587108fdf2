-- @fact _api_names
-- @whole-run
-- @materialize
-- @doc The API name behind each name id of api_calls, one row per id. Facts that look for particular APIs
-- @doc (launches, synchronisations) test these few rows, then match millions of calls on the integer id; as
-- @doc a table of its own, the name cannot be pushed down by DuckDB and tested once per call.
-- @column name_id StringIds id (api_calls.name_id).
-- @column name API name without the version suffix.
SELECT name_id, any_value(name) AS name FROM api_calls GROUP BY name_id
