"""The library entry point: diagnose(path, config) -> Report. The CLI and the tests both use it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Collection
from typing import Any, Callable

from ..diagnosis.config import Config, ConfigError, split_config
from ..base.duck import reraise_interrupt
from ..diagnosis.evaluate import evaluate
from ..diagnosis.verdict import idle_cause_rules, verdict
from ..pack.headlines import Headlines, load_headlines
from ..diagnosis.merge import fold_restatements, merge_agreeing, merge_gpus, set_aside_negligible
from ..diagnosis.phases import judge_phases
from ..diagnosis.stacks import detect_stack
from ..facts.compute import FactSet
from ..pack.apinames import ApiNames, load_api_names
from ..pack.stacks import Stacks, load_stacks
from ..pack.opclasses import OperationClasses, load_operation_classes
from ..facts.results_cache import facts_of
from ..facts.catalog import Fact, FactError, FactOverflowError, reported_facts
from ..facts.loading import load_facts
from ..base.errors import InputError
from ..base.timings import Timings
from ..base.version import tool_version
from ..model.findings import Finding
from ..model.measures import StartUp
from ..model.report import Device, ProfileSummary, Report, StackInfo
from ..reports.breakdown import window_breakdown
from ..reports.operations import operation_breakdown
from ..reports.metrics import key_metric_rows, rule_thresholds
from ..diagnosis.rule_spec import Rule
from ..diagnosis.rules import load_rules
from ..diagnosis.ruleset import RuleSet
from ..reading.export import Export, open_export, prefetch_profile
from ..reading.profile_file import ProfileFile
from ..diagnosis.startup import startup_summary
from ..diagnosis.throughput import check_tokens, throughput
from ..diagnosis import whatif
from .selection import facts_to_compute, skipped



@dataclass(frozen=True)
class Pack:
    """The rule pack in force, loaded and checked once per diagnosis, batch or multi-rank run: the bundled and team
    facts and rules, the team's operation classes and headline wording, and the settings of diagnose.yaml and --set
    resolved over the rules (a broken pack or setting is refused here, before any export is read)."""

    facts: dict[str, Fact]
    rules: dict[str, Rule]
    """The rules that judge one profile."""
    run_rules: dict[str, Rule]
    """The cross-rank rules (`scope: run`) of a multi-rank run."""
    op_classes: OperationClasses
    headlines: Headlines
    stacks: Stacks
    """The software stacks: the bundled ones with each team directory's vocabulary/stacks.yaml applied."""
    api_names: ApiNames
    """The CUDA API families (what counts as a launch, a sync ...), extended by each team's api_names.yaml."""
    ruleset: RuleSet
    """The profile rules with their settings in force, and every non-default setting (fact params included)."""
    run_ruleset: RuleSet
    """The cross-rank rules with their settings in force."""
    config: Config
    """The configuration one profile is diagnosed with (the settings of cross-rank rules split off)."""


def load_pack(config: Config | None = None) -> Pack:
    """Load and check everything a diagnosis needs besides the export: the bundled pack with each team directory
    laid over it. Raises a PackError (a broken rule, fact or vocabulary file) or a ConfigError: one sentence for the
    whole run, never one per profile or rank."""
    config = config or Config()
    fact_defs, rules = load_rule_set(config)
    # A configuration shared with multi-rank runs may tune cross-rank rules: one profile ignores those settings,
    # but a typo gets its did-you-mean over all the rules.
    run_rules = load_rules(fact_defs, config.rule_dirs, scope="run")
    everything = RuleSet.from_config({**rules, **run_rules}, config, fact_defs)
    return Pack(facts=fact_defs, rules=rules, run_rules=run_rules,
                op_classes=load_operation_classes(config.rule_dirs), headlines=load_headlines(config.rule_dirs),
                stacks=load_stacks(config.rule_dirs), api_names=load_api_names(config.rule_dirs),
                ruleset=everything.only(rules), run_ruleset=everything.only(run_rules, fact_settings=False),
                config=split_config(config, set(run_rules))[0])


def profile_summary(export: Export, stack: StackInfo | None = None) -> ProfileSummary:
    info = export.info
    devices = [Device(device_id=device_id, name=name, used=used, sm_count=sm_count,
                      memory_bandwidth_bytes_per_s=bandwidth)
               for device_id, name, used, sm_count, bandwidth in export.query(
                   "SELECT device_id, name, used, sm_count, memory_bandwidth_bytes_per_s FROM devices "
                   "ORDER BY device_id")]
    if info.source_format == "kineto":
        producer = f"{info.producer or 'PyTorch profiler'} trace"
    else:
        producer = f"nsys {info.nsys_version}" if info.nsys_version else "nsys version not recorded"
    return ProfileSummary(
        path=info.path, source_format="kineto" if info.source_format == "kineto" else "nsys", producer=producer,
        rank=info.rank, world_size=info.world_size, nsys_version=info.nsys_version, schema_version=info.schema_version,
        export_time_utc=info.export_time_utc, graph_trace_mode=info.graph_trace_mode,
        duration_ns=info.duration_ns, stack=stack, devices=devices,
        views={name: {"rows": s.rows, "reason": s.reason} for name, s in export.views.items()})


def build_report(export: Export, facts: FactSet, pack: Pack, tokens: int | None = None,
                 what_if_batch: int | None = None, capture_preset: str | None = None) -> Report:
    """`pack`: the rules, facts, wording and settings in force (load_pack); `what_if_batch`: project that many
    requests per step (`--what-if batch=N`); `capture_preset`: the preset `diagnose profile` captured with, which
    the `diagnose profile` line of a capture finding keeps."""
    ruleset, rules, fact_defs = pack.ruleset, pack.rules, pack.facts
    stack = detect_stack(facts)
    evaluation = judge_phases(evaluate(ruleset, facts, stack=stack.lineage, capture_preset=capture_preset),
                              ruleset, facts, fact_defs, stack=stack.lineage, capture_preset=capture_preset,
                              said=pack.headlines)
    evaluation.findings = merge_gpus(merge_agreeing(evaluation.findings,
                                                    {r.id: r.spec.absorbs for r in rules.values() if r.spec.absorbs}))
    blocking = {r.id for r in rules.values() if r.spec.blocking}
    # The facts marked `-- @report` in their headers (helpers and very long tables are left out or cut).
    shown = reported_facts(fact_defs)
    reported = {f.name: facts.rows(f.name)[:f.report_rows] for f in shown if f.name in facts.results}
    for name, result in facts.results.items():  # team facts are reported too, 200 rows unless `@report rows=N`
        if name not in reported and fact_defs[name].team:
            reported[name] = result.rows[:fact_defs[name].report_rows or 200]
    per_phase = [f.name for f in shown if f.report_per_phase]
    startup = startup_summary(facts, pack.headlines)
    check_tokens(facts.rows("steps") if "steps" in facts.results else [], tokens)
    report = Report(
        tool_version=tool_version(), profile=profile_summary(export, stack),
        verdict=verdict(evaluation, facts, blocking, idle_cause_rules(rules), pack.headlines,
                        {r.spec.category for r in rules.values() if r.overhead}, stack.name),
        metrics=facts.first("summary"),
        findings=evaluation.findings, passed=evaluation.passed, skipped=evaluation.skipped,
        overrides=list(ruleset.overrides), facts=reported,
        phase_facts={phase: {name: scoped.rows(name) for name in per_phase if name in scoped.results}
                     for phase, scoped in facts.phases.items()},
        throughput=throughput(_judged_ns(export, startup), facts.rows("steps") if "steps" in facts.results else [],
                              tokens),
        startup=startup)
    _what_ifs(report, facts, rules, what_if_batch)
    _fold(report, rules, pack.headlines)
    # The key metrics are judged against the same rule params the evaluation used (diagnose.yaml, --set).
    report.key_metrics = key_metric_rows(report, rule_thresholds(ruleset))
    report.window = window_breakdown(facts.rows("gpu_utilization") if "gpu_utilization" in facts.results else [])
    if "operation_classes" in facts.results:
        report.operations = operation_breakdown(
            facts.rows("operation_classes"),
            {phase: scoped.rows("operation_classes") for phase, scoped in facts.phases.items()
             if "operation_classes" in scoped.results})
    return report


def _what_ifs(report: Report, facts: FactSet, rules: dict[str, Rule], batch: int | None) -> None:
    """What removing each cause would buy (Finding.what_if), and a larger batch (Report.batch_what_if)."""
    transforms = {r.id: (r.spec.what_if, r.spec.impact) for r in rules.values() if r.spec.what_if is not None}
    whatif.attach(report.findings, transforms, facts, report.throughput)
    primary = next((f for f in report.findings if f.rule == report.verdict.rule
                    and f.subject == report.verdict.subject), None)
    stack = report.profile.stack.name if report.profile.stack else None
    serving = whatif.serves_llm(stack, facts, report.throughput.tokens if report.throughput else None)
    report.batch_what_if = whatif.batch_projection(facts, batch, primary,
                                                   transforms.get(report.verdict.rule or "", (None, None))[0], serving)


def _fold(report: Report, rules: dict[str, Rule], said: Headlines) -> None:
    """One finding per cause: restatements fold into the finding they restate, and findings whose cost rounds to
    0 % go to the "also checked" line. The verdict's own finding leads whatever restates it and always stays."""
    def key(f: Finding) -> tuple[str, str | None]:
        return f.rule, f.subject

    named = (report.verdict.rule, report.verdict.subject)
    shares = {r.id: r.spec.impact for r in rules.values() if r.spec.impact}
    folded = {key(f): f for f in fold_restatements(
        [f for f in report.findings if key(f) == named] + [f for f in report.findings if key(f) != named], shares)}
    ordered = [folded[key(f)] for f in report.findings if key(f) in folded]
    kept, report.also_checked = set_aside_negligible([f for f in ordered if key(f) != named], said)
    listed = {id(f) for f in kept}
    report.findings = [f for f in ordered if key(f) == named or id(f) in listed]


def _judged_ns(export: Export, startup: StartUp | None) -> int | None:
    """The time the rates are computed over: the steady window after a start-up, else the capture."""
    return startup.steady_ns if startup is not None and startup.judged_after else export.info.duration_ns


def load_rule_set(config: Config) -> tuple[dict[str, Fact], dict[str, Rule]]:
    """Bundled facts and rules plus those of the configured team directories."""
    for d in config.rule_dirs:
        if not Path(d).is_dir():
            raise ConfigError(f"rule directory {d} does not exist")
    fact_defs = load_facts(list(config.rule_dirs))
    rules = load_rules(fact_defs, config.rule_dirs)
    return fact_defs, rules


def diagnose(path: str | Path, config: Config | None = None, *, tokens: int | None = None,
             progress: Callable[[str], None] | None = None, cache: bool = True, threads: int | None = None,
             share: int = 1, cache_dir: str | Path | None = None, what_if_batch: int | None = None,
             capture_preset: str | None = None,
             timings: Timings | None = None, pack: Pack | None = None,
             formats: Collection[str] | None = None) -> Report:
    """Diagnose one export. `tokens`: output tokens the profiled run generated (adds tokens/s).
    `cache`: reuse (or save) the canonical tables in the user's cache directory, or `cache_dir` (see
    engine/reading/cache.py); False reads the export afresh.
    `threads`, `share`: DuckDB threads, and how many diagnoses run side by side sharing the memory limit.
    `timings`: record where the time goes there (engine/base/timings.py): reading, each fact, judging.
    `pack`: the pack already loaded for `config` (load_pack), as a batch or a multi-rank run shares it.
    `formats`: the report formats that will be rendered (engine/reports/render.py FORMATS): only the facts those
    and the enabled rules read are computed (engine/runs/selection.py); None computes every fact."""
    stages = timings.stage if timings else lambda _: contextlib.nullcontext()
    with contextlib.ExitStack() as early:
        # The cache key hashes the whole export: on another core while the rules load.
        opened = prefetch_profile(path) if cache and pack is None else None
        if opened is not None:
            early.callback(opened.close)
        if pack is None:
            with stages("load the rules and facts"):
                pack = load_pack(config)  # a broken pack or setting stops the run before the export is read
        return _diagnose(path, pack, opened, stages, tokens=tokens, progress=progress, cache=cache,
                         threads=threads, share=share, cache_dir=cache_dir, what_if_batch=what_if_batch,
                         capture_preset=capture_preset, timings=timings, formats=formats)


def _diagnose(path: str | Path, pack: Pack, opened: ProfileFile | None, stages: Callable[[str], Any], *,
              tokens: int | None, progress: Callable[[str], None] | None, cache: bool, threads: int | None,
              share: int, cache_dir: str | Path | None, what_if_batch: int | None, capture_preset: str | None,
              timings: Timings | None, formats: Collection[str] | None = None) -> Report:
    config, fact_defs, rules = pack.config, pack.facts, pack.rules
    enabled = [rule for rule in rules.values() if rule.id not in pack.ruleset.disabled]
    selected = facts_to_compute(fact_defs, enabled, formats)
    if timings:
        timings.skipped = skipped(fact_defs, selected)
    try:
        with contextlib.ExitStack() as scope:
            with stages("read the export"):
                export = scope.enter_context(open_export(path, progress=progress, cache=cache, threads=threads,
                                                         share=share, cache_dir=cache_dir, opened=opened))
            if timings:
                scope.callback(timings.close)  # the spill sampler stops before the export's connection closes
            try:
                params = {k: s.value for k, s in config.fact_params.items()}
                if what_if_batch:  # the batch projection is replayed in SQL (_whatif_steps)
                    params["whatif_batch"] = what_if_batch
                with stages("compute the facts"):
                    facts = facts_of(export, params=params,
                                     phase_patterns=config.phase_patterns, facts=selected, progress=progress,
                                     startup_patterns=config.startup_patterns, step_patterns=config.step_patterns,
                                     op_classes=pack.op_classes, timings=timings, stacks=pack.stacks,
                                     api_names=pack.api_names, catalog=fact_defs)
            except FactOverflowError as exc:
                raise InputError(f"{path} holds values too large to compute with ({exc}); the export looks "
                                 f"damaged or hand-edited, so export the profile again with "
                                 f"`nsys export --type sqlite`.") from None
            except FactError as exc:
                users = sorted(r.id for r in rules.values() if r.spec.fact == exc.fact)
                if users:
                    raise FactError(f"{exc} (needed by rule{'s' if len(users) > 1 else ''} {', '.join(users)})",
                                    exc.fact) from None
                raise
            with stages("judge and build the report"):
                return build_report(export, facts, pack, tokens, what_if_batch, capture_preset)
    except RuntimeError as exc:  # Ctrl-C inside a DuckDB query surfaces as RuntimeError('Query interrupted')
        reraise_interrupt(exc)
        raise
