"""The slow tier is chosen by marks on the tests themselves (tests/conftest.py explains the tiers). These checks
catch the two ways that drifts: conftest growing lists of test names again, and a test marked slow twice, where
removing one mark leaves the test in the slow tier and the contributor wondering why."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import slow_but

TESTS = Path(__file__).resolve().parent
TEST_NAME = re.compile(r"\btest_[a-z0-9_]+")


def _is_slow_mark(node: ast.AST) -> bool:
    """`pytest.mark.slow` or `pytest.mark.slow(reason=...)`."""
    if isinstance(node, ast.Call):
        node = node.func
    return ast.unparse(node) == "pytest.mark.slow"


def _module_marks(tree: ast.Module) -> list[ast.AST]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            return list(node.value.elts) if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
    return []


def _slow_cases(node: ast.AST) -> list[ast.AST]:
    """The slow marks on cases inside `node`: `marks=pytest.mark.slow` and `slow_but(...)`."""
    return [n for n in ast.walk(node)
            if (isinstance(n, ast.keyword) and n.arg == "marks" and _is_slow_mark(n.value))
            or (isinstance(n, ast.Call) and ast.unparse(n.func) == "slow_but")]


def test_conftest_names_no_test():
    tree = ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8"))
    named = sorted({m for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    for m in TEST_NAME.findall(node.value)})
    assert not named, (f"tests/conftest.py names tests {named}: put the test in the slow tier with a mark on the "
                       f"test itself (`@pytest.mark.slow`, module-wide `pytestmark = pytest.mark.slow`, or "
                       f"`pytest.param(..., marks=pytest.mark.slow)` / `slow_but(...)` for some cases)")


def test_no_test_is_marked_slow_twice():
    twice = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_marks = _module_marks(tree)
        module_slow = any(map(_is_slow_mark, module_marks))
        module_real = "requires_real" in map(ast.unparse, module_marks)
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test_"):
                continue
            decorators = {ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list}
            explicit = module_slow + sum(map(_is_slow_mark, fn.decorator_list)) \
                + bool([c for d in fn.decorator_list for c in _slow_cases(d)])
            by_kind = module_real or bool(decorators & {"given", "pytest.mark.real_exports", "requires_real"})
            # a module marked slow may hold a real-export or hypothesis test: the module's mark is for the others
            if explicit > 1 or (explicit - module_slow and by_kind):
                twice.append(f"{path.name}::{fn.name}")
    assert not twice, (f"marked slow more than once (by the module, the test, its cases, or by being a hypothesis "
                       f"or real-export test, which conftest makes slow anyway): {twice}")


def test_slow_but_marks_every_case_but_the_kept_ones():
    cases = slow_but([("a", 1), ("b", 2), ("c", 3)], "b")
    assert cases[1] == ("b", 2)
    assert [c.values for c in (cases[0], cases[2])] == [("a", 1), ("c", 3)]
    assert all(m.name == "slow" for c in (cases[0], cases[2]) for m in c.marks)
    assert [c.values for c in slow_but(["x", "y"], "x")[1:]] == [("y",)]


def test_slow_but_refuses_a_kept_case_that_is_not_there():
    # a renamed case would otherwise leave the fast tier with no case of the test at all
    with pytest.raises(ValueError, match="'renamed'"):
        slow_but(["x", "y"], "renamed")
