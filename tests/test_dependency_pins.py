"""The team-template sandbox (engine/diagnosis/templating.py) is built on Jinja internals that only the pinned
series keeps: jinja2.compiler.CodeGenerator's visit methods, its Frame, and the private jinja2.utils._PassArg. A
Jinja outside the pin must fail here, loudly and by name, before it can weaken the sandbox quietly."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import jinja2
import jinja2.compiler
import jinja2.utils
from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _jinja_pin() -> SpecifierSet:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    return SpecifierSet(re.search(r'"jinja2([^"]+)"', text).group(1))


def test_jinja_is_pinned_to_one_minor_series():
    pin = _jinja_pin()
    assert any(s.operator == "<" for s in pin) and any(s.operator == ">=" for s in pin), (
        f"pyproject.toml pins jinja2{pin}: give it an upper bound, the sandbox subclasses Jinja internals")


def test_the_installed_jinja_is_a_version_the_sandbox_supports():
    installed, pin = Version(jinja2.__version__), _jinja_pin()
    assert installed in pin, (
        f"jinja2 {installed} is installed, but the template sandbox (engine/diagnosis/templating.py) supports "
        f"only jinja2{pin} (pyproject.toml): it subclasses jinja2.compiler.CodeGenerator and uses the private "
        f"jinja2.utils._PassArg. Install a supported version (pip install 'jinja2{pin}'), or check those "
        f"internals against the new release and widen the pin.")


def test_the_internals_the_sandbox_relies_on_are_there():
    generator = jinja2.compiler.CodeGenerator
    for method in ("visit_Concat", "visit_List", "visit_Dict", "visit_Tuple", "write", "visit", "_make_finalize"):
        assert callable(getattr(generator, method, None)), \
            f"jinja2 {jinja2.__version__}: CodeGenerator.{method} is gone"
    assert list(inspect.signature(generator.visit_List).parameters) == ["self", "node", "frame"]
    assert hasattr(jinja2.compiler, "Frame")
    pass_arg = jinja2.utils._PassArg
    assert {"environment", "eval_context", "context"} <= set(pass_arg.__members__), pass_arg.__members__
    assert callable(pass_arg.from_obj)
    assert jinja2.utils.missing is not None
