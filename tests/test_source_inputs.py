"""The reader's answers to awkward input: clear one-sentence errors, lossy text, missing columns."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nsys_diagnose.base.errors import InputError
from nsys_diagnose.reading.export import open_export

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
    with pytest.raises(InputError, match="neither an nsys SQLite export nor a PyTorch-profiler trace"):
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


@pytest.mark.slow
def test_impossible_timestamps_are_dropped_and_counted(tmp_path):
    """Negative starts and reversed intervals are left out of the canonical tables, and the count of each kind
    reaches the capture warning instead of vanishing."""
    from nsys_diagnose.runs.api import diagnose
    from nsys_diagnose.fixtures.generator import generate

    path = tmp_path / "glitch.sqlite"
    generate("eager_decode", path)
    with sqlite3.connect(path) as con:
        total = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -start, "end" = -start + ("end" - start) '
                    "WHERE rowid <= 5")  # negative start, positive length
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 1 WHERE rowid BETWEEN 6 AND 8')
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = start - 10 WHERE rowid <= 2')
    with open_export(path) as export:
        assert export.count("kernels") == total - 8
        assert export.query("SELECT count(*) FROM kernels WHERE start_ns < 0 OR end_ns < start_ns")[0][0] == 0
    report = diagnose(path, cache=False)
    (finding,) = [f for f in report.findings if f.rule == "capture-invalid-timestamps"]
    assert finding.row["kernel_count"] == 8 and finding.row["api_call_count"] == 2
    assert finding.row["event_count"] == 10 and finding.severity == "warning"
    assert report.metrics["kernel_count"] == total - 8


@pytest.mark.parametrize("end", [str(2**63 - 5), '"end"'], ids=["interval", "end before start"])
def test_a_timestamp_near_2_63_is_one_sentence_naming_the_table(tmp_path, capsys, end):
    """A kernel starting at 2**63 - 10 ns overflowed a fact's INT64 arithmetic (or, with its end before its start,
    was quietly dropped as a reversed interval); it is damage, refused while reading."""
    from nsys_diagnose.cli.main import main
    from nsys_diagnose.fixtures.generator import generate

    path = tmp_path / "overflow.sqlite"
    generate("eager_decode", path)
    with sqlite3.connect(path) as con:
        con.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {2**63 - 10}, "end" = {end} WHERE rowid = 1')
    assert main([str(path), "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    stored = 2**63 - 5 if end != '"end"' else 2**63 - 10  # the larger of the row's start and end
    assert err == (f"diagnose: error: the CUPTI_ACTIVITY_KIND_KERNEL table of {path} holds a timestamp of "
                   f"{stored:,} ns, 106,752 days from the session's start, which no capture reaches; the export "
                   f"looks damaged or hand-edited, so export the profile again with `nsys export --type sqlite`.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["overflow.sqlite"]  # nothing written beside it


@pytest.mark.slow
def test_times_within_the_limit_are_read_and_an_overflow_in_a_fact_is_still_one_sentence(tmp_path, capsys):
    """2**52 ns (52 days) is under the reader's limit, but 10,000 timeline bins times that overflow INT64 in
    utilization_timeline: the input sentence, not DuckDB's error under the fact's file name."""
    from nsys_diagnose.cli.main import main
    from nsys_diagnose.fixtures.generator import generate
    from nsys_diagnose.reading.loader import TIME_LIMIT_NS

    path = tmp_path / "late.sqlite"
    generate("eager_decode", path)
    with sqlite3.connect(path) as con:
        con.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {2**52}, "end" = {2**52 + 100} WHERE rowid = 1')
    assert 2**52 + 100 < TIME_LIMIT_NS
    with open_export(path) as export:
        assert export.query("SELECT max(end_ns) FROM kernels")[0][0] == 2**52 + 100
    # the HTML report draws the utilisation chart, so it computes utilization_timeline (Markdown has no use for it)
    assert main([str(path), "--no-cache", "-q", "--format", "html", "-o", str(tmp_path / "late.html"),
                 "--set", "facts.timeline_bins=10000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"diagnose: error: {path} holds values too large to compute with (fact "
                          f"'utilization_timeline' overflowed: Out of Range Error: Overflow in multiplication of INT64")
    assert err.endswith("the export looks damaged or hand-edited, so export the profile again with "
                        "`nsys export --type sqlite`.") and len(err.splitlines()) == 1


def _copy_of_example(tmp_path: Path, name: str) -> Path:
    import shutil

    path = tmp_path / name
    shutil.copyfile(Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "eager_decode.sqlite", path)
    return path


def test_a_table_named_in_invalid_utf8_is_ignored(tmp_path):
    """sqlite_master with a name that is not UTF-8 (no nsys table is named so): the export is read as usual."""
    path = _copy_of_example(tmp_path, "odd-table.sqlite")
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE zz (x)")
        con.execute("PRAGMA writable_schema=ON")
        con.execute("UPDATE sqlite_master SET name = CAST(X'7A7AFF' AS TEXT), tbl_name = CAST(X'7A7AFF' AS TEXT), "
                    "sql = CAST(X'435245415445205441424C4520227A7AFF22202878290A' AS TEXT) WHERE name = 'zz'")
    with open_export(path) as export:
        assert export.count("kernels") == 7325


@pytest.mark.slow
def test_strings_stored_as_invalid_utf8_blobs_are_read_lossily(tmp_path):
    """StringIds values written as BLOBs with bytes that are not UTF-8: read with U+FFFD, never a traceback."""
    from nsys_diagnose.runs.api import diagnose

    path = _copy_of_example(tmp_path, "blob-strings.sqlite")
    with sqlite3.connect(path) as con:
        con.execute("UPDATE StringIds SET value = X'6162FF63' WHERE id = (SELECT min(id) FROM StringIds)")
        con.execute("INSERT INTO StringIds VALUES (999999, X'00FF')")
        kernel_name_id = con.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()[0]
        con.execute("UPDATE StringIds SET value = CAST(value AS BLOB) || X'FE' WHERE id = ?", (kernel_name_id,))
    for cache in (False, True):
        report = diagnose(path, cache=cache)
        assert report.verdict.primary == "launch-bound"
        assert any("\ufffd" in (k.get("name") or "") for k in report.facts["kernel_summary"])
