"""Each engine module is small enough to read in one sitting and says what it is for: package __init__ files hold
only their docstring, and a module over MAX_LINES lines says why in its docstring (a line starting
"Over 400 lines:")."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"
MAX_LINES = 400
REASON = "Over 400 lines:"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def long_modules(root: Path = ENGINE) -> list[str]:
    """'path (N lines)' for each module over MAX_LINES whose docstring gives no reason."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if _lines(path) > MAX_LINES:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            if not any(line.strip().startswith(REASON) for line in doc.splitlines()):
                out.append(f"{path.relative_to(root)} ({_lines(path)} lines)")
    return out


def init_files_with_code(root: Path = ENGINE) -> list[str]:
    """Package __init__ files that hold more than a docstring (and `from __future__` imports)."""
    out = []
    for path in sorted(root.rglob("__init__.py")):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        rest = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                        and isinstance(n.value.value, str))
                and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
        if rest:
            out.append(str(path.relative_to(root)))
    return out


def test_package_init_files_hold_only_their_docstring():
    assert init_files_with_code() == [], "move the code into a module named after its job"


def test_modules_over_400_lines_say_why():
    assert long_modules() == [], (f"split these by job, or give the reason in the docstring on a line starting "
                                  f"{REASON!r}")


def test_the_checks_name_a_long_module_and_an_init_with_code(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""Doc."""\nX = 1\n', encoding="utf-8")
    (tmp_path / "big.py").write_text('"""Doc."""\n' + "x = 1\n" * MAX_LINES, encoding="utf-8")
    (tmp_path / "said.py").write_text(f'"""Doc.\n\n{REASON} one table.\n"""\n' + "x = 1\n" * MAX_LINES,
                                      encoding="utf-8")
    assert init_files_with_code(tmp_path) == ["pkg/__init__.py"]
    assert long_modules(tmp_path) == [f"big.py ({MAX_LINES + 1} lines)"]
