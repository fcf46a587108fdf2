from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

import pytest

# diagnose() saves its cache of canonical tables beside the profile by default; the suite must never write
# next to the shared real exports, so every cache of this session (subprocesses too) goes to a scratch dir.
_OWN_CACHE_DIR = None if os.environ.get("NSYS_DIAGNOSE_CACHE_DIR") else tempfile.mkdtemp(
    prefix="nsys-diagnose-test-cache-")
if _OWN_CACHE_DIR:
    os.environ["NSYS_DIAGNOSE_CACHE_DIR"] = _OWN_CACHE_DIR


def pytest_sessionfinish(session, exitstatus):
    """The suite's caches and generated scenarios are scratch: remove them (tens of MB per run)."""
    import shutil

    for d in [_OWN_CACHE_DIR, *_SCENARIO_DIR]:
        if d:
            shutil.rmtree(d, ignore_errors=True)

REPO = Path(__file__).resolve().parents[1]
REAL_DIR = REPO.parent / "shared" / "real-profiles"
REAL_EXPORTS = sorted(REAL_DIR.glob("*.sqlite")) if REAL_DIR.is_dir() else []

requires_real = pytest.mark.skipif(not REAL_EXPORTS, reason=f"real exports not found in {REAL_DIR}")


def real(fragment: str) -> Path:
    """The real export whose file name contains `fragment`."""
    matches = [p for p in REAL_EXPORTS if fragment in p.name]
    if len(matches) != 1:
        pytest.skip(f"real export matching {fragment!r} not available")
    return matches[0]


def sqlite_ro(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con


def table_exists(con: sqlite3.Connection, table: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


def raw_count(path: Path, table: str, where: str = "") -> int:
    with sqlite_ro(path) as con:
        if not table_exists(con, table):
            return 0
        return con.execute(f'SELECT count(*) FROM "{table}" {where}').fetchone()[0]


_ANALYSES: dict = {}


_SCENARIO_DIR: list[Path] = []


def scenario_analysis(name: str):
    """(facts, report) of a generated fixture scenario, computed once per test session."""
    import tempfile

    from nsys_diagnose.fixtures.generator import generate

    if not _SCENARIO_DIR:
        _SCENARIO_DIR.append(Path(tempfile.mkdtemp(prefix="nsys-diagnose-scenarios-")))
    path = _SCENARIO_DIR[0] / f"{name}.sqlite"
    if str(path) not in _ANALYSES:
        generate(name, path)
    return analysis(path)


def analysis(path: Path):
    """(facts, report) of an export, computed once per test session: several test modules read them."""
    key = str(path)
    if key not in _ANALYSES:
        from nsys_diagnose.api import build_report
        from nsys_diagnose.config import Config
        from nsys_diagnose.factrun import compute_facts
        from nsys_diagnose.facts import load_facts
        from nsys_diagnose.rules import load_rules
        from nsys_diagnose.source import open_export

        fact_defs = load_facts()
        rules = load_rules(fact_defs)
        with open_export(path) as export:
            facts = compute_facts(export, facts=fact_defs)
            report = build_report(export, facts, rules, Config(), fact_defs)
        _ANALYSES[key] = (facts, report)
    return _ANALYSES[key]
