"""Reports. The models of engine/model (the single-profile report, a multi-rank run, a before/after comparison)
are what gets rendered; metrics.py defines the key metrics once; render.py renders any of the three
(environment.py: the Jinja setup, charts.py: chart geometry); schema.py generates their JSON Schemas. A comparison
is built by engine/runs/compare.py."""
