"""Entry points that run the whole pipeline: one profile (api.py), a multi-rank run (multirank.py), a comparison
(compare.py; its metric deltas in deltas.py, its gates in gates.py, its checks of what-if projections in
projection_checks.py), a batch (batch.py, batch_dask.py; its profiles and shards in batch_profiles.py, its table in
batch_table.py)."""
