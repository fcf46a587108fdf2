"""What the CPU was doing: OS-runtime calls (osrt_calls, from OSRT_API) and CPU samples with their leaf function
(cpu_samples, from COMPOSITE_EVENTS and SAMPLING_CALLCHAINS), checked against direct queries of the exports."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from nsys_diagnose.reading import adapters
from nsys_diagnose.reading.adapter_base import Source
from nsys_diagnose.reading.export import open_export

from conftest import raw_count, real, requires_real, sqlite_ro

MASK = 0xFFFFFF
OSRT_CALLS = "WHERE eventClass NOT IN (31, 32)"  # 31/32: the "OS runtime libraries profiling started/finished" rows
OSRT_EXPORTS = ("kmcho2019", "mariamiiiiii", "wenscarl")
SAMPLED_EXPORTS = ("Sh1mwww", "kmcho2019", "mariamiiiiii", "wenscarl", "unschlagbar")

_OPENED: dict[str, tuple[Path, dict[str, list[tuple]]]] = {}


def _tables(fragment: str) -> tuple[Path, dict]:
    """The export matching `fragment`, with its two host tables and their view status, read once per session."""
    if fragment not in _OPENED:
        path = real(fragment)
        with open_export(path) as export:
            _OPENED[fragment] = (path, {
                "osrt_calls": export.query("SELECT pid, tid, global_tid, name, start_ns, end_ns, dur_ns, "
                                           "return_value, nesting_level FROM osrt_calls"),
                "cpu_samples": export.query("SELECT ts_ns, pid, tid, global_tid, cpu, function, module, kernel_mode "
                                            "FROM cpu_samples"),
                "views": export.views,
            })
    return _OPENED[fragment]


# -- OS-runtime calls ------------------------------------------------------------------------------------------

@requires_real
def test_rodinia_osrt_calls_are_the_traced_calls_by_name():
    path, t = _tables("kmcho2019")
    calls = t["osrt_calls"]
    names = Counter(r[3] for r in calls)
    # the calls a user looks at first: the driver's ioctls and the poll the process blocked in
    assert names.most_common(5) == [("ioctl", 1296), ("open64", 92), ("fopen", 80), ("fclose", 74), ("poll", 41)]
    with sqlite_ro(path) as con:
        raw = dict(con.execute(f"SELECT s.value, count(*) FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                               f"{OSRT_CALLS} GROUP BY 1").fetchall())
        poll_ns, = con.execute("SELECT sum(o.\"end\" - o.start) FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                               "WHERE s.value = 'poll'").fetchone()
        threads = {r[0] for r in con.execute("SELECT DISTINCT globalTid FROM OSRT_API WHERE eventClass = 27")}
    assert dict(names) == raw
    assert len(calls) == 1730 == raw_count(path, "OSRT_API") - 3  # the start/finish markers are no calls
    assert sum(r[6] for r in calls if r[3] == "poll") == poll_ns == 3_176_329_146
    assert {r[2] for r in calls} == threads
    assert {(r[0], r[1]) for r in calls} == {((g >> 24) & MASK, g & MASK) for g in threads}
    assert t["views"]["osrt_calls"].rows == 1730 and t["views"]["osrt_calls"].reason is None


@requires_real
def test_calls_made_inside_another_traced_call_are_marked_nested():
    _, t = _tables("kmcho2019")
    calls = t["osrt_calls"]
    nested = [r for r in calls if r[8] > 0]
    assert Counter(r[3] for r in nested) == {"mmap": 5, "mprotect": 5}
    creates = [r for r in calls if r[3] == "pthread_create" and r[8] == 0]
    for call in nested:  # each lies inside a pthread_create of its own thread
        assert any(c[2] == call[2] and c[4] <= call[4] and call[5] <= c[5] for c in creates)


@requires_real
@pytest.mark.parametrize("fragment", OSRT_EXPORTS)
def test_osrt_calls_match_the_raw_table(fragment):
    path, t = _tables(fragment)
    calls = t["osrt_calls"]
    with sqlite_ro(path) as con:
        raw = con.execute(f'SELECT s.value, o.start, o."end", o.globalTid FROM OSRT_API o '
                          f"LEFT JOIN StringIds s ON s.id = o.nameId {OSRT_CALLS}").fetchall()
    assert sorted((r[3], r[4], r[5], r[2]) for r in calls) == sorted(raw)
    assert all(r[3] and not r[3].startswith("OS runtime") for r in calls)
    assert all(r[6] == r[5] - r[4] >= 0 for r in calls)


# -- CPU samples -----------------------------------------------------------------------------------------------

def _raw_leaves(path: Path) -> list[tuple]:
    with sqlite_ro(path) as con:
        return con.execute("""
            SELECT e.start, e.globalTid, e.cpu, fs.value, ms.value
            FROM COMPOSITE_EVENTS e
            LEFT JOIN SAMPLING_CALLCHAINS l ON l.id = e.id AND l.stackDepth = 0
            LEFT JOIN StringIds fs ON fs.id = l.symbol LEFT JOIN StringIds ms ON ms.id = l.module""").fetchall()


@requires_real
def test_llama_samples_name_the_function_the_cpu_ran():
    path, t = _tables("Sh1mwww")
    samples = t["cpu_samples"]
    assert len(samples) == raw_count(path, "COMPOSITE_EVENTS") == 3731
    named = [r for r in samples if r[5] is not None]
    assert len(named) >= 0.9 * len(samples)
    # the Python process spends most samples in OpenBLAS' worker threads, then the interpreter loop
    python = Counter(r[5] for r in samples if r[1] == 2440841)
    assert python.most_common(1) == [("blas_thread_server", 1652)]
    assert python["_PyEval_EvalFrameDefault"] == 88
    assert {r[6] for r in samples if r[5] == "blas_thread_server"} == {
        "/home/roger/.pyenv/versions/3.13.2/lib/python3.13/site-packages/numpy.libs/"
        "libscipy_openblas64_-ff651d7f.so"}
    # a leaf in the OS kernel is marked so; its symbol is an unresolved address
    kernel = [r for r in samples if r[7]]
    assert len(kernel) == 860 and {r[6] for r in kernel} == {"[kernel.kallsyms]"}
    assert not any(r[7] for r in samples if r[6] != "[kernel.kallsyms]")


@requires_real
@pytest.mark.parametrize("fragment", SAMPLED_EXPORTS)
def test_samples_and_leaf_frames_match_the_raw_tables(fragment):
    path, t = _tables(fragment)
    samples = t["cpu_samples"]
    assert sorted((r[0], r[3], r[4], r[5], r[6]) for r in samples) == sorted(_raw_leaves(path))
    assert all(r[1] == (r[3] >> 24) & MASK and r[2] == r[3] & MASK for r in samples)
    assert all(r[7] is not None for r in samples if r[5] is not None)  # kernelMode NULL (2022.4) reads as False


@requires_real
def test_exports_without_the_tables_say_how_to_capture_them():
    _, t = _tables("ayanamesu")  # 2023.3, CUDA and scheduling data but no OS-runtime trace and no sampling
    assert t["osrt_calls"] == [] and t["cpu_samples"] == []
    assert "OSRT_API" in t["views"]["osrt_calls"].reason and "--trace=osrt" in t["views"]["osrt_calls"].reason
    assert "COMPOSITE_EVENTS" in t["views"]["cpu_samples"].reason and "--sample=" in t["views"]["cpu_samples"].reason
    _, t = _tables("Sh1mwww")  # sampled, but OS-runtime calls not traced
    assert t["osrt_calls"] == [] and "--trace=osrt" in t["views"]["osrt_calls"].reason
    assert t["views"]["cpu_samples"].reason is None


# -- Without the corpus: what nsys may write that the real exports do not show ----------------------------------

OSRT_DDL = ('CREATE TABLE OSRT_API (start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL, '
            "globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER, "
            "callchainId INTEGER NOT NULL)")
SAMPLES_DDL = ("CREATE TABLE COMPOSITE_EVENTS (id INTEGER NOT NULL PRIMARY KEY, start INTEGER NOT NULL, cpu INTEGER, "
               "threadState INTEGER, globalTid INTEGER, cpuCycles INTEGER NOT NULL)")
CHAINS_DDL = ("CREATE TABLE SAMPLING_CALLCHAINS (id INTEGER NOT NULL, symbol INTEGER NOT NULL, "
              "module INTEGER NOT NULL, kernelMode INTEGER, thumbCode INTEGER, unresolved INTEGER, "
              "specialEntry INTEGER, originalIP INTEGER, unwindMethod INTEGER, stackDepth INTEGER NOT NULL, "
              "PRIMARY KEY (id, stackDepth))")
GTID = (1 << 48) | (4242 << 24) | 4243


def _export(path: Path, *statements: str) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [
        (1, "OS runtime libraries profiling started"), (2, "poll"), (3, "ioctl"), (4, "mmap"),
        (5, "cudaStreamSynchronize"), (6, "/usr/lib/libcuda.so.1"), (7, "0xffffffff8f400b90"),
        (8, "[kernel.kallsyms]"), (9, "main"), (10, "/app/server")])
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()
    return path


def test_osrt_markers_and_impossible_intervals_are_left_out(tmp_path):
    rows = [(0, 0, 31, GTID, 1, 0, None), (100, 900, 27, GTID, 2, 0, 0), (200, 300, 27, GTID, 4, 0, 1),
            (950, 940, 27, GTID, 3, 0, 0), (-5, 10, 27, GTID, 3, 0, 0), (990, 995, 27, GTID, 3, -1, None)]
    profile = _export(tmp_path / "osrt.sqlite", OSRT_DDL, *(
        f"INSERT INTO OSRT_API VALUES ({s}, {e}, {c}, {g}, {n}, {r}, {'NULL' if lvl is None else lvl}, 0)"
        for s, e, c, g, n, r, lvl in rows))
    with open_export(profile) as export:
        got = export.query("SELECT name, start_ns, dur_ns, pid, tid, return_value, nesting_level FROM osrt_calls "
                           "ORDER BY start_ns")
        assert got == [("poll", 100, 800, 4242, 4243, 0, 0), ("mmap", 200, 100, 4242, 4243, 0, 1),
                       ("ioctl", 990, 5, 4242, 4243, -1, 0)]
        assert export.views["cpu_samples"].rows == 0 and "--sample=" in export.views["cpu_samples"].reason


def test_a_sample_without_a_backtrace_has_no_function(tmp_path):
    profile = _export(
        tmp_path / "samples.sqlite", SAMPLES_DDL, CHAINS_DDL,
        f"INSERT INTO COMPOSITE_EVENTS VALUES (1, 1000, 3, 1, {GTID}, 0), (2, 2000, 5, 1, {GTID}, 0), "
        f"(3, 3000, 5, 1, {GTID}, 0)",
        # sample 1: user code (kernelMode NULL, as 2022.4 writes it) called from main; sample 2: in the kernel;
        # sample 3: no callchain
        "INSERT INTO SAMPLING_CALLCHAINS VALUES (1, 5, 6, NULL, 0, 0, 0, 0, 0, 0), (1, 9, 10, NULL, 0, 0, 0, 0, 0, 1), "
        "(2, 7, 8, 1, 0, 1, 0, 0, 0, 0), (2, 5, 6, NULL, 0, 0, 0, 0, 0, 1)")
    with open_export(profile) as export:
        assert export.query("SELECT ts_ns, pid, tid, cpu, function, module, kernel_mode FROM cpu_samples "
                            "ORDER BY ts_ns") == [
            (1000, 4242, 4243, 3, "cudaStreamSynchronize", "/usr/lib/libcuda.so.1", False),
            (2000, 4242, 4243, 5, "0xffffffff8f400b90", "[kernel.kallsyms]", True),
            (3000, 4242, 4243, 5, None, None, None)]
        assert export.views["osrt_calls"].rows == 0 and "--trace=osrt" in export.views["osrt_calls"].reason


def test_samples_without_callchains_and_tables_lacking_a_key_column(tmp_path):
    profile = _export(
        tmp_path / "bare.sqlite", SAMPLES_DDL, f"INSERT INTO COMPOSITE_EVENTS VALUES (1, 1000, 0, 1, {GTID}, 0)",
        'CREATE TABLE OSRT_API (start INTEGER, "end" INTEGER, nameId INTEGER)',  # no globalTid: cannot be placed
        'INSERT INTO OSRT_API VALUES (1, 2, 2)')
    with open_export(profile) as export:
        assert export.query("SELECT function, module, kernel_mode FROM cpu_samples") == [(None, None, None)]
        assert export.views["osrt_calls"].rows == 0 and export.views["osrt_calls"].reason


def test_exports_without_the_tables_read_nothing_for_them():
    # no adapter means no query at all: loading such an export costs one empty table each
    source = Source({"StringIds": ["id", "value"], "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end"]})
    assert adapters.osrt_calls(source) == [] and adapters.cpu_samples(source) == []
