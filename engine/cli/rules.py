"""`diagnose rules list|explain|check|test`: tooling for teams that write or tune rules. Its command line is
parser(), beside run(); `rules check` lives in rules_check.py."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from ..pack.presets import capture_line
from ..pack.stacks import bundled_stacks
from ..diagnosis.config import Config, resolve_config
from ..diagnosis.rule_spec import Rule, StepSpec
from ..diagnosis.rules import bundled_rules_dir, load_rules
from ..diagnosis.ruleset import RuleSet
from ..diagnosis import templating
from ..model.findings import Finding
from ..authoring.ruletest import FactCache, example_finding, find_test_files, load_test_file, run_rule_tests
from ..base.errors import DiagnoseError
from ..pack.apinames import load_api_names
from ..pack.stacks import load_stacks
from ..pack.opclasses import load_operation_classes
from ..facts.catalog import Fact
from ..facts.loading import load_facts
from ..base.text import did_you_mean
from ..base.text import term
from .exits import EXIT_FINDINGS, EXIT_OK, exit_codes_help
from .interrupt import StopRequest
from .options import CommandParser, add_colour, add_config, add_debug, add_quiet, add_set, add_version
from .progress import Progress
from .rules_check import check_rules, refuse_missing, team_dirs
from .tables import aligned

EXIT_FAILED = EXIT_FINDINGS


def parser() -> argparse.ArgumentParser:
    epilog = exit_codes_help("rules")  # on `diagnose rules` and on each of its commands
    p = CommandParser(prog="diagnose rules", description="List, explain, check and test diagnosis rules.",
                        epilog=epilog)
    add_config(p)
    add_quiet(p, "rules test: print only the failed cases and the count")
    add_colour(p, None)
    add_debug(p)
    add_version(p)
    sub = p.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    commands = [
        sub.add_parser("list", help="every rule: id, category, severity, scope (profile or multi-rank run), source"),
        explain := sub.add_parser("explain", help="what a rule detects, why, its params, remediation and an example"),
        check := sub.add_parser("check", help="validate rule files and compile every fact's SQL; every error as "
                                              "file:line:col"),
        test := sub.add_parser("test", help="run <id>.test.yaml cases"),
    ]
    explain.add_argument("rule_id")
    add_set(explain, "show the rule with a param, severity or enabled set, e.g. launch-bound.max_overhead_ratio=0.2 "
                      "(as for diagnose); repeatable")
    check.add_argument("paths", nargs="*", type=Path, help="rule directories or files (default: all loaded)")
    test.add_argument("paths", nargs="*", type=Path, help="directories or .test.yaml files (default: all loaded)")
    for command in commands:
        command.epilog = epilog
        add_config(command, after=True)
        add_quiet(command, "rules test: print only the failed cases and the count", after=True)
        add_colour(command, None, after=True)
        add_debug(command, after=True)
    return p


def run(args: argparse.Namespace, stop: StopRequest) -> int:
    config = resolve_config(args.config, args.rule_dirs, getattr(args, "sets", []))
    if args.command == "list":
        return cmd_list(config)
    if args.command == "explain":
        return cmd_explain(config, args.rule_id)
    if args.command == "check":
        return check_rules(config, args.paths)
    return cmd_test(config, args.paths, quiet=args.quiet, progress=Progress(stop, quiet=args.quiet))


def cmd_list(config: Config) -> int:
    facts = load_facts(config.rule_dirs)
    rules = load_rules(facts, config.rule_dirs, scope=None)
    rows = [[r.id, r.spec.category, str(r.spec.severity), r.spec.scope, r.source]
            for r in sorted(rules.values(), key=lambda r: (r.source != "bundled", r.spec.category, r.id))]
    print("\n".join(term(line) for line in aligned(("id", "category", "severity", "scope", "source"), rows)))
    return EXIT_OK


def cmd_explain(config: Config, rule_id: str) -> int:
    facts = load_facts(config.rule_dirs)
    rules = load_rules(facts, config.rule_dirs, scope=None)
    if rule_id not in rules:
        hint = did_you_mean(rule_id, list(rules)) or "; `diagnose rules list` shows them all"
        raise DiagnoseError(f"no rule {rule_id!r}{hint}")
    rule = rules[rule_id]
    spec = rule.spec
    ruleset = RuleSet.from_config(rules, config, facts)  # diagnose.yaml and --set, refused as `diagnose` refuses them
    set_by = {o.target: o for o in ruleset.overrides}
    severity = f"severity {ruleset.severity(rule_id)}" + (
        f" ({_where(set_by[f'{rule_id}.severity'].origin)}; default {spec.severity})"
        if f"{rule_id}.severity" in set_by else "")
    wrap = lambda text, indent="  ": textwrap.fill(" ".join(str(text).split()), 96, initial_indent=indent,  # noqa: E731
                                                  subsequent_indent=indent)
    lines = [f"{spec.id}: {spec.title}",
             f"  category {spec.category} · {spec.kind} · {severity} · fact {spec.fact} · {rule.path}",
             *([f"  disabled ({_where(set_by[f'{rule_id}.enabled'].origin)}): it judges nothing"]
               if rule_id in ruleset.disabled else []),
             *(["  scope run: judged across the ranks of a multi-rank run (`diagnose RANK0 RANK1 ...` or "
                "`diagnose RUN_DIR`)"] if spec.scope == "run" else []),
             "", "What it detects (all must hold, per row of the fact):"]
    lines += [f"  - {c}" for c in spec.when]
    if spec.when_any:
        lines += ["  and at least one of:"] + [f"  - {c}" for c in spec.when_any]
    if spec.impact:
        lines.append(f"  Impact on the verdict: {spec.impact} (share of GPU time)")
    if spec.idle_cause:
        lines.append(f"  Judges the idle cause {spec.idle_cause!r}: named by the verdict when it explains most of a "
                     f"mostly idle GPU's idle time")
    lines += ["", "Why it matters:", wrap(spec.why), "", "Params:"]
    if spec.params:
        for name, (value, override) in ruleset.explained(rule_id).items():
            p = spec.params[name]
            where = f"{_where(override.origin)}; default {p.default:g}; " if override else ""
            lines.append(f"  {name} = {value:g} {p.unit} ({where}{p.range_text})")
            lines.append(wrap(p.doc, "      "))
        lines.append(f"  Override: --set {spec.id}.PARAM=VALUE or rules: {{{spec.id}: {{PARAM: VALUE}}}} "
                     f"in diagnose.yaml")
    else:
        lines.append("  none")
    example = _example(rule, rules, facts)
    step_line = lambda number, step: _step_line(number, step, example)  # noqa: E731
    lines += ["", "Remediation:" if example is None else
              f"Remediation (as its example finding shows it, on {example[0]}; a step whose condition fails there "
              f"is shown as well):"]
    if spec.capture is not None:
        lines.append(wrap("0. " + capture_line(["cuda"], spec.capture.profile, spec.capture.pass_switches,
                                                spec.capture.nsys)
                          + " The preset follows the profile's stack."))
    lines += [wrap(step_line(i, step)) for i, step in enumerate(spec.remediation, 1)]
    labels = {s.key: s.label for s in bundled_stacks()}
    for stack, steps in spec.stack_remediation.items():
        lines += ["", f"Remediation for {labels[stack]} profiles "
                      f"(shown before the steps above when the profile comes from it):"]
        lines += [wrap(step_line(i, step)) for i, step in enumerate(steps, 1)]
    if spec.references:
        lines += ["", "References:"] + [f"  {ref}" for ref in spec.references]
    for stack, refs in spec.stack_references.items():
        lines += ["", f"References for {labels[stack]} profiles:"] + [f"  {ref}" for ref in refs]
    lines += ["", "Example:"]
    lines.append(wrap(f"[{example[0]}] {example[1].message}" if example is not None
                      else templating.readable(spec.message)))
    print("\n".join(term(line) if "\n" not in line else line for line in lines))
    return EXIT_OK


def _step_line(number: int, step: str | StepSpec, example: _Example | None = None) -> str:
    """'2. Pin host buffers ... (only when pageable_bytes > 0)', its template rendered on the `example`'s row,
    else written with placeholders (templating.readable): never raw Jinja."""
    text = step if isinstance(step, str) else step.text
    text = _readable(text, example)
    if isinstance(step, str):
        return f"{number}. {text}"
    return f"{number}. {text} (only when {' and '.join(step.when)})"


def _readable(source: str, example: _Example | None) -> str:
    """A remediation template as a reader should see it: rendered as the example finding's own steps are (its
    row, the case's params and its impact), else, or when it fails on that row, with placeholders."""
    if example is not None and "{" in source:
        _, finding, params = example
        try:
            return templating.render(source, {"row": finding.row, "params": params, "impact": finding.impact})
        except templating.TemplateFailure:
            pass
    return templating.readable(source)


def _where(origin: str) -> str:
    """Where a setting in force was made: '--set' or the configuration file."""
    return "--set" if origin == "command line" else origin


_Example = tuple[str, Finding, dict[str, float]]


def _example(rule: Rule, rules: dict[str, Rule], facts: dict[str, Fact]) -> _Example | None:
    """The rule's example case (authoring/ruletest.py example_finding): where it comes from, the first finding the
    rule makes on it and the params it was judged with, to show a real message and real remediation steps."""
    test_file = Path(rule.path).with_name(f"{Path(rule.path).stem}.test.yaml")
    if not test_file.is_file():
        return None
    _, cases = load_test_file(test_file, rules, facts)
    cache = FactCache(facts)
    try:
        example = example_finding(rule, test_file, cases, cache)
    finally:
        cache.close()
    if example is None:
        return None
    case, finding = example
    where = case.get("scenario") or case.get("profile") or "inline rows"
    params = {k: float(v) for k, v in (case.get("params") or {}).items()}
    return str(where), finding, dict(RuleSet.resolve({rule.id: rule}, {rule.id: params}).params[rule.id])


def cmd_test(config: Config, paths: list[Path], *, quiet: bool = False, progress: Progress | None = None) -> int:
    """Run the rule tests; `progress`: one line on stderr, rewritten in place on a terminal, while each case runs
    (as `diagnose` shows its stages, engine/cli/progress.py)."""
    refuse_missing(paths)
    extra = list(dict.fromkeys(config.rule_dirs + team_dirs(paths)))
    facts = load_facts(extra)
    rules = load_rules(facts, extra, scope=None)
    files = find_test_files(paths or [bundled_rules_dir(), *config.rule_dirs])
    if not files:
        raise DiagnoseError(f"no *.test.yaml files in {', '.join(map(str, paths)) or 'the loaded rule directories'}")
    try:
        results = run_rule_tests(files, rules, facts, op_classes=load_operation_classes(extra), progress=progress,
                                 stacks=load_stacks(extra), api_names=load_api_names(extra))
    finally:
        if progress is not None:
            progress.clear()
    failed = [r for r in results if not r.passed]
    for r in results:
        if quiet and r.passed:
            continue
        status = "ok  " if r.passed else "FAIL"
        print(f"{status} {r.rule}: {r.name}")
        if not r.passed:
            print(f"       exp: {r.expected}")
            print(f"       got: {r.got}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return EXIT_FAILED if failed else EXIT_OK
