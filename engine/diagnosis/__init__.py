"""Rules and verdict: YAML rules matched against the facts, configuration, the sandbox for rule templates, the
multi-rank run and the rule tests."""
