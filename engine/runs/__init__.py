"""Entry points that run the whole pipeline: one profile (api.py), a multi-rank run (multirank.py), a comparison and
its gates (compare.py), a batch (batch.py, batch_dask.py)."""
