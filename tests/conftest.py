from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

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
