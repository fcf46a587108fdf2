"""Reference docs generated from metadata: docs/rules/<id>.md for every bundled rule, docs/rules/README.md (the
index by category) and docs/facts.md, read from the rule YAML and its .test.yaml and the fact SQL headers, so
the docs cannot drift from what the engine runs (Ruff's docs/rules are the model: https://docs.astral.sh/ruff/rules/).

    python -m nsys_diagnose.docs --write    # (re)write docs/ from the repository root (`make docs`)
    python -m nsys_diagnose.docs --check    # exit 1 and name each stale file

A rule's example is the message of its first firing test case, run on the generated scenario, so it shows real
numbers. The pages are drawn by reports/templates/docs_*.md.j2.
"""

from __future__ import annotations

import argparse
import importlib.resources
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from .diagnosis.categories import Category
from .diagnosis.evaluate import evaluate
from .diagnosis.rules import Rule, StepSpec, load_rules, rule_categories
from .diagnosis.ruletest import FactCache, load_test_file
from .errors import DiagnoseError
from .facts import Fact, load_facts, with_needs
from .facts.compute import FactSet
from .facts.cross_rank import load_run_facts
from .reports.model import Finding
from .text import md_inline
from .units import describe_range, fmt_limit
from .vocabulary import STACKS

RULES_DIR = "rules"  # under the docs directory
FACTS_PAGE = "facts.md"
FIX_COMMAND = "make docs  (or: .venv/bin/python -m nsys_diagnose.docs --write)"
_UNIT_NAMES = {"us": "µs"}
_TEMPLATE_PART = re.compile(r"(\{\{.*?\}\}|\{%.*?%\})", re.S)
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_PROSE_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "*": "\\*", "|": "\\|"})
ScenarioFacts = Callable[[str], FactSet]


@dataclass
class Example:
    """The finding of a rule's first firing test case."""

    case: str
    where: str  # the scenario or profile it ran on
    params: dict[str, Any]
    finding: Finding


@dataclass
class RulePage:
    rule: Rule
    source: str  # the rule file, relative to the repository root
    cases: list[dict[str, Any]] = field(default_factory=list)
    example: Example | None = None


def prose(text: object) -> str:
    """Authored text (a rule's why, a param's or column's doc) on one line, safe in Markdown and in a table cell:
    `<your command>` stays text instead of an HTML tag, `cudaMalloc*` starts no emphasis; `code` spans stay."""
    return _escape(" ".join(str(text).split()))


def _escape(text: str) -> str:
    # a pipe is escaped in code spans too: GitHub splits table cells on it there as well
    parts = _CODE_SPAN.split(text)
    return "".join(p.replace("|", "\\|") if i % 2 else p.translate(_PROSE_ESCAPES) for i, p in enumerate(parts))


def template_text(text: str) -> str:
    """A rule's Jinja text for Markdown: the `{{ ... }}` and `{% ... %}` parts as code, the words as prose."""
    parts = _TEMPLATE_PART.split(" ".join(text.split()))
    return "".join("`" + " ".join(p.split()) + "`" if i % 2 else _escape(p) for i, p in enumerate(parts))


def _unit(unit: str) -> str:
    return _UNIT_NAMES.get(unit, unit)


def _steps(steps: list[str | StepSpec]) -> list[dict[str, Any]]:
    return [{"text": template_text(s if isinstance(s, str) else s.text),
             "when": [] if isinstance(s, str) else list(s.when)} for s in steps]


def _example(rule: Rule, test_file: Path, cases: list[dict[str, Any]], cache: FactCache) -> Example | None:
    firing = next((c for c in cases if c["expect"]), None)
    if firing is None:
        return None
    params = {k: float(v) for k, v in (firing.get("params") or {}).items()}
    found = evaluate({rule.id: rule}, cache.get(firing, test_file, rule), rule_params={rule.id: params}).findings
    if not found:
        return None
    return Example(firing.get("name", ""), str(firing.get("scenario") or firing.get("profile")),
                   firing.get("params") or {}, found[0])


def _case_row(case: dict[str, Any]) -> dict[str, Any]:
    expect = case["expect"]
    fires = ", ".join(f"{e.get('subject') or 'the capture'}" + (f" ({e['severity']})" if e.get("severity") else "")
                      for e in expect)
    settings = {**{f"facts.{k}": v for k, v in (case.get("facts") or {}).items()}, **(case.get("params") or {})}
    return {"name": case.get("name", ""), "input": case.get("scenario") or case.get("profile"),
            "settings": ", ".join(f"{k}={v}" for k, v in settings.items()),
            "outcome": f"fires on {fires}" if expect else "does not fire"}


def _environment() -> jinja2.Environment:
    folder = Path(str(importlib.resources.files("nsys_diagnose.templates")))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder), autoescape=False, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(md=lambda text: md_inline(text, None), tpl=template_text, unit=_unit, limit=fmt_limit,
                       prose=prose)
    return env


def _rule_pages(facts: dict[str, Fact], scenario_facts: ScenarioFacts | None) -> list[RulePage]:
    rules = load_rules(facts, scope=None)
    pages: list[RulePage] = []
    cache = FactCache(facts, scenario_facts)
    try:
        for rule in sorted(rules.values(), key=lambda r: r.id):
            path = Path(rule.path)
            page = RulePage(rule, f"rules/{path.parent.name}/{path.name}")
            test_file = path.with_name(f"{path.stem}.test.yaml")
            if test_file.is_file():
                _, page.cases = load_test_file(test_file, rules, facts)
                page.example = _example(rule, test_file, page.cases, cache)
            pages.append(page)
    finally:
        cache.close()
    return pages


def _fact_entry(fact: Fact, facts: dict[str, Fact], rules: list[Rule]) -> dict[str, Any]:
    checks: dict[str, list[str]] = {}
    for check in fact.checks:
        checks.setdefault(check.column, []).append(str(check))
    return {
        "fact": fact,
        "summary": " ".join(fact.doc.split()),
        "params": [{"name": name, "default": fmt_limit(default),
                    "range": describe_range(*fact.param_ranges.get(name, (float("-inf"), float("inf"))))}
                   for name, default in fact.params.items()],
        "upstream": sorted(with_needs(facts, fact.needs)),
        "read_by": sorted(f.name for f in facts.values() if fact.name in f.needs),
        "rules": sorted(r.id for r in rules if r.spec.fact == fact.name),
        "checks": checks,
        "source": _fact_source(fact),
        "cross_rank": Path(fact.path).parent.name == "cross_rank",
    }


def _fact_source(fact: Fact) -> str:
    """The fact's file, relative to the repository root."""
    path = Path(fact.path)
    return "/".join(("engine/facts", *(["cross_rank"] if path.parent.name == "cross_rank" else []), path.name))


def build(scenario_facts: ScenarioFacts | None = None) -> dict[str, str]:
    """Every generated page: path under the docs directory -> Markdown. `scenario_facts` may supply already
    computed facts of a generated scenario (the test suite's)."""
    env = _environment()
    facts = load_facts()
    categories: dict[str, Category] = rule_categories()
    pages = _rule_pages(facts, scenario_facts)
    labels = {s.key: s.label for s in STACKS}
    out: dict[str, str] = {}
    for page in pages:
        spec = page.rule.spec
        out[f"{RULES_DIR}/{spec.id}.md"] = env.get_template("docs_rule.md.j2").render(
            page=page, spec=spec, category=categories[spec.category], stacks=labels,
            remediation=_steps(spec.remediation),
            stack_remediation={stack: _steps(steps) for stack, steps in spec.stack_remediation.items()},
            cases=[_case_row(c) for c in page.cases],
            conditions={c.left.value: c.source for c in page.rule.conditions + page.rule.any_conditions
                        if c.left.kind == "column"})
    by_category = [(category, [p for p in pages if p.rule.spec.category == category.id])
                   for category in categories.values()]
    out[f"{RULES_DIR}/README.md"] = env.get_template("docs_rules_index.md.j2").render(
        by_category=[(c, ps) for c, ps in by_category if ps], count=len(pages))
    rules = [p.rule for p in pages]
    every = {**facts, **load_run_facts()}  # the cross-rank facts read the ranks' rows, not an export
    ordered = sorted(every.values(), key=lambda f: (f.is_helper, f.name))
    out[FACTS_PAGE] = env.get_template("docs_facts.md.j2").render(
        facts=[_fact_entry(f, every, rules) for f in ordered], helpers=sum(f.is_helper for f in ordered))
    return out


def stale(docs: Path, pages: dict[str, str]) -> list[str]:
    """The generated files under `docs` that differ from `pages`, are missing, or no longer belong there."""
    problems = [name for name, text in sorted(pages.items())
                if not (docs / name).is_file() or (docs / name).read_text(encoding="utf-8") != text]
    rules_dir = docs / RULES_DIR
    if rules_dir.is_dir():
        problems += [f"{RULES_DIR}/{p.name} (no such rule any more)" for p in sorted(rules_dir.glob("*.md"))
                     if f"{RULES_DIR}/{p.name}" not in pages]
    return problems


def write(docs: Path, pages: dict[str, str]) -> list[str]:
    """Write the pages that changed and remove rule pages of rules that are gone; returns what changed."""
    changed = stale(docs, pages)
    for name, text in pages.items():
        target = docs / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    for path in (docs / RULES_DIR).glob("*.md"):
        if f"{RULES_DIR}/{path.name}" not in pages:
            path.unlink()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nsys_diagnose.docs", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the generated docs")
    mode.add_argument("--check", action="store_true", help="exit 1 when a generated doc is stale")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="the docs directory (default: docs)")
    args = parser.parse_args(argv)
    try:
        pages = build()
    except DiagnoseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        problems = stale(args.out, pages)
        for problem in problems:
            print(f"stale: {args.out / problem}")
        if problems:
            print(f"{len(problems)} generated doc(s) are stale; regenerate them with: {FIX_COMMAND}")
        return 1 if problems else 0
    for name in write(args.out, pages):
        print(f"wrote {args.out / name.split(' ')[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
