"""The checks of a rule file's content: its keys validated against RuleSpec, then its category, id, fact,
conditions, params, impact, evidence and templates checked against the facts and categories; every problem a
RuleError positioned in the file (engine/diagnosis/rules.py loads the files)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ..base.text import did_you_mean
from ..facts.catalog import Fact
from ..facts.cross_rank import load_run_facts
from .templating import compile_problem
from ..base.units import PARAM_UNITS, column_unit
from ..base.vocabulary import IDLE_CAUSES, Severity
from ..pack.categories import CATEGORY_FILE, Category, CategoryError, load_categories, team_category_file
from ..pack.layout import VOCABULARY_DIR
from ..pack.stacks import STACKS_FILE, StackError, load_stacks
from .rule_conditions import Condition, parse_condition
from .rule_spec import Rule, RuleError, RuleSpec, template_fields


def _check_condition(text: str, key: str, spec: RuleSpec, check_column, err,
                     params_known: bool) -> tuple[Condition | None, list[RuleError]]:
    """The parsed condition and its problems: unknown columns and params, a param unit the column does not
    share. `check_column` returns the problem of a column, or None; `params_known`: the params validated."""
    try:
        cond = parse_condition(text)
    except ValueError as exc:
        return None, [err(key, str(exc))]
    problems: list[RuleError] = []
    col_unit = None
    for side in (cond.left, cond.right):
        if side.kind in ("column", "fact"):
            problem = check_column(side.value, key)
            if problem is not None:
                problems.append(problem)
            col_unit = column_unit(side.value if side.kind == "column" else side.value[1])
        elif side.kind == "param" and params_known and side.value not in spec.params:
            problems.append(err(key, f"param ${side.value} is not declared under params"
                                     f"{did_you_mean(side.value, list(spec.params))}"))
    if problems or not params_known:
        return cond, problems
    for side in (cond.left, cond.right):
        if side.kind == "param" and col_unit is not None:
            p_unit = spec.params[side.value].unit
            if PARAM_UNITS[p_unit][0] != col_unit and col_unit not in ("number", "id"):
                problems.append(err(key, f"param ${side.value} is in {p_unit!r} but the column it is compared "
                                         f"with is in {col_unit!r}"))
    return cond, problems


# Valid stand-ins for the required keys a file gets wrong, so its other keys are still checked.
_STAND_INS: dict[str, Any] = {"id": "x", "title": "", "category": "", "severity": Severity.INFO, "fact": "",
                              "when": ["x == 0"], "message": "", "why": "", "remediation": [""]}


def _validation_problem(error: ErrorDetails, err) -> RuleError:
    loc = ".".join(str(p) for p in error["loc"])
    key = ".".join(str(p) for p in error["loc"][:2])
    if error["type"] == "extra_forbidden":
        return err(key, f"unknown key {loc!r}{did_you_mean(str(error['loc'][-1]), list(RuleSpec.model_fields))}")
    if error["type"] == "missing":
        return err(key, f"missing required key {loc!r}")
    return err(key, f"{loc}: {error['msg'].removeprefix('Value error, ')}")


def validate_spec(data: dict[str, Any], err, problems: list[RuleError]) -> tuple[RuleSpec | None, set[str]]:
    """The spec, and the top-level keys that failed validation (each failure appended to `problems`). When
    keys fail, the spec is built from the others and stand-ins, so the checks that do not depend on the
    failed keys still run; None when even that fails."""
    try:
        return RuleSpec.model_validate(data), set()
    except ValidationError as exc:
        errors = exc.errors()
    problems += [_validation_problem(e, err) for e in errors]
    bad = {str(e["loc"][0]) for e in errors if e["loc"]}
    try:
        return RuleSpec.model_validate({**_STAND_INS, **{k: v for k, v in data.items() if k not in bad}}), bad
    except ValidationError:
        return None, bad


def stack_keys_for(path: Path, source: str) -> tuple[str, ...]:
    """The stack keys a rule file checked on its own may name: the bundled ones, and for a team file those of the
    nearest DIR/vocabulary/stacks.yaml in its directory or above it."""
    team_dir = None if source == "bundled" else next(
        (d for d in path.resolve().parents if (d / VOCABULARY_DIR / STACKS_FILE).is_file()), None)
    return load_stacks([team_dir] if team_dir else []).keys()


def check_stack_keys(spec: RuleSpec, bad: set[str], stack_keys: Collection[str], err,
                     problems: list[RuleError]) -> None:
    """Each stack named under stack_remediation and stack_references is a stack of the pack in force."""
    for field in ("stack_remediation", "stack_references"):
        if field in bad:
            continue
        for key in getattr(spec, field):
            if key not in stack_keys:
                problems.append(err(f"{field}.{key}", f"{field} names the stack {key!r}, which no {STACKS_FILE} "
                                                      f"defines{did_you_mean(key, list(stack_keys))}; use one of "
                                                      f"{', '.join(stack_keys)}, or define it in the "
                                                      f"{VOCABULARY_DIR}/{STACKS_FILE} of your team rules"))


def check_spec(spec: RuleSpec, bad: set[str], path: Path, source: str, facts: dict[str, Fact],
               categories: dict[str, Category] | None, err, problems: list[RuleError],
               stack_keys: Collection[str] | None = None) -> Rule | None:
    """Check a validated spec against the categories, the file name, the facts and its params, appending each
    problem; keys in `bad` failed validation, and the checks that read them are left out. The rule, or None
    when its fact is unknown (its templates cannot be tried on the fact's columns then). `stack_keys`: the stacks
    the pack in force defines (default: stack_keys_for the file)."""
    if stack_keys is None:
        try:
            stack_keys = stack_keys_for(path, source)
        except StackError as exc:
            problems.append(RuleError(str(exc)))
    if stack_keys is not None:
        check_stack_keys(spec, bad, stack_keys, err, problems)
    if categories is None:
        team_file = None if source == "bundled" else team_category_file(path)
        try:
            categories = load_categories([team_file] if team_file else [])
        except CategoryError as exc:
            problems.append(RuleError(str(exc)))
            categories = None
    if categories is not None and "category" not in bad:
        if spec.category not in categories:
            problems.append(err("category", f"unknown category {spec.category!r}"
                                            f"{did_you_mean(spec.category, list(categories))}; use one of "
                                            f"{', '.join(categories)}, or define it in a {CATEGORY_FILE} beside "
                                            f"your team rules"))
        elif spec.kind is None:
            spec.kind = categories[spec.category].kind
    if "id" not in bad and spec.id.split("/")[-1] != path.stem and spec.id != path.stem:
        problems.append(err("id", f"id {spec.id!r} must equal the file name stem {path.stem!r}"))
    fact = None
    if not bad & {"fact", "scope"}:
        fact, problem = _rule_fact(spec, facts, err)
        if problem is not None:
            problems.append(problem)
    columns = fact.column_names if fact is not None else None
    rule = Rule(spec, str(path), source)
    if categories is not None and spec.category in categories:
        rule.overhead = categories[spec.category].overhead

    def check_column(name: str | tuple[str, str], key: str) -> RuleError | None:
        if isinstance(name, tuple):
            return err(key, f"{'.'.join(name)}: a FACT.COLUMN operand reads another fact, which only a remediation "
                            f"step's `when` may do; a rule's own conditions read the columns of its fact "
                            f"{spec.fact!r}")
        if columns is None or name in columns:
            return None
        return err(key, f"fact {spec.fact!r} has no column {name!r}{did_you_mean(name, columns)}")

    def check_step_column(name: str | tuple[str, str], key: str) -> RuleError | None:
        if not isinstance(name, tuple):
            return check_column(name, key)
        other, column = name
        public = [n for n, f in facts.items() if not f.is_helper]
        if other not in public:
            return err(key, f"unknown fact {other!r} in {other}.{column}{did_you_mean(other, public)}")
        known = facts[other].column_names
        if column not in known:
            return err(key, f"fact {other!r} has no column {column!r}{did_you_mean(column, known)}")
        return None

    params_known = "params" not in bad
    for group, texts, target in (("when", spec.when, rule.conditions),
                                 ("when_any", spec.when_any, rule.any_conditions)):
        if group in bad:
            continue
        for i, text_cond in enumerate(texts):
            cond, found = _check_condition(text_cond, f"{group}.{i}", spec, check_column, err, params_known)
            problems += found
            if cond is not None:
                target.append(cond)
    steps = [] if "remediation" in bad else [(f"remediation.{i}", step) for i, step in enumerate(spec.remediation)]
    if "stack_remediation" not in bad:
        steps += [(f"stack_remediation.{stack}.{i}", step) for stack, items in spec.stack_remediation.items()
                  for i, step in enumerate(items)]
    for key, step in steps:
        if isinstance(step, str):
            continue
        parsed: list[Condition] = []
        for text_cond in step.when:
            cond, found = _check_condition(text_cond, key, spec, check_step_column, err, params_known)
            problems += found
            if cond is not None:
                parsed.append(cond)
        rule.step_conditions[key] = parsed
    causes = [c.key for c in IDLE_CAUSES if c.key != "other"]
    if spec.idle_cause is not None and "idle_cause" not in bad and spec.idle_cause not in causes:
        problems.append(err("idle_cause", f"unknown idle cause {spec.idle_cause!r}"
                                          f"{did_you_mean(spec.idle_cause, causes)}; use one of {', '.join(causes)}"))
    if spec.impact is not None and "impact" not in bad:
        problem = check_column(spec.impact, "impact")
        if problem is None and column_unit(spec.impact) != "ratio":
            problem = err("impact", f"impact column {spec.impact!r} must be a 0-1 share of time (a *_fraction column)")
        if problem is not None:
            problems.append(problem)
    if isinstance(spec.info_below_impact, str) and "info_below_impact" not in bad:
        ref = spec.info_below_impact.lstrip("$")
        if params_known and ref not in spec.params:
            problems.append(err("info_below_impact", f"param ${ref} is not declared under params"))
        elif spec.impact is None and "impact" not in bad:
            problems.append(err("info_below_impact", "info_below_impact needs an impact column"))
    if "evidence" not in bad:
        problems += [p for i, ev in enumerate(spec.evidence) if (p := check_column(ev.column, f"evidence.{i}"))]
    return rule if fact is not None else None


def _rule_fact(spec: RuleSpec, facts: dict[str, Fact], err) -> tuple[Fact | None, RuleError | None]:
    """The fact the rule reads (a cross-rank one for `scope: run`), or the problem naming it."""
    if spec.scope == "run":  # cross-rank rules read the facts of rules/facts/cross_rank
        facts, other = load_run_facts(), facts
        hint = "; a rule with `scope: run` reads a cross-rank fact of rules/facts/cross_rank, such as 'rank_balance'"
    else:
        other, hint = load_run_facts(), "; it is a cross-rank fact: add `scope: run` to judge multi-rank runs"
    if spec.fact not in facts or facts[spec.fact].is_helper:
        public = [n for n, f in facts.items() if not f.is_helper]
        extra = hint if spec.fact in other else did_you_mean(spec.fact, public)
        return None, err("fact", f"unknown fact {spec.fact!r}{extra}")
    return facts[spec.fact], None


def template_errors(data: dict[str, Any], err) -> list[RuleError]:
    return [err(key, f"its {name} template {problem}") for key, name, text in template_fields(data)
            if (problem := compile_problem(text)) is not None]
