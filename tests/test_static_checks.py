"""The linter and the type checker are part of the suite, so CI refuses a change they would flag: ruff with the
rules of pyproject.toml [tool.ruff], mypy with [tool.mypy]. Both come pinned with the `test` extra; a finding is
fixed in the code (or, for a deliberate exception, with a targeted `# noqa: CODE` / `# type: ignore[code]`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed in this environment; it comes with the test extra: "
                    f"pip install -e '.[test]'")


def test_ruff_finds_nothing():
    _tool("ruff")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"ruff check . found problems (make lint):\n{done.stdout}{done.stderr}"


@pytest.mark.slow
def test_mypy_finds_nothing(tmp_path):
    _tool("mypy")
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mypy found type errors (make typecheck):\n{done.stdout}{done.stderr}"
