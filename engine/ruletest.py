"""Rule tests beside the rules (`<id>.test.yaml`), in the spirit of `promtool test rules`.

    rule: launch-bound
    cases:
      - name: eager decode is launch-bound
        scenario: eager_decode        # a generated fixture scenario ...
        # profile: my-capture.sqlite  # ... or an export, relative to the test file
        params: {max_overhead_ratio: 0.3}   # rule params for this case
        facts: {gap_threshold_ns: 5000}     # fact params for this case
        expect:                       # the exhaustive list of this rule's findings
          - {subject: GPU 0, severity: warning}
      - name: healthy prefill stays quiet
        scenario: healthy_prefill
        expect: []                    # must not fire

A cross-rank rule (`scope: run`) is tested on a multi-rank run: a generated run scenario
(`multi_rank_straggler`, `multi_rank_balanced`) or `profile:` naming a directory of rank exports; `facts`
params then apply to the diagnosis of each rank.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from .errors import DiagnoseError
from .diagnosis.evaluate import evaluate
from .facts.compute import FactSet, compute_facts
from .facts.opclasses import OperationClasses
from .facts import Fact, fact_param_range
from .units import describe_range
from .diagnosis.rules import Rule
from .diagnosis.ruleset import RuleSet
from .diagnosis.yamlfile import error_position
from .reading.export import open_export

_CASE_KEYS = {"name", "scenario", "profile", "params", "facts", "expect"}
_EXPECT_KEYS = {"subject", "severity"}


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


def find_test_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(p.rglob("*.test.yaml"))
        elif p.name.endswith(".test.yaml"):
            files.append(p)
        else:
            raise RuleTestError(f"{p}: not a directory or a *.test.yaml file")
    return files


def load_test_file(path: Path, rules: dict[str, Rule],
                   facts: dict[str, Fact]) -> tuple[str, list[dict[str, Any]]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        line, col = error_position(exc) or (1, 1)
        pos = f"{line}:{col}"
        raise RuleTestError(f"{path}:{pos}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict) or set(data) - {"rule", "cases"} or "rule" not in data:
        raise RuleTestError(f"{path}:1:1: a rule test file has the keys 'rule' and 'cases'")
    rule_id = data["rule"]
    if rule_id not in rules:
        raise RuleTestError(f"{path}:1:1: rule {rule_id!r} does not exist, so this test matches nothing")
    cases = data.get("cases") or []
    if not cases:
        raise RuleTestError(f"{path}:1:1: rule {rule_id!r} has no test cases")
    for i, case in enumerate(cases):
        where = f"{path}: case {i + 1}"
        if not isinstance(case, dict) or set(case) - _CASE_KEYS:
            raise RuleTestError(f"{where}: allowed keys are {', '.join(sorted(_CASE_KEYS))}")
        if ("scenario" in case) == ("profile" in case):
            raise RuleTestError(f"{where}: give exactly one of 'scenario' or 'profile'")
        if "expect" not in case or not isinstance(case["expect"], list):
            raise RuleTestError(f"{where}: 'expect' must be the list of expected findings ([] = must not fire)")
        for item in case["expect"]:
            if not isinstance(item, dict) or set(item) - _EXPECT_KEYS:
                raise RuleTestError(f"{where}: each expected finding may name 'subject' and 'severity'")
        _check_numbers(case, "params", where)
        _check_numbers(case, "facts", where)
        unknown = set(case.get("params") or {}) - set(rules[rule_id].spec.params)
        if unknown:
            raise RuleTestError(f"{where}: rule {rule_id!r} has no param {sorted(unknown)[0]!r}")
        fact_params = {p for f in facts.values() for p in f.params}
        unknown = set(case.get("facts") or {}) - fact_params
        if unknown:
            raise RuleTestError(f"{where}: no fact has a param {sorted(unknown)[0]!r}")
        for name, value in (case.get("params") or {}).items():  # the ranges --set and diagnose.yaml keep to
            spec = rules[rule_id].spec.params[name]
            if not spec.in_range(float(value)):
                raise RuleTestError(f"{where}: params.{name} must be {spec.range_text} (unit: {spec.unit}), not "
                                    f"{value!r}")
        for name, value in (case.get("facts") or {}).items():
            lo, hi = fact_param_range(facts, name)
            if not lo <= float(value) <= hi:
                raise RuleTestError(f"{where}: facts.{name} must be {describe_range(lo, hi)}, not {value!r}")
    return rule_id, cases


def _check_numbers(case: dict[str, Any], key: str, where: str) -> None:
    """A case's `params` / `facts`: a mapping of finite numbers (a NaN threshold silently never fires)."""
    values = case.get(key) or {}
    if not isinstance(values, dict):
        raise RuleTestError(f"{where}: '{key}' must be a mapping of names to numbers, e.g. "
                            f"{{max_overhead_ratio: 0.3}}")
    for name, value in values.items():
        number = None if isinstance(value, bool) else _as_float(value)
        if number is None or number != number or number in (float("inf"), float("-inf")):
            raise RuleTestError(f"{where}: {key}.{name} must be a finite number, not {value!r}; write a number "
                                f"such as 0.3")


def _as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class FactCache:
    """Diagnosing a scenario is the slow part: do it once per profile for all the cases that use it."""

    def __init__(self, facts: dict[str, Fact], scenario_facts: Callable[[str], FactSet] | None = None,
                 op_classes: OperationClasses | None = None):
        self.facts = facts
        self.scenario_facts = scenario_facts
        self.op_classes = op_classes  # a team pack's operation classes (engine/facts/opclasses.py); None: bundled
        self.dir = Path(tempfile.mkdtemp(prefix="nsys-diagnose-ruletest-"))
        self.cache: dict[str, FactSet] = {}

    def get(self, case: dict[str, Any], base: Path, rule: Rule | None = None) -> FactSet:
        """The facts a case's rule reads: of one export, or cross-rank facts of a run (`scope: run`)."""
        rule_id = rule.id if rule else None
        fact_params = {k: float(v) for k, v in (case.get("facts") or {}).items()}
        suffix = "" if not fact_params else "|" + ",".join(f"{k}={v}" for k, v in sorted(fact_params.items()))
        if rule is not None and rule.spec.scope == "run":
            return self._get_run(case, base, rule_id, fact_params, suffix)
        if "scenario" in case:
            from .fixtures.generator import SCENARIOS, generate  # fixtures ship inside the package

            from .fixtures.runs import RUN_SCENARIOS

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
        from .fixtures.runs import RUN_SCENARIOS, generate_run

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
            from .diagnosis.config import Config, Setting
            from .multirank import diagnose_ranks, run_facts_of
            from .reading.ranks import resolve_run

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
                   op_classes: OperationClasses | None = None) -> list[CaseResult]:
    """Run the cases of `files`. `scenario_facts` may supply already computed facts of a scenario; `op_classes`:
    the operation classes of the loaded team packs."""
    cache = FactCache(facts, scenario_facts, op_classes)
    results: list[CaseResult] = []
    try:
        for path in files:
            rule_id, cases = load_test_file(path, rules, facts)
            for i, case in enumerate(cases):
                fact_set = cache.get(case, path, rules[rule_id])
                params = {k: float(v) for k, v in (case.get("params") or {}).items()}
                evaluation = evaluate(RuleSet.resolve({rule_id: rules[rule_id]}, {rule_id: params}), fact_set)
                got = [{"subject": f.subject, "severity": f.severity} for f in evaluation.findings]
                expected = [{"subject": e.get("subject"), "severity": e.get("severity")} for e in case["expect"]]
                passed = _matches(expected, got)
                results.append(CaseResult(str(path), rule_id, case.get("name", f"case {i + 1}"), passed,
                                          expected, got))
    finally:
        cache.close()
    return results


def _matches(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> bool:
    if len(expected) != len(got):
        return False
    remaining = list(got)
    for e in expected:
        hit = next((g for g in remaining if (e["subject"] is None or e["subject"] == g["subject"])
                    and (e["severity"] is None or e["severity"] == g["severity"])), None)
        if hit is None:
            return False
        remaining.remove(hit)
    return True



