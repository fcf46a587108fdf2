"""The reader's answers to awkward input: clear one-sentence errors, lossy text, missing columns."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nsys_diagnose.errors import InputError
from nsys_diagnose.source import open_export

KERNEL_COLUMNS = "start INTEGER, \"end\" INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER, " \
                 "globalPid INTEGER, demangledName INTEGER, shortName INTEGER"


def _minimal_export(path: Path, name_sql: str = "'gemm'") -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute(f"INSERT INTO StringIds VALUES (1, {name_sql})")
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLUMNS})")
    gpid = (1 << 48) | (4242 << 24)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?, 1, 1)",
                    [(1000 + 100 * i, 1050 + 100 * i, i, gpid) for i in range(5)])
    con.commit()
    con.close()
    return path


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        open_export(tmp_path / "nope.sqlite")


def test_directory(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        open_export(tmp_path)


def test_not_sqlite(tmp_path):
    bad = tmp_path / "profile.sqlite"
    bad.write_text("hello, I am a text file\n" * 20)
    with pytest.raises(InputError, match="not a SQLite database"):
        open_export(bad)


def test_nsys_rep_names_the_export_command(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 64)
    with pytest.raises(InputError, match="nsys export --type sqlite"):
        open_export(rep)


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    db = tmp_path / "app.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        open_export(db)


def test_truncated_sqlite(tmp_path):
    good = _minimal_export(tmp_path / "good.sqlite")
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(good.read_bytes()[:1500])
    with pytest.raises(InputError, match="damaged or truncated|not an Nsight Systems export"):
        open_export(cut)


def test_minimal_export_with_only_the_oldest_columns(tmp_path):
    with open_export(_minimal_export(tmp_path / "p.sqlite")) as export:
        assert export.count("kernels") == 5
        assert export.query("SELECT DISTINCT pid, name, short_name, graph_node_id FROM kernels") == \
            [(4242, "gemm", "gemm", None)]
        assert export.used_devices == [0]
        assert export.count("api_calls") == 0 and "RUNTIME" in export.views["api_calls"].reason


def test_invalid_utf8_in_kernel_names_is_replaced_not_fatal(tmp_path):
    path = _minimal_export(tmp_path / "p.sqlite", name_sql="CAST(x'67656d6dff' AS TEXT)")
    with open_export(path) as export:
        (name,), = export.query("SELECT DISTINCT name FROM kernels")
        assert name.startswith("gemm") and "\ufffd" in name
