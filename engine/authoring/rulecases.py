"""Loading a rule test file (`<id>.test.yaml`, format: engine/authoring/ruletest.py): every mistake in it is
one `FILE:LINE:COL:` sentence before any case runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..base.errors import DiagnoseError
from ..base.text import did_you_mean
from ..base.units import describe_range
from ..base.vocabulary import Severity
from ..diagnosis.rule_spec import Rule
from ..facts.catalog import Fact, fact_param_range
from ..facts.cross_rank import load_run_facts
from ..facts.types import column_types, fitted
from .testfiles import check_file_keys, find_tests_of_kind, read_test_yaml

_CASE_KEYS = {"name", "scenario", "profile", "rows", "params", "facts", "expect"}
_INPUTS = ("scenario", "profile", "rows")
_EXPECT_KEYS = {"subject", "severity", "message", "evidence"}


class RuleTestError(DiagnoseError):
    pass


def find_test_files(paths: list[Path]) -> list[Path]:
    """The rule test files of `paths` (directories are searched; fact tests in them are left out)."""
    return find_tests_of_kind(paths, fact_tests=False, error=RuleTestError, wrong_kind=lambda p: (
        f"{p}: a fact test (it sits beside {p.name.removesuffix('.test.yaml')}.sql); run it with "
        f"`diagnose facts test {p}`"))


def load_test_file(path: Path, rules: dict[str, Rule],
                   facts: dict[str, Fact]) -> tuple[str, list[dict[str, Any]]]:
    data, at = read_test_yaml(path, RuleTestError)
    check_file_keys(path, data, at, ("rule", "cases"), RuleTestError)
    rule_id = data["rule"]
    if rule_id not in rules:
        raise RuleTestError(f"{path}:{at.of('rule')}: rule {rule_id!r} does not exist, so this test matches "
                            f"nothing{did_you_mean(str(rule_id), list(rules))}")
    cases = data.get("cases") or []
    if not isinstance(cases, list) or not cases:
        raise RuleTestError(f"{path}:{at.of('cases')}: rule {rule_id!r} has no test cases")
    rule = rules[rule_id]
    for i, case in enumerate(cases):
        def where(*keys: object, i: int = i) -> str:
            return f"{path}:{at.of('cases', i, *keys)}: case {i + 1}"

        if not isinstance(case, dict) or set(case) - _CASE_KEYS:
            bad = next((k for k in case if k not in _CASE_KEYS), None) if isinstance(case, dict) else None
            raise RuleTestError(f"{where(bad) if bad is not None else where()}: allowed keys are "
                                f"{', '.join(sorted(_CASE_KEYS))}"
                                f"{did_you_mean(str(bad), sorted(_CASE_KEYS)) if bad is not None else ''}")
        given = [k for k in _INPUTS if k in case]
        if len(given) != 1:
            raise RuleTestError(f"{where(*given[1:2])}: give exactly one of 'scenario', 'profile' or 'rows'")
        if "expect" not in case or not isinstance(case["expect"], list):
            raise RuleTestError(f"{where('expect')}: 'expect' must be the list of expected findings ([] = must "
                                f"not fire)")
        _check_numbers(case, "params", where)
        _check_numbers(case, "facts", where)
        unknown = set(case.get("params") or {}) - set(rule.spec.params)
        if unknown:
            name = sorted(unknown)[0]
            raise RuleTestError(f"{where('params', name)}: rule {rule_id!r} has no param {name!r}"
                                f"{did_you_mean(name, list(rule.spec.params))}")
        fact_params = {p for f in facts.values() for p in f.params}
        unknown = set(case.get("facts") or {}) - fact_params
        if unknown:
            name = sorted(unknown)[0]
            raise RuleTestError(f"{where('facts', name)}: no fact has a param {name!r}"
                                f"{did_you_mean(name, sorted(fact_params))}")
        for name, value in (case.get("params") or {}).items():  # the ranges --set and diagnose.yaml keep to
            spec = rule.spec.params[name]
            if not spec.in_range(float(value)):
                raise RuleTestError(f"{where('params', name)}: params.{name} must be {spec.range_text} (unit: "
                                    f"{spec.unit}), not {value!r}")
        for name, value in (case.get("facts") or {}).items():
            lo, hi = fact_param_range(facts, name)
            if not lo <= float(value) <= hi:
                raise RuleTestError(f"{where('facts', name)}: facts.{name} must be {describe_range(lo, hi)}, not "
                                    f"{value!r}")
        _check_input(case, rule, path, where)
        readable = rule_facts(rule, facts)
        if "rows" in case:
            if "facts" in case:
                raise RuleTestError(f"{where('facts')}: 'facts' sets how facts are computed from a profile; a "
                                    f"case with 'rows' gives the fact rows themselves")
            _check_rows(case["rows"], rule, readable, where)
        _check_expect(case["expect"], readable[rule.spec.fact].column_names, where)
    return rule_id, cases


def _check_input(case: dict[str, Any], rule: Rule, path: Path, where: Callable[..., str]) -> None:
    """A case's `scenario:` is a generated scenario of the kind the rule judges (one profile, or a multi-rank run
    for `scope: run`); its `profile:` exists, relative to the test file."""
    from ..fixtures.generator import SCENARIOS  # fixtures ship inside the package
    from ..fixtures.runs import RUN_SCENARIOS

    run = rule.spec.scope == "run"
    if "scenario" in case:
        name, known = case["scenario"], sorted(RUN_SCENARIOS if run else SCENARIOS)
        if name in known:
            return
        if not run and name in RUN_SCENARIOS:
            raise RuleTestError(f"{where('scenario')}: scenario {name!r} is a multi-rank run, but rule {rule.id!r} "
                                f"judges one profile; cross-rank rules carry `scope: run`")
        if run and name in SCENARIOS:
            raise RuleTestError(f"{where('scenario')}: {name!r} is not a multi-rank run scenario; rule {rule.id!r} "
                                f"(scope: run) is tested on one of {', '.join(known)}, or on a directory of rank "
                                f"exports")
        raise RuleTestError(f"{where('scenario')}: unknown scenario {name!r}"
                            f"{did_you_mean(str(name), known, '; `nsys-diagnose-fixture --list` shows them all')}")
    if "profile" in case:
        target = path.parent / str(case["profile"])
        if run and not target.is_dir():
            raise RuleTestError(f"{where('profile')}: {case['profile']!r} is not a directory of rank exports "
                                f"(relative to the test file)")
        if not run and not target.is_file():
            raise RuleTestError(f"{where('profile')}: profile {case['profile']!r} does not exist (relative to the "
                                f"test file)")


def rule_facts(rule: Rule, facts: dict[str, Fact]) -> dict[str, Fact]:
    """The facts a rule's rows come from: the cross-rank facts for a rule with `scope: run`."""
    return load_run_facts() if rule.spec.scope == "run" else facts


def read_facts(rule: Rule) -> list[str]:
    """The facts a rule reads: its own, then those its remediation steps' FACT.COLUMN conditions name."""
    named = [side.value[0] for conditions in rule.step_conditions.values() for c in conditions
             for side in (c.left, c.right) if side.kind == "fact"]
    return list(dict.fromkeys([rule.spec.fact, *named]))


def _check_rows(rows: Any, rule: Rule, facts: dict[str, Fact], where: Callable[..., str]) -> None:
    """`rows:`: fact name -> list of mappings of that fact's columns, for the facts the rule reads. Each value is
    made the type its column has (4e7, which YAML reads as text, becomes a number), in place, or is an error: a
    text where a number belongs would make every comparison fail and the rule never fire."""
    if not isinstance(rows, dict) or not rows:
        raise RuleTestError(f"{where('rows')}: 'rows' maps fact names to lists of rows, e.g. "
                            f"{{launch_overhead: [{{device_id: 0, overhead_ratio: 0.4}}]}}")
    reads = read_facts(rule)
    for name, fact_rows in rows.items():
        if name not in facts or facts[name].is_helper:
            known = [n for n, f in facts.items() if not f.is_helper]
            raise RuleTestError(f"{where('rows', name)}: no fact {name!r}"
                                f"{did_you_mean(str(name), known) or '; `diagnose facts list` shows them all'}")
        if name not in reads:
            raise RuleTestError(f"{where('rows', name)}: rule {rule.id!r} does not read fact {name!r}, so its rows "
                                f"change nothing; it reads {', '.join(map(repr, reads))}")
        if not isinstance(fact_rows, list) or not all(isinstance(r, dict) for r in fact_rows):
            raise RuleTestError(f"{where('rows', name)}: rows.{name} must be a list of rows, each a mapping of "
                                f"column names to values, e.g. [{{{facts[name].column_names[0]}: 0}}]")
    types = column_types(facts, list(rows), cross_rank=rule.spec.scope == "run")
    for name, fact_rows in rows.items():
        columns = facts[name].column_names
        for j, row in enumerate(fact_rows):
            for column, value in row.items():
                if column not in columns:
                    raise RuleTestError(f"{where('rows', name, j, column)}: fact {name!r} has no column {column!r}"
                                        f"{did_you_mean(str(column), columns)}")
                if isinstance(value, dict):
                    raise RuleTestError(f"{where('rows', name, j, column)}: rows.{name}.{column} must be a value "
                                        f"(number, text, true/false or null), not a mapping")
                row[column], wanted = fitted(types.get(name, {}).get(column, ""), value)
                if wanted:
                    raise RuleTestError(f"{where('rows', name, j, column)}: rows.{name}.{column} is {wanted}, not "
                                        f"{value!r}")


def _check_expect(expect: list[Any], columns: list[str], where: Callable[..., str]) -> None:
    for j, item in enumerate(expect):
        if not isinstance(item, dict) or set(item) - _EXPECT_KEYS:
            bad = next((k for k in item if k not in _EXPECT_KEYS), None) if isinstance(item, dict) else None
            raise RuleTestError(f"{where('expect', j, *([bad] if bad is not None else []))}: each expected finding "
                                f"may name {', '.join(sorted(_EXPECT_KEYS))}"
                                f"{did_you_mean(str(bad), sorted(_EXPECT_KEYS)) if bad is not None else ''}")
        severity = item.get("severity")
        if "severity" in item and severity not in Severity.names():
            listed = f"; a severity is {Severity.described()}"
            raise RuleTestError(f"{where('expect', j, 'severity')}: unknown severity {severity!r}"
                                f"{did_you_mean(str(severity), Severity.names(), listed)}")
        if item.get("subject") is not None and not isinstance(item["subject"], str):
            raise RuleTestError(f"{where('expect', j, 'subject')}: 'subject' is the finding's subject as text, "
                                f"e.g. 'GPU 0', not {item['subject']!r}")
        if "message" in item and not isinstance(item["message"], str):
            raise RuleTestError(f"{where('expect', j, 'message')}: 'message' is a part of the finding's message, "
                                f"as text")
        evidence = item.get("evidence", {})
        if not isinstance(evidence, dict):
            raise RuleTestError(f"{where('expect', j, 'evidence')}: 'evidence' maps fact columns to the values "
                                f"the finding shows, e.g. {{{columns[0] if columns else 'column'}: 1}}")
        for column in evidence:
            if column not in columns:
                raise RuleTestError(f"{where('expect', j, 'evidence', column)}: the rule's fact has no column "
                                    f"{column!r}{did_you_mean(str(column), columns)}")


def _check_numbers(case: dict[str, Any], key: str, where: Callable[..., str]) -> None:
    """A case's `params` / `facts`: a mapping of finite numbers (a NaN threshold silently never fires)."""
    values = case.get(key) or {}
    if not isinstance(values, dict):
        raise RuleTestError(f"{where(key)}: '{key}' must be a mapping of names to numbers, e.g. "
                            f"{{max_overhead_ratio: 0.3}}")
    for name, value in values.items():
        number = None if isinstance(value, bool) else _as_float(value)
        if number is None or number != number or number in (float("inf"), float("-inf")):
            raise RuleTestError(f"{where(key, name)}: {key}.{name} must be a finite number, not {value!r}; write "
                                f"a number such as 0.3")


def _as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
