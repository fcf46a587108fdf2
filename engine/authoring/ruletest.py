"""Rule tests beside the rules (`<id>.test.yaml`), in the spirit of `promtool test rules`.

    rule: launch-bound
    cases:
      - name: eager decode is launch-bound
        scenario: eager_decode        # a generated fixture scenario ...
        # profile: my-capture.sqlite  # ... or an export, relative to the test file ...
        params: {max_overhead_ratio: 0.3}   # rule params for this case
        facts: {gap_threshold_ns: 5000}     # fact params for this case
        expect:                       # the exhaustive list of this rule's findings
          - {subject: GPU 0, severity: warning}
      - name: healthy prefill stays quiet
        scenario: healthy_prefill
        expect: []                    # must not fire
      - name: just above the ratio    # ... or the fact rows themselves (promtool's input_series)
        rows:
          launch_overhead:            # fact name -> its rows; every fact not given is empty
            - {device_id: 0, overhead_ratio: 0.31, kernel_count: 500}
        expect:
          - subject: GPU 0
            message: overhead ratio 0.31       # a part of the finding's message (spaces as they fall)
            evidence: {overhead_ratio: 0.31}   # evidence values (numbers) or their display ('31 %')

A cross-rank rule (`scope: run`) is tested on a multi-rank run: a generated run scenario
(`multi_rank_straggler`, `multi_rank_balanced`) or `profile:` naming a directory of rank exports; `facts`
params then apply to the diagnosis of each rank. Its `rows:` are rows of the cross-rank facts.

A `NAME.test.yaml` beside a fact's `NAME.sql` is a fact test (engine/authoring/facttest.py), not a rule test.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..base.errors import DiagnoseError
from ..diagnosis.evaluate import ConditionError, Evaluation, evaluate
from ..facts.compute import FactResult, FactSet, compute_facts
from ..facts.cross_rank import load_run_facts
from ..pack.opclasses import OperationClasses
from ..facts.catalog import Fact, fact_param_range
from ..facts.types import column_types, fitted
from ..model.report import Finding
from ..base.text import did_you_mean
from ..base.units import describe_range
from ..base.vocabulary import Severity
from ..diagnosis.rules import Rule, RuleError
from ..diagnosis.ruleset import RuleSet
from ..pack.yamlfile import SAFE_LOADER, Positions, error_position, error_problem
from ..reading.export import open_export

_CASE_KEYS = {"name", "scenario", "profile", "rows", "params", "facts", "expect"}
_INPUTS = ("scenario", "profile", "rows")
_EXPECT_KEYS = {"subject", "severity", "message", "evidence"}
# Numbers in `evidence:` checks and fact-test rows are equal when they differ by less than this share (rounding
# of sums of doubles), unless a case sets a tolerance of its own.
REL_TOLERANCE = 1e-9


class RuleTestError(DiagnoseError):
    pass


@dataclass
class CaseResult:
    file: str
    rule: str
    name: str
    passed: bool
    expected: list[dict[str, Any]] = field(default_factory=list)
    got: list[dict[str, Any]] = field(default_factory=list)


def is_fact_test(path: Path) -> bool:
    """A `NAME.test.yaml` beside `NAME.sql` tests that fact (engine/authoring/facttest.py)."""
    return path.with_name(path.name.removesuffix(".test.yaml") + ".sql").is_file()


def find_test_files(paths: list[Path]) -> list[Path]:
    """The rule test files of `paths` (directories are searched; fact tests in them are left out)."""
    return find_tests_of_kind(paths, fact_tests=False, error=RuleTestError, wrong_kind=lambda p: (
        f"{p}: a fact test (it sits beside {p.name.removesuffix('.test.yaml')}.sql); run it with "
        f"`diagnose facts test {p}`"))


def find_tests_of_kind(paths: list[Path], *, fact_tests: bool, error: type[DiagnoseError],
                     wrong_kind: Callable[[Path], str]) -> list[Path]:
    """The fact tests (`fact_tests`) or the rule tests of `paths`: directories are searched for *.test.yaml files
    of that kind; a named file of the other kind is `error`(wrong_kind(file)), and so is a path that is neither."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += [f for f in sorted(p.rglob("*.test.yaml")) if is_fact_test(f) == fact_tests]
        elif p.name.endswith(".test.yaml") and p.is_file():
            if is_fact_test(p) != fact_tests:
                raise error(wrong_kind(p))
            files.append(p)
        elif not p.exists():
            raise error(f"{p}: no such file or directory")
        else:
            raise error(f"{p}: not a directory or a *.test.yaml file")
    return files


def read_test_yaml(path: Path, error: type[DiagnoseError]) -> tuple[Any, Positions]:
    """The document of a test file and where its keys are; a file that cannot be read or parsed is one
    `FILE:LINE:COL:` sentence."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}:1:1: cannot read the test file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}:1:1: not UTF-8 text (byte {exc.start}); save the test file as UTF-8") from None
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        line, col = error_position(exc) or (1, 1)
        raise error(f"{path}:{line}:{col}: invalid YAML ({error_problem(exc)})") from None
    return data, Positions(text)


def check_file_keys(path: Path, data: Any, at: Positions, keys: tuple[str, str], error: type[DiagnoseError]) -> None:
    """A test file is a mapping of exactly `keys` (what is tested, its cases): an unknown key is named at its place,
    with the key it may have meant."""
    listed = f"a {keys[0]} test file has the keys {keys[0]!r} and {keys[1]!r}"
    if not isinstance(data, dict):
        raise error(f"{path}:1:1: {listed}")
    for key in data:
        if key not in keys:
            raise error(f"{path}:{at.of(key)}: unknown key {key!r}{did_you_mean(str(key), keys) or '; ' + listed}")
    missing = [k for k in keys if k not in data]
    if missing:
        raise error(f"{path}:1:1: no {missing[0]!r} key; {listed}")


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


def inline_facts(rows: dict[str, list[dict[str, Any]]], facts: dict[str, Fact]) -> FactSet:
    """A FactSet holding the given rows (a column a row leaves out is NULL); every other fact has none."""
    out = FactSet()
    for name, fact in facts.items():
        columns = fact.column_names
        out.results[name] = FactResult(fact, columns, [{c: row.get(c) for c in columns} for row in rows.get(name, [])])
    return out


class FactCache:
    """Diagnosing a scenario is the slow part: do it once per profile for all the cases that use it."""

    def __init__(self, facts: dict[str, Fact], scenario_facts: Callable[[str], FactSet] | None = None,
                 op_classes: OperationClasses | None = None):
        self.facts = facts
        self.scenario_facts = scenario_facts
        self.op_classes = op_classes  # a team pack's operation classes (engine/pack/opclasses.py); None: bundled
        self.dir = Path(tempfile.mkdtemp(prefix="nsys-diagnose-ruletest-"))
        self.cache: dict[str, FactSet] = {}

    def get(self, case: dict[str, Any], base: Path, rule: Rule | None = None) -> FactSet:
        """The facts a case's rule reads: of one export, or cross-rank facts of a run (`scope: run`)."""
        rule_id = rule.id if rule else None
        if "rows" in case:
            return inline_facts(case["rows"], rule_facts(rule, self.facts) if rule is not None else self.facts)
        fact_params = {k: float(v) for k, v in (case.get("facts") or {}).items()}
        suffix = "" if not fact_params else "|" + ",".join(f"{k}={v}" for k, v in sorted(fact_params.items()))
        if rule is not None and rule.spec.scope == "run":
            return self._get_run(case, base, rule_id, fact_params, suffix)
        if "scenario" in case:
            from ..fixtures.generator import SCENARIOS, generate  # fixtures ship inside the package

            from ..fixtures.runs import RUN_SCENARIOS

            name = case["scenario"]
            if name in RUN_SCENARIOS:
                raise RuleTestError(f"{base}: scenario {name!r} is a multi-rank run, but rule {rule_id!r} "
                                    f"judges one profile; cross-rank rules carry `scope: run`")
            if name not in SCENARIOS:
                raise RuleTestError(f"{base}: unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}")
            key = f"scenario:{name}{suffix}"
            if key not in self.cache and self.scenario_facts is not None and not fact_params:
                self.cache[key] = self.scenario_facts(name)
            if key not in self.cache:
                path = self.dir / f"{name}.sqlite"
                if not path.exists():
                    generate(name, path)
                self.cache[key] = self._compute(path, fact_params)
        else:
            path = (base.parent / case["profile"]).resolve()
            if not path.is_file():
                raise RuleTestError(f"{base}: profile {case['profile']!r} does not exist")
            key = f"profile:{path}{suffix}"
            if key not in self.cache:
                self.cache[key] = self._compute(path, fact_params)
        return self.cache[key]

    def _get_run(self, case: dict[str, Any], base: Path, rule_id: str | None, fact_params: dict[str, float],
                 suffix: str) -> FactSet:
        """The cross-rank facts of a generated run scenario or of a directory of rank exports."""
        from ..fixtures.runs import RUN_SCENARIOS, generate_run

        if "scenario" in case:
            name = case["scenario"]
            if name not in RUN_SCENARIOS:
                raise RuleTestError(f"{base}: {name!r} is not a multi-rank run scenario; rule "
                                    f"{rule_id!r} (scope: run) is tested on one of "
                                    f"{', '.join(sorted(RUN_SCENARIOS))}, or on a directory of rank exports")
            key, target = f"run:{name}{suffix}", self.dir / name
            if not target.is_dir():
                generate_run(name, target)
        else:
            target = (base.parent / case["profile"]).resolve()
            if not target.is_dir():
                raise RuleTestError(f"{base}: {case['profile']!r} is not a directory of rank exports")
            key = f"run:{target}{suffix}"
        if key not in self.cache:
            from ..diagnosis.config import Config, Setting
            from ..runs.multirank import diagnose_ranks, run_facts_of
            from ..reading.ranks import resolve_run

            config = Config(fact_params={k: Setting(v, str(base)) for k, v in fact_params.items()})
            inputs, _ = resolve_run([target])
            reports = diagnose_ranks(inputs, config, cache=False)
            self.cache[key] = run_facts_of(inputs, reports)
        return self.cache[key]

    def _compute(self, path: Path, fact_params: dict[str, float]) -> FactSet:
        with open_export(path) as export:
            return compute_facts(export, facts=self.facts, params=fact_params, op_classes=self.op_classes)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


_FactCache = FactCache  # the name `diagnose rules explain` imports


def run_rule_tests(files: list[Path], rules: dict[str, Rule], facts: dict[str, Fact],
                   scenario_facts: Callable[[str], FactSet] | None = None,
                   op_classes: OperationClasses | None = None,
                   progress: Callable[[str], None] | None = None) -> list[CaseResult]:
    """Run the cases of `files`. `scenario_facts` may supply already computed facts of a scenario; `op_classes`:
    the operation classes of the loaded team packs; `progress`: called before each case with what runs."""
    cache = FactCache(facts, scenario_facts, op_classes)
    results: list[CaseResult] = []
    try:
        for number, path in enumerate(files, 1):
            rule_id, cases = load_test_file(path, rules, facts)
            for i, case in enumerate(cases):
                if progress is not None:
                    progress(f"testing rule {number}/{len(files)} {rule_id}: case {i + 1}/{len(cases)} "
                             f"{case.get('name', '')}".rstrip())
                fact_set = cache.get(case, path, rules[rule_id])
                params = {k: float(v) for k, v in (case.get("params") or {}).items()}
                try:
                    evaluation = evaluate(RuleSet.resolve({rule_id: rules[rule_id]}, {rule_id: params}), fact_set)
                except RuleError as exc:
                    if "rows" not in case or isinstance(exc, ConditionError):
                        raise
                    at = Positions(path.read_text(encoding="utf-8")).of("cases", i)
                    raise RuleTestError(f"{path}:{at}: case {i + 1}: {exc}; give the rows every column the rule's "
                                        f"templates read") from None
                expected = [dict(e) for e in case["expect"]]  # as the case states them: `exp:` prints no more
                got = observed(evaluation, expected)
                results.append(CaseResult(str(path), rule_id, case.get("name", f"case {i + 1}"),
                                          _matches(expected, got), expected, got))
    finally:
        cache.close()
    return results


def example_case(cases: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The case whose finding shows a rule by example (docs, `rules explain`): the first that fires, one on a
    scenario or an export before one on inline rows, whose numbers are made up."""
    firing = [c for c in cases if c["expect"]]
    return next((c for c in firing if "rows" not in c), firing[0] if firing else None)


def example_finding(rule: Rule, test_file: Path, cases: list[dict[str, Any]],
                    cache: FactCache) -> tuple[dict[str, Any], Finding] | None:
    """The rule's example (docs, `rules explain`): its example case and the first finding the rule makes on it with
    the case's params; None when no case fires."""
    case = example_case(cases)
    if case is None:
        return None
    params = {k: float(v) for k, v in (case.get("params") or {}).items()}
    found = evaluate(RuleSet.resolve({rule.id: rule}, {rule.id: params}), cache.get(case, test_file, rule)).findings
    return (case, found[0]) if found else None


def observed(evaluation: Evaluation, expected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings as the expected ones are written: subject and severity, and the message and the evidence
    values of the columns some expected finding checks."""
    checks_message = any("message" in e for e in expected)
    columns = list(dict.fromkeys(c for e in expected for c in e.get("evidence", {})))
    got = []
    for f in evaluation.findings:
        item: dict[str, Any] = {"subject": f.subject, "severity": str(f.severity)}
        if checks_message:
            item["message"] = " ".join(f.message.split())
        if columns:
            shown = {ev.column: ev for ev in f.evidence}
            item["evidence"] = {c: {"value": shown[c].value, "display": shown[c].display} if c in shown else None
                                for c in columns}
        got.append(item)
    return got


def _matches(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> bool:
    if len(expected) != len(got):
        return False
    remaining = list(got)
    for e in expected:
        hit = next((g for g in remaining if _finding_matches(e, g)), None)
        if hit is None:
            return False
        remaining.remove(hit)
    return True


def _finding_matches(want: dict[str, Any], got: dict[str, Any]) -> bool:
    if want.get("subject") is not None and want["subject"] != got["subject"]:
        return False
    if want.get("severity") is not None and want["severity"] != got["severity"]:
        return False
    if "message" in want and " ".join(want["message"].split()) not in got["message"]:
        return False
    for column, value in want.get("evidence", {}).items():
        shown = got["evidence"][column]
        if shown is None or not (same_value(value, shown["value"]) or
                                 isinstance(value, str) and value == shown["display"]):
            return False
    return True


def same_value(want: Any, got: Any, rel_tolerance: float = REL_TOLERANCE) -> bool:
    """Equal values: numbers within `rel_tolerance` of each other, anything else (text, true/false, null) exactly."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if number(want) and number(got):
        return math.isclose(want, got, rel_tol=rel_tolerance, abs_tol=1e-12)
    return type(want) is type(got) and want == got
