"""Categories are data: a team pack adds its own in a categories.yaml beside its rules, and every rule names a
known category (whose kind is the default kind of the rule's findings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_diagnose.pack.categories import load_categories
from nsys_diagnose.diagnosis.rule_spec import RuleError
from nsys_diagnose.diagnosis.rules import bundled_rules_dir, load_rules, rule_files
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.base.vocabulary import Kind

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"
FACTS = load_facts()

RULE = """\
id: acme/{stem}
title: Decode over the SLO
category: {category}
severity: warning
fact: launch_overhead
params:
  max_ratio: {{default: 0.01, unit: ratio, doc: Budget.}}
when:
  - overhead_ratio > $max_ratio
message: "GPU {{{{ row.device_id }}}} is over the SLO"
why: Our SLO.
remediation: [Do less.]
"""
CATEGORY = """\
- id: acme-slo
  kind: symptom
  title: Over the ACME SLO
  description: A step misses the latency our SLO promises.
"""


def _pack(tmp_path: Path, category: str = "acme-slo", categories: str | None = CATEGORY) -> Path:
    d = tmp_path / "pack"
    d.mkdir()
    (d / "over-slo.yaml").write_text(RULE.format(stem="over-slo", category=category))
    if categories is not None:
        (d / "categories.yaml").write_text(categories)
    return d


def test_every_bundled_rule_names_a_bundled_category_and_every_category_is_described():
    categories = load_categories()
    rules = load_rules(FACTS, scope=None)
    assert {r.spec.category for r in rules.values()} <= set(categories)
    assert all(c.title and c.description and c.source == "bundled" for c in categories.values())
    assert not any(p.name == "categories.yaml" for p in rule_files(bundled_rules_dir()))


def test_a_rule_without_kind_takes_its_categorys_kind():
    rules = load_rules(FACTS, scope=None)
    assert rules["low-utilization"].spec.kind == Kind.SYMPTOM
    assert rules["capture-empty"].spec.kind == Kind.CAPTURE
    assert rules["launch-bound"].spec.kind == Kind.CAUSE


@pytest.mark.slow
def test_a_team_pack_adds_a_category_and_its_findings_use_it(tmp_path):
    pack = _pack(tmp_path)
    rules = load_rules(FACTS, [pack])
    assert rules["acme/over-slo"].spec.kind == Kind.SYMPTOM  # from the team category
    p = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", str(EXAMPLE), "--rule-dir", str(pack),
                        "-f", "json", "--no-cache"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    finding = next(f for f in json.loads(p.stdout)["findings"] if f["rule"] == "acme/over-slo")
    assert finding["category"] == "acme-slo" and finding["kind"] == "symptom"


def test_an_unknown_category_names_the_file_and_how_to_define_it(tmp_path):
    pack = _pack(tmp_path, category="acme-sol", categories=CATEGORY)
    with pytest.raises(RuleError) as err:
        load_rules(FACTS, [pack])
    text = str(err.value)
    assert "over-slo.yaml:3:" in text and "unknown category 'acme-sol'" in text
    assert "did you mean 'acme-slo'" in text.lower() and "categories.yaml" in text


def test_a_team_may_not_redefine_a_bundled_category(tmp_path):
    pack = _pack(tmp_path, category="launch-bound",
                 categories="- {id: launch-bound, kind: cause, title: Ours, description: Ours.}\n")
    with pytest.raises(RuleError, match="'launch-bound' is already defined"):
        load_rules(FACTS, [pack])


@pytest.mark.slow
def test_a_broken_categories_file_is_one_sentence_with_its_path(tmp_path):
    pack = _pack(tmp_path, categories="- {id: acme-slo, kind: reason, title: T, description: D}\n")
    p = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", "rules", "--rule-dir", str(pack), "check"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert "categories.yaml" in p.stdout + p.stderr and "kind" in p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr


def test_a_categories_file_others_may_write_is_not_trusted_for_a_lone_rule_file(tmp_path):
    from nsys_diagnose.pack.categories import team_category_file

    pack = _pack(tmp_path)
    (pack / "categories.yaml").chmod(0o666)
    assert team_category_file(pack / "over-slo.yaml") is None
    (pack / "categories.yaml").chmod(0o644)
    assert team_category_file(pack / "over-slo.yaml") == (pack / "categories.yaml").resolve()


def test_a_pack_laid_out_as_the_bundled_one_keeps_its_categories_under_vocabulary(tmp_path):
    """rules/ and a team pack share one layout: DIR/CATEGORY/ID.yaml and DIR/vocabulary/categories.yaml. The rule
    loads with the team category, whether the pack is loaded whole or the rule file is checked on its own."""
    pack = tmp_path / "pack"
    (pack / "latency-budget").mkdir(parents=True)
    (pack / "vocabulary").mkdir()
    (pack / "latency-budget" / "over-slo.yaml").write_text(RULE.format(stem="over-slo", category="acme-slo"))
    (pack / "vocabulary" / "categories.yaml").write_text(CATEGORY)
    assert load_rules(FACTS, [pack])["acme/over-slo"].spec.kind == Kind.SYMPTOM
    p = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", "rules", "check",
                        str(pack / "latency-budget" / "over-slo.yaml")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
