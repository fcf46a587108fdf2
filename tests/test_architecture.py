"""The codebase stays easy to extend: the engine's modules import each other without cycles and never up a layer,
and the shared vocabulary (severities, kinds, categories) is spelled in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

ENGINE = Path(__file__).resolve().parents[1] / "engine"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RULES = Path(__file__).resolve().parents[1] / "rules"
PACKAGE = "nsys_diagnose"

# The layers of the engine, lowest first, as the data flows: export -> facts -> rules -> findings -> reports
# (CONTRIBUTING.md "Extending nsys-diagnose"). A module imports only from its own layer and the ones below it; a
# module is named by its path under nsys_diagnose, and a package stands for everything inside it. "" is the root.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # shared helpers that know nothing of the pipeline; the profile generator writes exports with sqlite3 alone
    ("base", ("", "base", "fixtures")),
    # where each part of a knowledge pack lives, and its loaders
    ("pack", ("pack",)),
    # what a diagnosis produces and every report reads: findings, verdict, evidence, the three report documents
    ("model", ("model",)),
    ("reading", ("reading",)),  # exports -> canonical tables
    ("capture", ("capture",)),  # `diagnose profile`: runs nsys; its presets shape the capture advice of findings
    ("facts", ("facts",)),  # canonical tables -> fact tables
    ("diagnosis", ("diagnosis",)),  # rules, their settings, evaluation, verdict
    ("reports", ("reports",)),  # key metrics, rendering, JSON Schemas
    # entry points that run the whole pipeline: one profile, a multi-rank run, a comparison and its gates, a batch
    ("runs", ("runs",)),
    # the rule and fact tests and the generated docs (which run the rule tests' examples)
    ("authoring", ("authoring",)),
    ("cli", ("cli",)),
)


def _module_name(path: Path, root: Path = ENGINE, prefix: str = PACKAGE) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([prefix, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


def _fixture_modules() -> dict[str, Path]:
    """The profile generator, installed as nsys_diagnose.fixtures (pyproject package-dir) beside the engine."""
    return {_module_name(p, FIXTURES, f"{PACKAGE}.fixtures"): p for p in sorted(FIXTURES.rglob("*.py"))}


def layer_of(module: str) -> tuple[int, str] | None:
    """(position, name) of the layer holding `module`: the one naming its longest prefix; None when none does."""
    relative = module.removeprefix(PACKAGE).removeprefix(".")
    best: tuple[int, int, str] | None = None
    for position, (layer, members) in enumerate(LAYERS):
        for member in members:
            if relative == member or (member and relative.startswith(member + ".")):
                if best is None or len(member) > best[0]:
                    best = (len(member), position, layer)
    return None if best is None else (best[1], best[2])


def climbing_imports(modules: dict[str, Path]) -> list[str]:
    """One sentence per import that climbs a layer: 'nsys_diagnose.diagnosis.evaluate (diagnosis) imports
    nsys_diagnose.reports.render (reports)'."""
    known = set(modules)
    out = []
    for name, path in sorted(modules.items()):
        here = layer_of(name)
        assert here is not None, f"{name} is in no layer of LAYERS; add it where it belongs"
        for target in sorted(_imports(name, path, known)):
            there = layer_of(target)
            assert there is not None, f"{target} (imported by {name}) is in no layer of LAYERS"
            if there[0] > here[0]:
                out.append(f"{name} ({here[1]}) imports {target} ({there[1]})")
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Engine modules that `name` imports anywhere in its body (function-level imports count too)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        for target in targets:
            # `from pkg import sub` imports pkg/__init__ and, when sub is a module, the submodule
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_engine_modules_import_each_other_without_cycles():
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    # A package's __init__ that only re-exports is part of its package; an import of the package from inside
    # it would still be a cycle, so nothing is exempt.
    assert _cycles(graph) == [], "import cycles among engine modules (break them by moving the shared code down)"


def test_no_import_climbs_a_layer():
    """A lower layer never imports a higher one, at module level or inside a function: the domain model sits below
    the diagnosis that builds it and the reports that read it, and what drives the whole pipeline sits beside api."""
    climbs = climbing_imports({**_modules(), **_fixture_modules()})
    assert climbs == [], "imports that climb a layer (LAYERS, lowest first):\n" + "\n".join(climbs)


def test_the_layer_check_names_a_climbing_import(tmp_path):
    """The check reads function-level imports and names both modules and both layers."""
    (tmp_path / "diagnosis").mkdir()
    module = tmp_path / "diagnosis" / "late.py"
    module.write_text("def f():\n    from ..reports.render import render\n    return render\n", encoding="utf-8")
    modules = {**_modules(), f"{PACKAGE}.diagnosis.late": module}
    assert climbing_imports(modules) == [
        f"{PACKAGE}.diagnosis.late (diagnosis) imports {PACKAGE}.reports.render (reports)"]


def _vocabulary_uses(path: Path, words: set[str]) -> set[str]:
    """Literals of `words` used as vocabulary: compared with (`x == "warning"`), assigned to a severity or kind
    (`severity = "info"`), or listed beside another of them (`("info", "warning")`, `Literal[...]`, a dict keyed by
    them). The same word in another sense (a JSON key "info", a problem kind "error") is not vocabulary."""
    found: set[str] = set()

    def consts(nodes) -> list[str]:
        return [n.value for n in nodes if isinstance(n, ast.Constant) and n.value in words]

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            found.update(consts([node.left, *node.comparators]))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(consts(node.elts)) >= 2:
            found.update(consts(node.elts))
        elif isinstance(node, ast.Dict) and len(consts(node.keys)) >= 2:
            found.update(consts(node.keys))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [getattr(x, "id", getattr(x, "attr", "")) for x in targets]
            if any("severity" in n or n == "kind" for n in names) and node.value is not None:
                found.update(consts([node.value]))
        elif isinstance(node, ast.keyword) and node.arg in ("severity", "kind"):
            found.update(consts([node.value]))
    return found


def test_severity_and_kind_names_are_spelled_in_one_module():
    from nsys_diagnose.base.vocabulary import Kind, Severity

    words = set(Severity.names()) | {k.value for k in Kind}
    spelled = {str(p.relative_to(ENGINE)): sorted(used) for p in ENGINE.rglob("*.py")
               if p.name != "vocabulary.py" and (used := _vocabulary_uses(p, words))}
    assert spelled == {}, f"use nsys_diagnose.base.vocabulary's Severity and Kind instead of literals: {spelled}"


def test_category_names_live_in_the_data_file_only():
    from nsys_diagnose.base.vocabulary import Kind

    # "capture" is a category and a kind; as a kind it is spelled in vocabulary.py
    vocabulary = (RULES / "vocabulary" / "categories.yaml").read_text(encoding="utf-8")
    categories = {c["id"] for c in yaml.safe_load(vocabulary)}
    categories -= {k.value for k in Kind}
    spelled = {str(p.relative_to(ENGINE)): sorted(hits) for p in ENGINE.rglob("*.py")
               if (hits := _literals(p) & categories)}
    assert spelled == {}, f"category names belong in rules/vocabulary/categories.yaml, not in Python: {spelled}"


def _literals(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)}


# What counts as a launch or a synchronisation is defined once: rules/vocabulary/api_names.yaml lists the names and
# rules/facts/_api_classes.sql alone matches calls against them. A fact that spells such a name (or a LIKE or
# regular-expression fragment of one) in a string literal defines the concept a second time.
_API_WORD_FRAGMENTS = ("Launch", "Synchronize", "WaitEvent", "HostFunc", "MultiDevice")
_SYNC_FAMILIES = ("sync", "sync_copy", "wait")


def _launch_and_sync_names() -> set[str]:
    data = yaml.safe_load((RULES / "vocabulary" / "api_names.yaml").read_text(encoding="utf-8"))
    return {name.rstrip("*") for family, entry in data["families"].items()
            if family.endswith("_launch") or family in _SYNC_FAMILIES for name in entry["names"]}


def _api_name_spellings(sql: str, names: set[str]) -> list[str]:
    """The string literals of a fact's SQL (comments left out) that spell a launch or sync API name."""
    import re

    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    found = []
    for literal in re.findall(r"'((?:[^']|'')*)'", code):
        words = re.findall(r"[A-Za-z0-9_]+", literal)
        if any(w in names or any(f in w for f in _API_WORD_FRAGMENTS) for w in words):
            found.append(literal)
    return found


def test_no_fact_spells_a_launch_or_sync_api_name():
    names = _launch_and_sync_names()
    spelled = {str(p.relative_to(RULES)): hits for p in sorted((RULES / "facts").rglob("*.sql"))
               if (hits := _api_name_spellings(p.read_text(encoding="utf-8"), names))}
    assert not spelled, "\n".join(
        f"{path} spells CUDA API names ({', '.join(repr(h) for h in hits)}): read _api_classes' api_family or "
        f"is_launch instead, and list new names in rules/vocabulary/api_names.yaml" for path, hits in spelled.items())


def test_the_api_name_check_finds_a_second_definition_of_a_launch():
    names = _launch_and_sync_names()
    assert _api_name_spellings("SELECT count(*) FROM api_calls WHERE name LIKE 'cudaGraphLaunch%'", names)
    assert _api_name_spellings("SELECT 1 WHERE regexp_matches(name, '^(cuLaunch|cudaLaunch)')", names)
    assert _api_name_spellings("SELECT 1 WHERE name IN ('cudaStreamSynchronize', 'cudaMemcpy')", names)
    # a comment may name the APIs, an asynchronous copy is no sync, and the causes are lower-case words
    assert not _api_name_spellings("-- one cudaLaunchKernel per kernel\nSELECT 'cudaMemcpyAsync', 'launch'", names)
