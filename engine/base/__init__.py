"""The bottom layer: helpers that know nothing of the pipeline (errors, units and their formats, text, the DuckDB
connection, timings, the tool's version, the severity and kind vocabulary)."""
