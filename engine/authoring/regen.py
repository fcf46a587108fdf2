"""Every file of the repository made from the code and compared with it by the tests, made anew: the JSON Schemas
(reports/templates/), the layout goldens (tests/golden/reports/), the scenario expectations
(tests/expected/scenarios.yaml) and the generated docs (docs/rules/, docs/facts.md and the generated parts of
docs/).

    python -m nsys_diagnose.authoring.regen            # rewrite what changed, one `rewrote PATH` line each (make regen)
    python -m nsys_diagnose.authoring.regen --check    # write nothing: list what is stale, exit 1 if anything is

The tests compare with the same functions (tests/test_reports.py, tests/test_scenario_expectations.py,
tests/test_docs.py), so a file this writes is a file they pass on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from ..facts.compute import FactSet
from ..model.report import Report
from ..reports.render import render
from ..reports.schema import SCHEMAS, schema_file, schema_text
from . import docs

SCHEMA_DIR = Path("reports/templates")
GOLDEN_DIR = Path("tests/golden/reports")
EXPECTED_FILE = Path("tests/expected/scenarios.yaml")
DOCS_DIR = Path("docs")
FIX_COMMAND = "make regen"

# The layout goldens: the report model of one scenario frozen as JSON, and the other formats rendered from that
# frozen model, so a new rule, fact or key metric leaves them alone; plus the findings of two scenarios that
# tests/test_team_templates.py compares messages with.
GOLDEN_SCENARIO = "eager_decode"
TEAM_TEMPLATE_SCENARIOS = ("multi_gpu_straggler", "pageable_copies")
EXTENSIONS = {"terminal": "txt", "md": "md", "html": "html", "json": "json"}

Analysis = tuple[FactSet, Report]
_RETIRED = " (no such rule any more)"  # how docs.stale() names a generated rule page whose rule is gone


def rounded(value: Any, digits: int) -> Any:
    """`value` (numbers, lists and dicts of them) with every float cut to `digits` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


def fixed(report: Report, name: str) -> Report:
    """The report with what differs between machines fixed: the tool version and the profile's path."""
    return report.model_copy(update={"tool_version": "0.0.0+golden",
                                     "profile": report.profile.model_copy(update={"path": f"{name}.sqlite"})})


def json_text(data: Any) -> str:
    """A golden JSON file: floats to 6 significant digits, indented."""
    return json.dumps(rounded(data, 6), indent=2, ensure_ascii=False) + "\n"


def golden_files(report_of: Callable[[str], Report]) -> dict[Path, str]:
    """The layout goldens, path under the repository -> text, from the reports of the scenarios they show."""
    model_text = json_text(json.loads(render(fixed(report_of(GOLDEN_SCENARIO), GOLDEN_SCENARIO), "json")))
    model = Report.model_validate_json(model_text)
    out = {GOLDEN_DIR / f"{GOLDEN_SCENARIO}.json": model_text}
    for fmt in ("terminal", "md", "html"):
        out[GOLDEN_DIR / f"{GOLDEN_SCENARIO}.{EXTENSIONS[fmt]}"] = render(model, fmt)
    for name in TEAM_TEMPLATE_SCENARIOS:
        out[GOLDEN_DIR / f"{name}.json"] = json_text({"findings": json.loads(render(report_of(name), "json"))
                                                     ["findings"]})
    return out


EXPECTATIONS_HEADER = """\
# What the diagnosis says about each generated scenario (fixtures/generator.py), checked by
# tests/test_scenario_expectations.py: the verdict, the rules that fire (rule, severity, subject) and the key
# metrics (floats to 4 significant digits, compared with a relative tolerance of 1e-3).
# Regenerate after a deliberate change and review the diff:
#     make regen
"""


def _round4(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value != 0:
        return float(f"{value:.4g}")
    return value


def _plain(value: Any) -> Any:
    """Enums (severity) as their plain value, so the data file holds plain YAML scalars."""
    return getattr(value, "value", value)


def summarise(report: Report) -> dict[str, Any]:
    """What tests/expected/scenarios.yaml records of one scenario: verdict, the findings, the key metrics."""
    findings = sorted(
        ({"rule": f.rule, "severity": _plain(f.severity), **({"subject": f.subject} if f.subject else {})}
         for f in report.findings),
        key=lambda f: (f["rule"], f.get("subject", "")))
    return {
        "verdict": {"primary": report.verdict.primary, "rule": report.verdict.rule,
                    "subject": report.verdict.subject},
        "findings": findings,
        "metrics": {k: _round4(_plain(v)) for k, v in sorted(report.metrics.items())},
    }


def expectations_text(data: dict[str, dict[str, Any]]) -> str:
    """Block style per scenario, one flow mapping per finding: a new finding is a one-line diff."""
    def flow(value: Any) -> str:
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000).strip()

    out = [EXPECTATIONS_HEADER]
    for name in sorted(data):
        entry = data[name]
        out.append(f"{name}:\n")
        out.append("  verdict: " + flow(entry["verdict"]) + "\n")
        if entry["findings"]:
            out.append("  findings:\n")
            out += ["    - " + flow(f) + "\n" for f in entry["findings"]]
        else:
            out.append("  findings: []\n")
        out.append("  metrics:\n")
        for key, value in entry["metrics"].items():
            out.append(f"    {key}: " + yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")
                       .strip() + "\n")
    return "".join(out)


def analyse(path: Path) -> Analysis:
    """(facts, report) of an export, as a run of the bundled pack makes them (what the tests diagnose)."""
    from ..reading.export import open_export
    from ..runs.api import build_report, load_pack
    from ..facts.compute import compute_facts

    pack = load_pack()
    with open_export(path) as export:
        facts = compute_facts(export, facts=pack.facts)
        return facts, build_report(export, facts, pack)


def _analyse_scenario(name: str, directory: str) -> Analysis:
    from ..fixtures.generator import generate  # the profile generator, installed beside the engine

    path = Path(directory) / f"{name}.sqlite"
    generate(name, path)
    return analyse(path)


def scenario_analyses(names: Iterable[str], workers: int | None = None) -> dict[str, Analysis]:
    """(facts, report) of each generated scenario (seed 0, scale 1), diagnosed side by side."""
    names = sorted(set(names))
    with tempfile.TemporaryDirectory(prefix="nsys-diagnose-regen-") as directory:
        with ProcessPoolExecutor(max_workers=workers or min(len(names), os.cpu_count() or 1)) as pool:
            found = pool.map(_analyse_scenario, names, [directory] * len(names))
            return dict(zip(names, found))


def generated_files(root: Path) -> tuple[dict[Path, str], list[Path]]:
    """(every generated file, path under `root` -> the text it must hold; the generated docs to remove)."""
    from ..fixtures.generator import SCENARIOS

    analyses = scenario_analyses(SCENARIOS)
    files = {SCHEMA_DIR / schema_file(kind): schema_text(kind) for kind in SCHEMAS}
    files |= golden_files(lambda name: analyses[name][1])
    files[EXPECTED_FILE] = expectations_text({name: summarise(report) for name, (_, report) in analyses.items()})
    pages = docs.build(scenario_facts=lambda name: analyses[name][0], docs=root / DOCS_DIR)
    files |= {DOCS_DIR / name: text for name, text in pages.items()}
    retired = [DOCS_DIR / name.removesuffix(_RETIRED) for name in docs.stale(root / DOCS_DIR, pages)
               if name.endswith(_RETIRED)]
    return files, retired


def stale_files(root: Path, files: dict[Path, str]) -> list[Path]:
    """The files of `files` missing under `root` or holding other text there, in order."""
    def current(path: Path) -> str | None:
        try:
            return (root / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    return [path for path in sorted(files) if current(path) != files[path]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nsys_diagnose.authoring.regen",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; list the stale files, exit 1 if any")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: the current "
                                                                     "directory)")
    args = parser.parse_args(argv)
    files, retired = generated_files(args.root)
    changed = stale_files(args.root, files)
    for path in changed:
        if args.check:
            print(f"stale {path}")
            continue
        target = args.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(files[path], encoding="utf-8")
        print(f"rewrote {path}")
    for path in retired:
        if not args.check:
            (args.root / path).unlink()
        print(f"{'stale' if args.check else 'removed'} {path} (no such rule any more)")
    count = len(changed) + len(retired)
    if not count:
        print("nothing changed")
    elif args.check:
        print(f"{count} generated file{'s are' if count != 1 else ' is'} stale; regenerate with: {FIX_COMMAND}")
    else:
        print(f"{count} file{'s' if count != 1 else ''} rewritten; review `git diff`")
    return 1 if args.check and count else 0


if __name__ == "__main__":
    sys.exit(main())
