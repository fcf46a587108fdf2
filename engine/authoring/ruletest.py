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

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..diagnosis.evaluate import ConditionError, Evaluation, evaluate
from ..pack.apinames import ApiNames
from ..pack.stacks import Stacks
from ..facts.compute import FactResult, FactSet, compute_facts
from ..pack.opclasses import OperationClasses
from ..facts.catalog import Fact
from ..model.findings import Finding
from ..diagnosis.rule_spec import Rule, RuleError
from ..diagnosis.ruleset import RuleSet
from ..pack.yamlfile import Positions
from ..reading.export import open_export
from .rulecases import RuleTestError as RuleTestError, find_test_files as find_test_files, load_test_file, rule_facts
from .testfiles import same_value


@dataclass
class CaseResult:
    file: str
    rule: str
    name: str
    passed: bool
    expected: list[dict[str, Any]] = field(default_factory=list)
    got: list[dict[str, Any]] = field(default_factory=list)


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
                 op_classes: OperationClasses | None = None, stacks: Stacks | None = None,
                 api_names: ApiNames | None = None):
        self.facts = facts
        self.scenario_facts = scenario_facts
        self.op_classes = op_classes  # a team pack's operation classes (engine/pack/opclasses.py); None: bundled
        self.stacks = stacks  # and its software stacks and CUDA API families (engine/pack/stacks.py, apinames.py)
        self.api_names = api_names
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
            return compute_facts(export, facts=self.facts, params=fact_params, op_classes=self.op_classes,
                                 stacks=self.stacks, api_names=self.api_names)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


_FactCache = FactCache  # the name `diagnose rules explain` imports


def run_rule_tests(files: list[Path], rules: dict[str, Rule], facts: dict[str, Fact],
                   scenario_facts: Callable[[str], FactSet] | None = None,
                   op_classes: OperationClasses | None = None,
                   progress: Callable[[str], None] | None = None,
                   stacks: Stacks | None = None, api_names: ApiNames | None = None,
                   cache: FactCache | None = None) -> list[CaseResult]:
    """Run the cases of `files`. `scenario_facts` may supply already computed facts of a scenario; `op_classes`,
    `stacks`, `api_names`: the vocabulary of the loaded team packs; `progress`: called before each case with what
    runs; `cache`: the facts of the profiles diagnosed by earlier calls (kept open: its owner closes it), else a
    cache of this call's own."""
    owned = cache is None
    cache = cache if cache is not None else FactCache(facts, scenario_facts, op_classes, stacks, api_names)
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
        if owned:
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
