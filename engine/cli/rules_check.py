"""`diagnose rules check [PATHS]`: every problem of the rule files, test files (of rules and facts) and facts a
run would load, found before any profile is read, one `FILE:LINE:COL: message` per line."""

from __future__ import annotations

from pathlib import Path

from ..diagnosis.config import Config
from ..diagnosis.evaluate import check_templates
from ..pack.headlines import HeadlineError, load_headlines
from ..pack.opclasses import OpClassError, load_operation_classes
from ..pack.stacks import StackError, load_stacks
from ..diagnosis.rule_spec import RuleError
from ..diagnosis.rules import bundled_rules_dir, load_rule_file, load_rules, problem_position, rule_files
from ..authoring.facttest import FactTestError, find_fact_tests, load_fact_test
from ..authoring.ruletest import RuleTestError, find_test_files, load_test_file
from ..base.duck import offline_connection
from ..base.errors import DiagnoseError
from ..facts.catalog import Fact, FactError, run_order
from ..facts.loading import load_facts
from ..facts.compile_check import check_facts, compile_facts
from ..facts.cross_rank import load_run_facts, ranks_table_ddl
from ..facts.needs import needs_problems
from ..pack.apinames import ApiNamesError, load_api_names
from .exits import EXIT_ERROR, EXIT_OK


def is_bundled(path: Path) -> bool:
    root = bundled_rules_dir().resolve()
    p = path.resolve()
    return p == root or root in p.parents


def team_dirs(paths: list[Path]) -> list[Path]:
    """Directories of the given paths that hold team rules (bundled ones are always loaded)."""
    dirs = [(p if p.is_dir() else p.parent).resolve() for p in paths]
    return [d for d in dict.fromkeys(dirs) if not is_bundled(d)]


def refuse_missing(paths: list[Path]) -> None:
    """One sentence for the first path that does not exist, before its directory is loaded as a team pack."""
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise DiagnoseError(f"{missing[0]}: no such file or directory")


def check_rules(config: Config, paths: list[Path]) -> int:
    targets = paths or [bundled_rules_dir(), *config.rule_dirs]
    refuse_missing(targets)
    team = list(dict.fromkeys(config.rule_dirs + team_dirs(paths)))
    errors: list[str] = []
    try:
        facts: dict[str, Fact] | None = load_facts(team, check_reads=False)  # needs_problems lists them all
    except FactError as exc:
        facts, errors = None, [str(exc)]
    try:  # the pack's operation classes (DIR/operation_classes.yaml): patterns compile, keys are known
        load_operation_classes(team)
    except OpClassError as exc:
        errors.append(str(exc))
    try:  # the pack's software stacks (DIR/vocabulary/stacks.yaml): keys, lineages, presets, patterns compile
        load_stacks(team)
    except StackError as exc:
        errors.append(str(exc))
    try:  # the pack's CUDA API families (DIR/vocabulary/api_names.yaml): known families, names, no shadowing
        load_api_names(team)
    except ApiNamesError as exc:
        errors.append(str(exc))
    try:  # the pack's headline wording (DIR/headlines.yaml): known sentences, their placeholders only
        load_headlines(team)
    except HeadlineError as exc:
        errors += exc.problems
    files = [f for p in targets for f in (rule_files(p) if p.is_dir() else [p])
             if f.suffix in (".yaml", ".yml") and not f.name.endswith(".test.yaml")]
    if facts is not None:
        for f in files:
            errors += check_rule_file(f, facts)
        errors += check_facts(facts)  # typos, stale @column lines, what the run's sandbox and bounds would refuse
        errors += needs_problems(facts, [name for name, fact in facts.items() if fact.team])  # -- @needs as read
        errors += _check_run_facts()
    notes: list[str] = []
    if facts is not None:  # namespacing, duplicate ids, and the test files against the rules that load
        broken: list[Path] = []
        try:
            rules = load_rules(facts, team, scope=None, broken=broken)
        except RuleError as exc:
            errors += [p for p in exc.problems if p not in errors]
            rules = None
        if rules is not None:
            for t in find_test_files([p for p in targets if p.is_dir() or p.name.endswith(".test.yaml")]):
                rule_file = t.with_name(t.name.removesuffix(".test.yaml") + ".yaml")
                if rule_file.resolve() in {b.resolve() for b in broken}:
                    notes.append(f"note: {t}: not checked: its rule file {rule_file.name} has errors")
                    continue
                try:
                    load_test_file(t, rules, facts)
                except RuleTestError as exc:
                    errors.append(str(exc))
        for t in find_fact_tests([p for p in targets if p.is_dir()]):
            try:
                load_fact_test(t, facts)
            except FactTestError as exc:
                errors.append(str(exc))
    errors = list(dict.fromkeys(errors))  # a broken vocabulary file is found by the pack and by each rule using it
    for line in errors + notes:
        print(line)
    print(f"checked {len(files)} rule file{'s' if len(files) != 1 else ''}: "
          f"{len(errors)} error{'s' if len(errors) != 1 else ''}")
    return EXIT_ERROR if errors else EXIT_OK


def check_rule_file(path: Path, facts: dict[str, Fact]) -> list[str]:
    """Every problem of one rule file, top to bottom: those load_rule_file lists, and the templates that fail
    on sample rows (all columns 0, 1 or None) when the rest of the rule is sound enough to try them."""
    try:
        rule = load_rule_file(path, facts, "bundled" if is_bundled(path) else str(path.parent))
        problems: list[str] = []
    except RuleError as exc:
        problems, failed = list(exc.problems), exc.rule
        if failed is None:
            return problems
        rule = failed
    fact_defs = load_run_facts() if rule.spec.scope == "run" else facts
    problems += [str(e) for e in check_templates(rule, fact_defs[rule.spec.fact].column_names)]
    return sorted(dict.fromkeys(problems), key=problem_position)


def _check_run_facts() -> list[str]:
    """The cross-rank facts compiled over an empty `ranks` table, as check_facts() does for the others."""
    con = offline_connection(threads=1)
    try:
        con.execute(ranks_table_ddl())
        return compile_facts(con, run_order(load_run_facts()))
    finally:
        con.close()
