"""The domain model, the document classes every report is made of; it imports nothing but the shared vocabulary.

    document.py      the strict base Model and the Document header every report starts with
    findings.py      a finding with its evidence, a rule that passed or was skipped
    whatif.py        what a fix would buy: a cause removed, a larger batch
    verdict.py       the primary bottleneck and the per-phase verdicts
    settings.py      a non-default setting in force
    metrics.py       the key metrics with their thresholds
    measures.py      throughput, each GPU's window, the operation breakdown, the start-up
    report.py        the single-profile report and the profile summary (devices, views, software stack)
    runmodel.py      the multi-rank run
    comparemodel.py  the comparison
"""
