"""`diagnose rules list|explain|check|test`: tooling for teams that write or tune rules."""

from __future__ import annotations

import argparse
import re
import textwrap
from pathlib import Path

from ..diagnosis.config import Config, resolve_config
from ..errors import DiagnoseError
from .exits import finish
from ..facts.compute import check_team_facts
from ..facts import Fact, FactError, load_facts
from .interrupt import StopRequest
from ..diagnosis.rules import (RuleError, RuleTemplateError, bundled_rules_dir, load_rule_file, load_rules, rule_files,
                    template_errors)
from ..diagnosis.ruletest import RuleTestError, find_test_files, load_test_file, run_rule_tests
from ..text import term

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def _parser(prog: str) -> argparse.ArgumentParser:
    from .main import _ArgumentParser, add_debug_argument

    p = _ArgumentParser(prog=f"{prog} rules", description="List, explain, check and test diagnosis rules.",
                        epilog="Exit codes: 0 success, 1 a failed rule test, 2 a broken rule file, usage or input "
                               "error, 3 internal error (a bug: rerun with --debug and report it).")
    p.add_argument("--config", type=Path, help="configuration file (default: ./diagnose.yaml when present)")
    p.add_argument("--rule-dir", dest="rule_dirs", action="append", type=Path, default=[],
                   help="extra directory of team rules and fact .sql files (repeatable)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    sub.add_parser("list", help="every rule: id, category, severity, scope (profile or multi-rank run), source")
    explain = sub.add_parser("explain", help="what a rule detects, why, its params, remediation and an example")
    explain.add_argument("rule_id")
    check = sub.add_parser("check", help="validate rule files; errors as file:line:col")
    check.add_argument("paths", nargs="*", type=Path, help="rule directories or files (default: all loaded)")
    test = sub.add_parser("test", help="run <id>.test.yaml cases")
    test.add_argument("paths", nargs="*", type=Path, help="directories or .test.yaml files (default: all loaded)")
    add_debug_argument(p)
    return p


def _config(args: argparse.Namespace) -> Config:
    return resolve_config(args.config, args.rule_dirs, [])


def _is_bundled(path: Path) -> bool:
    root = bundled_rules_dir().resolve()
    p = path.resolve()
    return p == root or root in p.parents


def _team_dirs(paths: list[Path]) -> list[Path]:
    """Directories of the given paths that hold team rules (bundled ones are always loaded)."""
    dirs = [(p if p.is_dir() else p.parent).resolve() for p in paths]
    return [d for d in dict.fromkeys(dirs) if not _is_bundled(d)]


def cmd_list(config: Config) -> int:
    facts = load_facts(config.rule_dirs)
    rules = load_rules(facts, config.rule_dirs, scope=None)
    rows = [(r.id, r.spec.category, r.spec.severity, r.spec.scope, "bundled" if r.source == "bundled" else r.source)
            for r in sorted(rules.values(), key=lambda r: (r.source != "bundled", r.spec.category, r.id))]
    head = ("id", "category", "severity", "scope", "source")
    widths = [max(len(str(row[i])) for row in rows + [head]) for i in range(4)]
    out = ["  ".join(f"{text:<{widths[i]}}" if i < 4 else text for i, text in enumerate(row)) for row in [head] + rows]
    print("\n".join(out))
    return EXIT_OK


def cmd_explain(config: Config, rule_id: str) -> int:
    import difflib

    facts = load_facts(config.rule_dirs)
    rules = load_rules(facts, config.rule_dirs, scope=None)
    if rule_id not in rules:
        close = difflib.get_close_matches(rule_id, list(rules), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; `diagnose rules list` shows them all"
        raise DiagnoseError(f"no rule {rule_id!r}{hint}")
    rule = rules[rule_id]
    spec = rule.spec
    wrap = lambda text, indent="  ": textwrap.fill(" ".join(str(text).split()), 96, initial_indent=indent,  # noqa: E731
                                                  subsequent_indent=indent)
    lines = [f"{spec.id}: {spec.title}",
             f"  category {spec.category} · {spec.kind} · severity {spec.severity} · fact {spec.fact} · {rule.path}",
             *(["  scope run: judged across the ranks of a multi-rank run (`diagnose RANK0 RANK1 ...` or "
                "`diagnose RUN_DIR`)"] if spec.scope == "run" else []),
             "", "What it detects (all must hold, per row of the fact):"]
    lines += [f"  - {c}" for c in spec.when]
    if spec.when_any:
        lines += ["  and at least one of:"] + [f"  - {c}" for c in spec.when_any]
    if spec.impact:
        lines.append(f"  Impact on the verdict: {spec.impact} (share of GPU time)")
    lines += ["", "Why it matters:", wrap(spec.why), "", "Params:"]
    if spec.params:
        for name, p in spec.params.items():
            lines.append(f"  {name} = {p.default:g} {p.unit}")
            lines.append(wrap(p.doc, "      "))
        lines.append(f"  Override: --set {spec.id}.PARAM=VALUE or rules: {{{spec.id}: {{PARAM: VALUE}}}} "
                     f"in diagnose.yaml")
    else:
        lines.append("  none")
    lines += ["", "Remediation:"] + [wrap(f"{i}. {step}") for i, step in enumerate(spec.remediation, 1)]
    if spec.references:
        lines += ["", "References:"] + [f"  {ref}" for ref in spec.references]
    lines += ["", "Example:"]
    lines.append(wrap(_example_message(rule, rules, facts) or spec.message))
    print("\n".join(term(line) if "\n" not in line else line for line in lines))
    return EXIT_OK


def _example_message(rule, rules, facts) -> str | None:
    """Run the rule's first firing test case to show a real message."""
    test_file = Path(rule.path).with_name(f"{Path(rule.path).stem}.test.yaml")
    if not test_file.is_file():
        return None
    from ..diagnosis.evaluate import evaluate
    from ..diagnosis.ruletest import _FactCache

    _, cases = load_test_file(test_file, rules, facts)
    firing = [c for c in cases if c["expect"]]
    if not firing:
        return None
    cache = _FactCache(facts)
    try:
        fact_set = cache.get(firing[0], test_file, rule)
    finally:
        cache.close()
    params = {k: float(v) for k, v in (firing[0].get("params") or {}).items()}
    found = evaluate({rule.id: rule}, fact_set, rule_params={rule.id: params}).findings
    if not found:
        return None
    where = firing[0].get("scenario") or firing[0].get("profile")
    return f"[{where}] {found[0].message}"


def cmd_check(config: Config, paths: list[Path]) -> int:
    targets = paths or [bundled_rules_dir(), *config.rule_dirs]
    missing = [p for p in targets if not p.exists()]
    if missing:
        raise DiagnoseError(f"{missing[0]}: no such file or directory")
    team = list(dict.fromkeys(config.rule_dirs + _team_dirs(paths)))
    errors: list[str] = []
    try:
        facts = load_facts(team)
    except FactError as exc:
        facts, errors = None, [str(exc)]
    files = [f for p in targets for f in (rule_files(p) if p.is_dir() else [p])
             if f.suffix in (".yaml", ".yml") and not f.name.endswith(".test.yaml")]
    if facts is not None:
        for f in files:
            errors += _check_file(f, facts)
        errors += check_team_facts(facts)  # what the run's sandbox and bounds would refuse
    if not errors:  # namespacing, duplicate ids, and the test files against the whole set
        try:
            rules = load_rules(facts, team, scope=None)
            for t in find_test_files([p for p in targets if p.is_dir() or p.name.endswith(".test.yaml")]):
                try:
                    load_test_file(t, rules, facts)
                except RuleTestError as exc:
                    errors.append(str(exc))
        except RuleError as exc:
            errors.append(str(exc))
    for e in errors:
        print(e)
    print(f"checked {len(files)} rule file{'s' if len(files) != 1 else ''}: "
          f"{len(errors)} error{'s' if len(errors) != 1 else ''}")
    return EXIT_ERROR if errors else EXIT_OK


def _check_file(path: Path, facts: dict[str, Fact]) -> list[str]:
    """Every error of one rule file: the first structural one, or else every template that does not compile
    or fails on sample rows (all columns 0, 1 or None)."""
    from ..diagnosis.evaluate import check_templates
    from ..facts.cross_rank import load_run_facts

    problems: list[str] = []
    try:
        rule = load_rule_file(path, facts, "bundled" if _is_bundled(path) else str(path.parent))
    except RuleTemplateError as exc:  # the templates that do compile are rendered below
        problems, rule = exc.problems, exc.rule
        if rule is None:
            return problems
    except RuleError as exc:  # the templates are still worth compiling
        return [str(exc), *(e for e in template_errors(path) if e != str(exc))]
    fact_defs = load_run_facts() if rule.spec.scope == "run" else facts
    problems += [str(e) for e in check_templates(rule, fact_defs[rule.spec.fact].column_names)]
    return sorted(problems, key=_position)


def _position(error: str) -> tuple[int, int]:
    """(line, col) of a `FILE:LINE:COL: ...` error, to list a file's errors top to bottom."""
    match = re.match(r"^.*?:(\d+):(\d+): ", error)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def cmd_test(config: Config, paths: list[Path]) -> int:
    extra = list(dict.fromkeys(config.rule_dirs + _team_dirs(paths)))
    facts = load_facts(extra)
    rules = load_rules(facts, extra, scope=None)
    files = find_test_files(paths or [bundled_rules_dir(), *config.rule_dirs])
    if not files:
        raise DiagnoseError(f"no *.test.yaml files in {', '.join(map(str, paths)) or 'the loaded rule directories'}")
    results = run_rule_tests(files, rules, facts)
    failed = [r for r in results if not r.passed]
    for r in results:
        status = "ok  " if r.passed else "FAIL"
        print(f"{status} {r.rule}: {r.name}")
        if not r.passed:
            print(f"       exp: {r.expected}")
            print(f"       got: {r.got}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return EXIT_FAILED if failed else EXIT_OK


def main(argv: list[str], prog: str = "diagnose") -> int:
    args = _parser(prog).parse_args(argv)
    with StopRequest() as stop:
        return finish(prog, lambda: _run(args), stop, debug=args.debug)


def _run(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.command == "list":
        return cmd_list(config)
    if args.command == "explain":
        return cmd_explain(config, args.rule_id)
    if args.command == "check":
        return cmd_check(config, args.paths)
    return cmd_test(config, args.paths)
