"""Facts: the SQL of a knowledge pack (rules/facts/ for the bundled one) run over the canonical tables.

    catalog.py        a fact's header, loading, run order, the team-SQL sandbox, materialising one fact
    compute.py        running the facts of a profile: the run's, start-up's and each phase's
    cross_rank.py     the cross-rank facts of a multi-rank run
"""
