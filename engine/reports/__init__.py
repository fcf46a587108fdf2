"""Reports. model.py (the shared pieces and the single-profile report), runmodel.py (a multi-rank run) and
comparemodel.py (a before/after comparison) are what gets rendered; metrics.py defines the key metrics once;
compare.py builds a comparison; render.py renders any of the three (environment.py: the Jinja setup, charts.py:
chart geometry); schema.py generates their JSON Schemas."""
