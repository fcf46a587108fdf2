"""Rules and verdict: YAML rules matched against the facts (loaded by rules.py: the spec in rule_spec.py, the
checks in rule_checks.py, the conditions in rule_conditions.py), configuration, the sandbox for rule templates
(templating.py, with template_limits.py and template_sandbox.py), and the verdict. The multi-rank run
(engine/runs/multirank.py) and the rule tests (authoring/ruletest.py) drive the whole pipeline, so they live beside
engine/runs/api.py."""
