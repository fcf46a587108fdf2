"""Rules and verdict: YAML rules matched against the facts, configuration, the sandbox for rule templates, and
the verdict. The multi-rank run (engine/runs/multirank.py) and the rule tests (authoring/ruletest.py) drive the whole
pipeline, so they live beside engine/runs/api.py."""
