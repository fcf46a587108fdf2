"""Facts: the SQL of a knowledge pack (rules/facts/ for the bundled one) run over the canonical tables.

    catalog.py        a fact's header (Fact, parse_fact), column tests, run order, its SQL with params filled in
    loading.py        loading the bundled and team fact files
    team_sql.py       the sandbox check of team SQL on DuckDB's parse
    materialize.py    running one fact into the scratch database
    compute.py        running the facts of a profile: the run's, start-up's and each phase's
    compile_check.py  compiling facts over an empty export (`rules check`)
    needs.py          each fact's reads against its `-- @needs`
    nvtx_patterns.py  the NVTX phase, start-up and step patterns of the known stacks
    window.py         the steady window after a one-off start-up
    scopes.py         the facts computed again over each inference phase
    cross_rank.py     the cross-rank facts of a multi-rank run
    results_cache.py  the computed rows kept beside the cached canonical tables
    parallel.py, compact.py, types.py   running facts side by side, compressing scratch tables, column types
"""
