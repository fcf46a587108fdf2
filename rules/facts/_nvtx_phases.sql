-- @fact _nvtx_phases
-- @materialize
-- @doc NVTX ranges whose text matches a phase pattern, with that phase (phase_of(): the first configured
-- @doc pattern that matches, see engine/facts/compute.py). Each distinct text is classified once. The phases
-- @doc the NVTX text names; _phase_ranges adds the phases inferred from the steps' shape.
-- @column global_tid Thread that opened the range.
-- @column pid Process.
-- @column start_ns Range start (ns).
-- @column end_ns Range end (ns).
-- @column phase Phase name (prefill, decode, or a configured one).
-- @column text The range's text.
-- MATERIALIZED: otherwise DuckDB pushes `phase IS NOT NULL` below the DISTINCT and runs the patterns on
-- every range instead of every distinct text.
WITH classified AS MATERIALIZED (
    SELECT text, phase_of(text) AS phase FROM (SELECT DISTINCT text FROM nvtx_ranges WHERE text IS NOT NULL)
)
SELECT r.global_tid, r.pid, r.start_ns, r.end_ns, c.phase, r.text
FROM nvtx_ranges r JOIN classified c ON c.text = r.text
WHERE c.phase IS NOT NULL
