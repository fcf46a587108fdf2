"""For pack authors: the rule tests (ruletest.py), the fact tests (facttest.py) and the generated docs (docs.py)."""
