"""A team's own stacks (DIR/vocabulary/stacks.yaml) reach every place that used to know only the bundled ones: a
team rule may give steps for a team stack, checked against the stacks of the pack in force, and a team stack that
serves tokens gets the token wording of the step statistics."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_diagnose.diagnosis.rule_spec import RuleError
from nsys_diagnose.diagnosis.rules import load_rule_file, load_rules
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.model.report import StackInfo
from nsys_diagnose.reports.steps import as_context, serves_tokens

from conftest import scenario_analysis

FACTS = load_facts()
ACME = """\
stacks:
  - key: acme
    label: Acme Serve
    lineage: [acme, pytorch]
    serving: true
    preset: pytorch
    detect:
      processes: ['(?i)^acme-serve']
"""
RULE = """\
id: acme/launches
title: Launch budget
category: launch-bound
severity: warning
fact: launch_overhead
when:
  - overhead_ratio > 0.1
message: "GPU {{{{ row.device_id }}}}"
why: Because.
remediation: [Generic step.]
stack_remediation:
  {stack}: [Acme step.]
"""


def _pack(tmp_path: Path, stack: str, with_stacks: bool = True) -> Path:
    pack = tmp_path / "pack"
    (pack / "vocabulary").mkdir(parents=True, exist_ok=True)
    if with_stacks:
        (pack / "vocabulary" / "stacks.yaml").write_text(ACME, encoding="utf-8")
    (pack / "launches.yaml").write_text(RULE.format(stack=stack), encoding="utf-8")
    return pack


def test_a_team_rule_gives_steps_for_the_teams_own_stack(tmp_path):
    pack = _pack(tmp_path, "acme")
    rules = load_rules(FACTS, [pack])
    assert rules["acme/launches"].spec.stack_remediation == {"acme": ["Acme step."]}
    # checked on its own (`rules check`), the file finds the stacks.yaml of its pack
    assert load_rule_file(pack / "launches.yaml", FACTS, str(pack)).spec.stack_remediation["acme"] == ["Acme step."]


def test_a_stack_no_stacks_yaml_defines_is_refused_with_a_suggestion(tmp_path):
    pack = _pack(tmp_path, "acmee")
    with pytest.raises(RuleError, match=r"launches.yaml:12:3: rule \"acme/launches\": stack_remediation names the "
                                        r"stack 'acmee', which no stacks.yaml defines; did you mean 'acme'\?"):
        load_rules(FACTS, [pack])


def test_a_team_stack_is_unknown_without_the_teams_stacks_yaml(tmp_path):
    pack = _pack(tmp_path, "acme", with_stacks=False)
    with pytest.raises(RuleError, match=r"names the stack 'acme', which no stacks.yaml defines"):
        load_rules(FACTS, [pack])


def _stack(name: str, serving: bool | None) -> StackInfo:
    return StackInfo(name=name, label=name, lineage=[name], evidence=[], serving=serving)


def test_a_team_serving_stack_gets_the_token_wording_of_the_steps():
    report = scenario_analysis("busy_gpu_sync_overhead")[1]
    assert not serves_tokens(report) and "TPOT" not in as_context(report)["steps_intro"]
    acme = report.model_copy(update={"profile": report.profile.model_copy(update={"stack": _stack("acme", True)})})
    assert serves_tokens(acme)
    assert "time per output token (TPOT)" in as_context(acme)["steps_intro"]
    # a report read back from its JSON carries no flag: the bundled stacks decide for their own keys
    for name, serving in (("vllm", True), ("acme", False)):
        read_back = report.model_copy(update={"profile": report.profile.model_copy(
            update={"stack": _stack(name, None)})})
        assert serves_tokens(read_back) is serving, name
