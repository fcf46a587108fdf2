"""Robustness and security: bad input gets a clear answer, the profile is never touched, hostile content
(names the profiled program chose: kernels, NVTX labels, devices; see docs/security.md) stays inert."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import math
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsys_diagnose.cli import main as cli
from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.base.errors import DiagnoseError
from nsys_diagnose.fixtures.runs import generate_run

from conftest import scenario_path, slow_but

# ---------------------------------------------------------------------------------------------------------
# 1. Property: any mangled nsys-schema export gives a report or a DiagnoseError, never a traceback.
# ---------------------------------------------------------------------------------------------------------
_BASE_SCENARIOS = ("eager_decode", "sync_storm", "prefill_decode_nvtx", "old_schema_2022", "pageable_copies")
_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName", "contextId", "graphNodeId"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId", "nameId", "eventClass"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "bytes", "copyKind", "srcKind", "dstKind"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end", "deviceId", "streamId", "correlationId",
                                            "globalPid", "syncType"),
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "textId", "globalTid", "domainId"),
    "StringIds": ("id", "value"),
    "TARGET_INFO_GPU": ("id", "name", "smCount"),
}
_HUGE = 2**62


def _base(scenario: str) -> Path:
    return scenario_path(scenario)  # generated once per session, shared with the other modules; copied to change


_table = st.sampled_from(sorted(_TABLES))
_column = _table.flatmap(lambda t: st.tuples(st.just(t), st.sampled_from(_TABLES[t])))
_mutation = st.one_of(
    st.tuples(st.just("drop_table"), _table),
    st.tuples(st.just("drop_column"), _column),
    st.tuples(st.just("nulls"), _column, st.integers(1, 4)),
    st.tuples(st.just("empty_table"), _table),
    st.tuples(st.just("zero_length"), _table),
    st.tuples(st.just("negative"), _table, st.integers(1, 10**9)),
    st.tuples(st.just("overlap"), _table),
    st.tuples(st.just("dup_correlation"), _table),
    st.tuples(st.just("huge"), _column, st.sampled_from([_HUGE, -_HUGE, _HUGE - 1, 2**63 - 1])),
    st.tuples(st.just("empty_strings"), st.integers(1, 3)),
)


def _apply(con: sqlite3.Connection, mutation: tuple) -> None:
    kind, *args = mutation
    q = lambda sql: con.execute(sql)  # noqa: E731
    if kind == "drop_table":
        q(f'DROP TABLE IF EXISTS "{args[0]}"')
    elif kind == "drop_column":
        (table, column), = args
        q(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
    elif kind == "nulls":
        (table, column), k = args
        q(f'UPDATE "{table}" SET "{column}" = NULL WHERE rowid % {k} = 0')
    elif kind == "empty_table":
        q(f'DELETE FROM "{args[0]}"')
    elif kind == "zero_length":
        q(f'UPDATE "{args[0]}" SET "end" = start WHERE rowid % 3 = 0')
    elif kind == "negative":
        q(f'UPDATE "{args[0]}" SET "end" = start - {args[1]} WHERE rowid % 2 = 0')
    elif kind == "overlap":
        q(f'UPDATE "{args[0]}" SET start = start - 1000000, "end" = "end" + 1000000 WHERE rowid % 2 = 1')
    elif kind == "dup_correlation":
        q(f'UPDATE "{args[0]}" SET correlationId = 1')
    elif kind == "huge":
        (table, column), value = args
        q(f'UPDATE "{table}" SET "{column}" = {value} WHERE rowid % 5 = 0')
    elif kind == "empty_strings":
        q(f"UPDATE StringIds SET value = '' WHERE id % {args[0]} = 0")


def _assert_finite(report) -> None:
    for finding in report.findings:
        if finding.impact is not None:
            assert math.isfinite(finding.impact), (finding.rule, finding.impact)
        for ev in finding.evidence:
            if isinstance(ev.value, (int, float)) and not isinstance(ev.value, bool):
                assert math.isfinite(ev.value), (finding.rule, ev.column, ev.value)
    if report.verdict.impact is not None:
        assert math.isfinite(report.verdict.impact)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=st.sampled_from(_BASE_SCENARIOS), mutations=st.lists(_mutation, min_size=1, max_size=4))
def test_mangled_exports_never_crash(tmp_path, scenario, mutations):
    path = tmp_path / f"mangled-{abs(hash((scenario, tuple(mutations))))}.sqlite"
    shutil.copyfile(_base(scenario), path)
    con = sqlite3.connect(path)
    for mutation in mutations:
        try:
            _apply(con, mutation)
        except sqlite3.Error:
            pass  # e.g. the table was dropped by an earlier mutation, or a NOT NULL constraint
    con.commit()
    con.close()
    try:
        report = diagnose(path, cache=False)  # each example is a new file: a cache of it would never be reused
    except DiagnoseError as exc:
        message = str(exc)
        assert message and "\n" not in message.strip() and "Traceback" not in message
        return
    _assert_finite(report)


# ---------------------------------------------------------------------------------------------------------
# 2. Tables that lack a column the diagnosis needs: one sentence, exit 2.
# ---------------------------------------------------------------------------------------------------------
def _one_sentence_error(capsys, code: int) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured.out
    err = captured.err.strip()
    assert err.startswith("diagnose: error: ") and len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("scenario, table, column", [
    ("prefill_decode_nvtx", "CUPTI_ACTIVITY_KIND_KERNEL", "start"),
    ("prefill_decode_nvtx", "CUPTI_ACTIVITY_KIND_KERNEL", "end"),
    ("prefill_decode_nvtx", "CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
    ("prefill_decode_nvtx", "NVTX_EVENTS", "eventType"),
    ("prefill_decode_nvtx", "StringIds", "value"),
    # without these a NULL took the column's place: kernels of no GPU, calls matched to no kernel, copies of no kind
    ("prefill_decode_nvtx", "CUPTI_ACTIVITY_KIND_KERNEL", "deviceId"),
    ("prefill_decode_nvtx", "CUPTI_ACTIVITY_KIND_KERNEL", "streamId"),
    ("old_schema_2022", "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
    ("prefill_decode_nvtx", "CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId"),
    ("prefill_decode_nvtx", "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"),
    ("pageable_copies", "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind"),
    ("pageable_copies", "CUPTI_ACTIVITY_KIND_MEMCPY", "deviceId"),
    ("sync_storm", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "syncType"),
])
def test_missing_needed_column_is_one_sentence(tmp_path, capsys, scenario, table, column):
    path = tmp_path / "p.sqlite"
    shutil.copyfile(_base(scenario), path)
    con = sqlite3.connect(path)
    con.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
    con.commit()
    con.close()
    err = _one_sentence_error(capsys, cli.main([str(path), "-q"]))
    assert err == (f"diagnose: error: {path}: the {table} table has no `{column}` column, which the diagnosis needs "
                   f"and every nsys version writes; the export looks damaged or hand-edited, so export the profile "
                   f"again with `nsys export --type sqlite`.")


def test_a_kernel_table_without_device_ids_is_refused_not_reported_as_an_idle_gpu(tmp_path):
    """Before, the NULL device ids left every kernel outside every GPU: '0 kernels, GPU mostly idle'."""
    path = tmp_path / "p.sqlite"
    shutil.copyfile(_base("eager_decode"), path)
    assert diagnose(path, cache=False).verdict.primary == "launch-bound"  # the intact export
    con = sqlite3.connect(path)
    con.execute('ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN deviceId')
    con.commit()
    con.close()
    with pytest.raises(DiagnoseError, match="the CUPTI_ACTIVITY_KIND_KERNEL table has no `deviceId` column"):
        diagnose(path, cache=False)


def without_device(path: Path, table: str, where: str, *, lost: bool) -> int:
    """Give the rows of `table` matching `where` a NULL deviceId (which nsys never writes: its exports declare the
    column NOT NULL, so the table is rebuilt without that constraint), as a post-processed export may; with
    `lost`, on a stream and context no other row names and with a second GPU listed, so no device can be told.
    Returns how many rows lost their device."""
    con = sqlite3.connect(path)
    try:
        sql = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        con.execute(f'ALTER TABLE "{table}" RENAME TO _before')
        con.execute(re.sub(r"(deviceId\s+INTEGER\s+)NOT NULL", r"\1", sql))
        con.execute(f'INSERT INTO "{table}" SELECT * FROM _before')
        con.execute("DROP TABLE _before")
        changed = con.execute(f'UPDATE "{table}" SET deviceId = NULL WHERE {where}').rowcount
        if lost:
            columns = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            unknown = ", ".join(f"{c} = 999" for c in ("streamId", "contextId") if c in columns)
            con.execute(f'UPDATE "{table}" SET {unknown} WHERE deviceId IS NULL')
            if not con.execute("SELECT count(*) FROM TARGET_INFO_GPU WHERE id = 1").fetchone()[0]:
                con.execute("INSERT INTO TARGET_INFO_GPU SELECT * FROM TARGET_INFO_GPU LIMIT 1")
                con.execute("UPDATE TARGET_INFO_GPU SET id = 1 WHERE rowid = (SELECT max(rowid) FROM TARGET_INFO_GPU)")
        con.commit()
        return changed
    finally:
        con.close()


def test_kernels_without_a_device_are_put_on_the_gpu_of_their_context_and_the_report_says_so(tmp_path):
    """Before, every fifth kernel without a device vanished from every number (7,325 kernels became 5,860)."""
    path = tmp_path / "p.sqlite"
    shutil.copyfile(_base("eager_decode"), path)
    assert without_device(path, "CUPTI_ACTIVITY_KIND_KERNEL", "rowid % 5 = 0", lost=False) == 1465
    report = diagnose(path, cache=False)
    assert report.metrics["kernel_count"] == 7325
    recovered = [f for f in report.findings if f.rule == "capture-device-recovered"]
    assert len(recovered) == 1 and recovered[0].message.startswith("1,465 GPU operations")
    assert not [f for f in report.findings if f.rule == "capture-no-device"]


def test_gpu_work_whose_device_cannot_be_told_is_left_out_counted_and_reported(tmp_path):
    """Kernels and a copy without a device, on a stream and context nothing else names, with two GPUs listed:
    they are on no GPU's timeline, so the metrics leave them out and the JSON and Markdown reports say how many
    and what share of the kernel time (as they do for events with impossible timestamps)."""
    path = tmp_path / "p.sqlite"
    shutil.copyfile(_base("eager_decode"), path)
    assert without_device(path, "CUPTI_ACTIVITY_KIND_KERNEL", "rowid % 5 = 0", lost=True) == 1465
    assert without_device(path, "CUPTI_ACTIVITY_KIND_MEMCPY", "rowid = 1", lost=True) == 1
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    assert cli.main([str(path), "-q", "--no-cache", "-o", str(out_json)]) == 0
    assert cli.main([str(path), "-q", "--no-cache", "-o", str(out_md)]) == 0
    report = json.loads(out_json.read_text(encoding="utf-8"))
    assert report["metrics"]["kernel_count"] == 7325 - 1465
    lost = [f for f in report["findings"] if f["rule"] == "capture-no-device"]
    assert len(lost) == 1
    row = lost[0]["row"]
    assert (row["no_device_kernel_count"], row["no_device_memcpy_count"], row["no_device_count"]) == (1465, 1, 1466)
    assert 0.15 < row["no_device_kernel_share"] < 0.25
    sentence = f"1,465 kernels ({row['no_device_kernel_share'] * 100:.1f} % of kernel time), 1 copy have no device"
    assert lost[0]["message"].startswith(sentence)
    assert sentence in out_md.read_text(encoding="utf-8")


def test_value_beyond_its_column_type_is_one_sentence(tmp_path, capsys):
    path = tmp_path / "p.sqlite"
    shutil.copyfile(_base("eager_decode"), path)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = {_HUGE}")
    con.commit()
    con.close()
    err = _one_sentence_error(capsys, cli.main([str(path), "-q"]))
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in err and "export the profile again" in err


# ---------------------------------------------------------------------------------------------------------
# 3. The profile is never modified and never gets side files (-journal, -wal, -shm, temporaries).
# ---------------------------------------------------------------------------------------------------------
def _snapshot(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


_SANDBOX_RULE = """\
id: acme/escape
title: Escape
category: launch-bound
severity: warning
fact: team_fact
when:
  - device_id > 0
message: "x"
why: Because.
remediation: [Nothing.]
"""
_SANDBOX_SQL = ("-- @fact team_fact\n-- @doc Reads a file.\n-- @column device_id x\n"
                "SELECT 1 AS device_id FROM read_csv('/etc/passwd')\n")


@pytest.mark.parametrize("outcome, fmt", slow_but(
    [(o, f) for o in ("success", "bad-set", "sandbox", "missing-column") for f in ("terminal", "md", "html", "json")],
    ("success", "md")))
def test_profile_untouched(tmp_path, capsys, fmt, outcome):
    profile_dir = tmp_path / "profile"
    profile_dir.mkdir()
    profile = profile_dir / "run.sqlite"
    shutil.copyfile(_base("sync_storm"), profile)
    if outcome == "missing-column":
        con = sqlite3.connect(profile)
        con.execute('ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN globalTid')
        con.commit()
        con.close()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = [str(profile), "-q", "--format", fmt, "-o", str(out_dir / f"report.{fmt}")]
    if outcome == "bad-set":
        args += ["--set", "launch-bound.max_overhead_ratio=not-a-number"]
    if outcome == "sandbox":
        pack = tmp_path / "pack"
        pack.mkdir()
        (pack / "escape.yaml").write_text(_SANDBOX_RULE)
        (pack / "team_fact.sql").write_text(_SANDBOX_SQL)
        args += ["--rule-dir", str(pack)]
    before = _snapshot(profile_dir)
    mode = profile.stat().st_mode
    code = cli.main(args)
    captured = capsys.readouterr()
    assert _snapshot(profile_dir) == before  # same files, same bytes: no -journal, -wal, -shm or temporaries
    assert profile.stat().st_mode == mode
    if outcome == "success":
        assert code == 0, captured.err
        assert [p.name for p in out_dir.iterdir()] == [f"report.{fmt}"]
    else:
        assert code == 2 and len(captured.err.strip().splitlines()) == 1
        assert list(out_dir.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------
# 4. Locked database and permission denied.
# ---------------------------------------------------------------------------------------------------------
_HOLD_LOCK = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_locked_database_is_one_sentence(tmp_path, capsys):
    import subprocess
    import sys

    profile = tmp_path / "run.sqlite"
    shutil.copyfile(_base("pageable_copies"), profile)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(profile)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        err = _one_sentence_error(capsys, cli.main([str(profile), "-q"]))
        assert "is locked by another program" in err
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert cli.main([str(profile), "-q"]) == 0  # once released it reads fine


def test_permission_denied_is_one_sentence(tmp_path, capsys, monkeypatch):
    # The tests run as root, for whom chmod 000 changes nothing: simulate the refusal at open().
    import builtins

    profile = tmp_path / "run.sqlite"
    shutil.copyfile(_base("pageable_copies"), profile)
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):
        if Path(file) == profile:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    err = _one_sentence_error(capsys, cli.main([str(profile), "-q"]))
    assert "permission denied" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod-000 file anyway; covered by the open() mock")
def test_unreadable_file_for_a_normal_user(tmp_path, capsys):
    profile = tmp_path / "run.sqlite"
    shutil.copyfile(_base("pageable_copies"), profile)
    profile.chmod(0)
    err = _one_sentence_error(capsys, cli.main([str(profile), "-q"]))
    assert "permission denied" in err


# ---------------------------------------------------------------------------------------------------------
# 5. .nsys-rep: converted with the nsys on PATH into a temporary file that is always removed.
# ---------------------------------------------------------------------------------------------------------
_FAKE_NSYS = """#!{python}
import shutil, sys
args = sys.argv[1:]
with open({log!r}, "a") as fh:
    fh.write(" ".join(args) + "\\n")
{body}
"""
_COPY_BODY = "shutil.copyfile({source!r}, args[args.index('--output') + 1])"
_FAIL_BODY = "sys.stderr.write('Exportation error: Cannot read from stream.\\n'); sys.exit(1)"


def _fake_nsys(tmp_path: Path, monkeypatch, body: str) -> Path:
    import sys

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "nsys-calls.log"
    script = bindir / "nsys"
    script.write_text(_FAKE_NSYS.format(python=sys.executable, log=str(log), body=body))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return log


def _converted_outputs(log: Path) -> list[Path]:
    calls = [line.split() for line in log.read_text().splitlines()]
    return [Path(c[c.index("--output") + 1]) for c in calls]


@pytest.mark.slow
def test_nsys_rep_is_converted_and_the_temporary_removed(tmp_path, capsys, monkeypatch):
    log = _fake_nsys(tmp_path, monkeypatch, _COPY_BODY.format(source=str(_base("eager_decode"))))
    (tmp_path / "reports").mkdir()
    rep = tmp_path / "reports" / "run.nsys-rep"
    rep.write_bytes(b"not really a report")
    before = _snapshot(rep.parent)
    code = cli.main([str(rep), "-q", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    import json

    data = json.loads(captured.out)
    assert data["verdict"]["primary"] == "launch-bound"
    assert data["profile"]["path"] == str(rep)
    (call,) = [line.split() for line in log.read_text().splitlines()]
    assert call[:2] == ["export", "--type"] and call[2] == "sqlite" and call[-1] == str(rep)
    assert call[call.index("--force-overwrite") + 1] == "true"
    (output,) = _converted_outputs(log)
    assert not output.exists() and not output.parent.exists()  # the temporary directory is gone
    assert _snapshot(rep.parent) == before  # nothing written beside the report


def test_failing_nsys_gives_one_sentence_with_its_stderr(tmp_path, capsys, monkeypatch):
    log = _fake_nsys(tmp_path, monkeypatch, _FAIL_BODY)
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"broken")
    err = _one_sentence_error(capsys, cli.main([str(rep), "-q"]))
    assert "could not convert it" in err and "Cannot read from stream" in err
    (output,) = _converted_outputs(log)
    assert not output.parent.exists()


def test_temporary_removed_when_diagnosis_fails_or_is_interrupted(tmp_path, capsys, monkeypatch):
    from nsys_diagnose.reading import export as source

    log = _fake_nsys(tmp_path, monkeypatch, _COPY_BODY.format(source=str(_base("eager_decode"))))
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"x")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(source, "_build", interrupted)
    assert cli.main([str(rep), "-q"]) == 130
    capsys.readouterr()
    (output,) = _converted_outputs(log)
    assert not output.parent.exists()


def test_without_nsys_the_message_names_the_export_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"x")
    err = _one_sentence_error(capsys, cli.main([str(rep), "-q"]))
    assert f"nsys export --type sqlite --output {tmp_path / 'run.sqlite'} {rep}" in err


# ---------------------------------------------------------------------------------------------------------
# 6. Atomic report writes: an interrupted write leaves the old report and no temporary file.
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", [pytest.param("render", marks=pytest.mark.slow), "replace"])
def test_interrupted_write_keeps_the_old_report(tmp_path, capsys, monkeypatch, where):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "report.md"
    target.write_text("previous report\n")
    if where == "render":
        def broken_render(*args, **kwargs):
            raise KeyboardInterrupt
        from nsys_diagnose.cli import deliver  # renders for both diagnose and diagnose profile

        monkeypatch.setattr(deliver, "render", broken_render)
    else:
        def broken_replace(src, dst):
            raise OSError(28, "No space left on device", str(dst))
        monkeypatch.setattr(os, "replace", broken_replace)
    code = cli.main([str(_base("pageable_copies")), "-q", "--format", "md", "-o", str(target)])
    captured = capsys.readouterr()
    assert code == (130 if where == "render" else 2)
    if where == "replace":
        assert "No space left on device" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert [p.name for p in out_dir.iterdir()] == ["report.md"]
    assert target.read_text() == "previous report\n"


@pytest.mark.parametrize("cache, writer", slow_but(
    [(c, w) for c in ("cache", "no-cache") for w in ("no writer", "writer with committed rows in the WAL")],
    ("cache", "no writer")))
def test_a_wal_mode_export_gets_no_side_files(tmp_path, capsys, writer, cache):
    """A WAL-mode export (someone ran `PRAGMA journal_mode=wal` on it): SQLite, even read-only, creates -shm and
    -wal beside such a file. The directory holds the same files with the same bytes after the diagnosis, and rows
    a writer committed into its WAL are read."""
    profile_dir = tmp_path / "profile"
    profile_dir.mkdir()
    profile = profile_dir / "run.sqlite"
    shutil.copyfile(_base("eager_decode"), profile)
    con = sqlite3.connect(profile)
    kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.close()  # the last connection folds the WAL into the file and removes -wal and -shm
    assert [p.name for p in profile_dir.iterdir()] == ["run.sqlite"]
    live = sqlite3.connect(profile) if writer != "no writer" else None
    try:
        if live is not None:
            live.execute("PRAGMA wal_autocheckpoint=0")
            live.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0")
            live.commit()
            kernels -= kernels // 2
            assert sorted(p.name for p in profile_dir.iterdir()) == ["run.sqlite", "run.sqlite-shm", "run.sqlite-wal"]
        before = _snapshot(profile_dir)
        caches = tmp_path / "caches"
        caches.mkdir()
        args = [str(profile), "-q", "--format", "json"]
        code = cli.main(args + (["--cache-dir", str(caches)] if cache == "cache" else ["--no-cache"]))
        captured = capsys.readouterr()
        assert _snapshot(profile_dir) == before  # same files, same bytes
    finally:
        if live is not None:
            live.close()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["metrics"]["kernel_count"] == kernels and report["verdict"]["primary"] == "launch-bound"
    assert not list(caches.glob("*.duckdb"))  # an export SQLite may still be writing is never cached


@pytest.mark.slow
def test_wal_mode_ranks_of_a_run_get_no_side_files(tmp_path, capsys):
    """The ranks of a multi-rank run are checked to be one run (nsys version, session start) before they are read:
    that check, too, leaves nothing beside WAL-mode exports."""
    run_dir = tmp_path / "run"
    generate_run("multi_rank_balanced", run_dir)
    for rank in run_dir.glob("*.sqlite"):
        con = sqlite3.connect(rank)
        assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        con.close()
    before = _snapshot(run_dir)
    code = cli.main([str(run_dir), "-q", "--no-cache", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert _snapshot(run_dir) == before and len(before) == 4


@pytest.mark.slow
def test_a_wal_mode_export_on_a_file_system_the_kernel_cannot_copy_from_is_read_the_same(tmp_path, capsys,
                                                                                       monkeypatch):
    """The private copy of a WAL-mode export falls back to reading and writing where the kernel refuses to copy
    between the two file systems (EXDEV): the same rows are read, and still nothing is written beside it."""
    profile = tmp_path / "run.sqlite"
    shutil.copyfile(_base("eager_decode"), profile)
    con = sqlite3.connect(profile)
    kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    before = _snapshot(tmp_path)
    assert cli.main([str(profile), "-q", "--no-cache", "--format", "json"]) == 0
    assert calls and _snapshot(tmp_path) == before
    assert json.loads(capsys.readouterr().out)["metrics"]["kernel_count"] == kernels
