"""How a run ends tells CI what happened: a signal stops it with 128+N and leaves nothing behind, a crash is exit 3
(never 1, which means a finding), a run killed outright is cleaned up by the next one, and error messages never
carry raw control characters to the terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import default_stop_signals, slow_but, start_and_wait_for
from nsys_diagnose.cli import main as cli
from nsys_diagnose.reading import cache as store
from nsys_diagnose.reading import leftovers
from nsys_diagnose.fixtures.generator import generate_large

DIAGNOSE = Path(sys.executable).parent / "diagnose"
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"


def _listing(d: Path) -> list[str]:
    return sorted(str(x.relative_to(d)) for x in d.rglob("*")) if d.exists() else []


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.sqlite"
    generate_large(path, kernels=800_000)
    return path


_SIGNALS = [(signal.SIGTERM, 143, "stopped by SIGTERM"), (signal.SIGHUP, 129, "stopped by SIGHUP"),
            (signal.SIGINT, 130, "interrupted")]


@pytest.mark.parametrize("stage, sig, code, said", slow_but(
    [(stage, *s) for stage in ("starting", "reading CUPTI_ACTIVITY_KIND_KERNEL", "computing fact") for s in _SIGNALS],
    ("reading CUPTI_ACTIVITY_KIND_KERNEL", *_SIGNALS[2])))
def test_a_stop_signal_exits_128_plus_n_and_leaves_nothing(tmp_path, big, sig, code, said, stage):
    """The signal lands at a known point: during the imports, while the kernels are read, while the facts run."""
    scratch, xdg = tmp_path / "tmp", tmp_path / "xdg"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), XDG_CACHE_HOME=str(xdg))
    proc = start_and_wait_for([str(DIAGNOSE), str(big), "-q"], stage, tmp_path / "stages", env=env,
                              preexec_fn=default_stop_signals)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1] == f"diagnose: {said}" and "Traceback" not in err
    assert _listing(scratch) == []
    cached = _listing(xdg / "nsys-diagnose")
    # never a partial cache (beside the caches, only the key that seals them)
    assert all(n.startswith(store.KEY_PREFIX) or n.endswith(store.CACHE_SUFFIX) for n in cached), cached


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_right_after_start_exits_128_plus_n_without_a_traceback(tmp_path, sig):
    """Sent the instant the process exists, while Python starts and the program is being imported. Killed by the
    signal before any handler is in place, or stopped by the program's own: either way a shell reports 128 + N,
    and no traceback is printed."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    for _ in range(3):
        proc = subprocess.Popen([str(DIAGNOSE), str(EXAMPLE), "-q", "--no-cache"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=default_stop_signals)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        shell_status = 128 - proc.returncode if proc.returncode < 0 else proc.returncode
        assert shell_status == 128 + sig, err
        assert "Traceback" not in err and "Fatal Python error" not in err and out == "", err
        assert _listing(scratch) == []


@pytest.mark.slow
def test_timeout_leaves_nothing_behind(tmp_path, big):
    scratch, xdg = tmp_path / "tmp", tmp_path / "xdg"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), XDG_CACHE_HOME=str(xdg))
    done = subprocess.run(["timeout", "0.8", str(DIAGNOSE), str(big), "-q"], env=env, capture_output=True,
                          text=True, timeout=60)
    if done.returncode == 0:
        pytest.skip("the run finished within the timeout")
    assert done.returncode == 124 and "Traceback" not in done.stderr
    assert _listing(scratch) == []
    assert all(n.startswith(store.KEY_PREFIX) or n.endswith(store.CACHE_SUFFIX)
               for n in _listing(xdg / "nsys-diagnose"))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.slow
def test_leftovers_of_killed_runs_are_removed_by_the_next_run(tmp_path, monkeypatch):
    """SIGKILL (or a power cut) leaves a scratch directory and a half-built cache behind: the next run removes
    those older than a few minutes whose process is gone, and nothing else."""
    scratch, xdg = tmp_path / "tmp", tmp_path / "xdg"
    caches = xdg / "nsys-diagnose"
    scratch.mkdir()
    caches.mkdir(parents=True, mode=0o700)
    dead, alive = _dead_pid(), os.getpid()
    old = time.time() - leftovers.LEFTOVER_AGE_S - 60

    def leftover(parent: Path, name: str, age: float) -> Path:
        d = parent / name
        d.mkdir()
        (d / "canonical.duckdb").write_bytes(b"x" * 1000)
        os.utime(d, (age, age))
        return d

    stale = [leftover(scratch, f"nsys-diagnose-{dead}-abc", old),
             leftover(caches, f".nsys-diagnose-build-{dead}-def", old),
             leftover(scratch, "nsys-diagnose-k3x_9q2z", time.time() - leftovers.LEGACY_LEFTOVER_AGE_S - 60)]
    kept = [leftover(scratch, f"nsys-diagnose-{alive}-ghi", old),   # its process still runs
            leftover(scratch, f"nsys-diagnose-{dead}-jkl", time.time()),  # too young to judge
            leftover(scratch, "unrelated-dir", old),
            leftover(scratch, "nsys-diagnose-a1b2c3d4", old)]  # an older version's name, not a day old yet
    env = dict(os.environ, TMPDIR=str(scratch), XDG_CACHE_HOME=str(xdg))
    done = subprocess.run([str(DIAGNOSE), str(EXAMPLE), "-q"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not any(d.exists() for d in stale)
    assert all(d.exists() for d in kept)


@pytest.mark.slow
def test_leftovers_of_another_user_are_not_touched(tmp_path, other_user):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    theirs = scratch / f"nsys-diagnose-{_dead_pid()}-xyz"
    theirs.mkdir()
    os.chown(theirs, *other_user)
    old = time.time() - leftovers.LEFTOVER_AGE_S - 60
    os.utime(theirs, (old, old))
    env = dict(os.environ, TMPDIR=str(scratch))
    assert subprocess.run([str(DIAGNOSE), str(EXAMPLE), "-q"], env=env, capture_output=True).returncode == 0
    assert theirs.exists()


def test_an_internal_error_is_exit_3_not_a_finding(monkeypatch, capsys):
    def crash(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "diagnose", crash)
    assert cli.main([str(EXAMPLE), "--fail-on", "warning", "-q"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("diagnose: internal error: ZeroDivisionError: division by zero.")
    assert "bug in nsys-diagnose" in err and "--debug" in err
    assert cli.main([str(EXAMPLE), "-q", "--debug"]) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith(
        "diagnose: internal error:")


@pytest.mark.parametrize("message", ["empty.", "empty", "what?", "stop!", "trailing space. "])
def test_an_internal_error_ending_in_a_full_stop_gets_no_second_one(monkeypatch, capsys, message):
    from nsys_diagnose.base.errors import full_stop

    def crash(*args, **kwargs):
        raise ValueError(message)

    monkeypatch.setattr(cli, "diagnose", crash)
    assert cli.main([str(EXAMPLE), "-q"]) == 3
    err = capsys.readouterr().err
    sentence = full_stop(message)
    assert err.startswith(f"diagnose: internal error: ValueError: {sentence} This is a bug"), err
    assert ".." not in err and "?." not in err and "!." not in err
    assert full_stop("a.") == "a." and full_stop("a") == "a." and full_stop("a. ") == "a."


@pytest.mark.slow
def test_an_internal_error_in_compare_is_exit_3(monkeypatch, capsys):
    from nsys_diagnose.cli import compare as comparecli

    monkeypatch.setattr(comparecli, "compare", lambda *a, **k: [][1])
    assert cli.main(["compare", str(EXAMPLE), str(EXAMPLE), "--no-cache"]) == 3
    assert capsys.readouterr().err.startswith("diagnose compare: internal error: IndexError")


@pytest.mark.slow
def test_exit_codes_are_documented_in_help():
    for argv in ([], ["compare"], ["profile"]):
        out = subprocess.run([str(DIAGNOSE), *argv, "--help"], capture_output=True, text=True).stdout
        flat = " ".join(out.split())
        assert "3 internal error" in flat and "143 SIGTERM" in flat
        assert ("4 the program failed" in flat) == (argv == ["profile"])


def test_every_exit_code_a_command_can_return_is_explained_in_the_usage_guide():
    from nsys_diagnose.cli.exits import EXIT_MEANINGS

    guide = (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
    explained = {line.split("|")[1].strip() for line in guide.splitlines() if line.startswith("| ")}
    assert {code for meanings in EXIT_MEANINGS.values() for code, _ in meanings} <= explained


def test_an_os_error_and_running_out_of_memory_are_one_sentence_and_exit_2(monkeypatch, capsys):
    """The same sentence as a batch row's error (engine/base/errors.py error_sentence), file name first."""
    from nsys_diagnose.runs import batch_table
    from nsys_diagnose.base.errors import error_sentence

    full = OSError(28, "No space left on device", "/reports/run\x1b[2J.md")
    for exc, said in ((full, "/reports/run\ufffd[2J.md: No space left on device"),
                      (MemoryError(), "ran out of memory; close other programs")):
        def fail(*args, exc=exc, **kwargs):
            raise exc

        monkeypatch.setattr(cli, "diagnose", fail)
        assert cli.main([str(EXAMPLE), "-q"]) == 2
        assert capsys.readouterr().err.startswith(f"diagnose: error: {said}")
        assert error_sentence(exc).startswith(said)
        assert batch_table.error_row("p.sqlite", error_sentence(exc))["error"].startswith(said)
    assert error_sentence(full, bug=True).startswith("internal error: /reports/run")
    assert error_sentence(KeyError("k"), bug=True) == error_sentence(KeyError("k")) == "internal error: KeyError: 'k'"


def test_control_characters_in_file_names_reach_the_terminal_inert(tmp_path):
    evil = tmp_path / "run\x1b[31mRED\u202eexe.sqlite"
    done = subprocess.run([str(DIAGNOSE), str(evil)], capture_output=True, text=True)
    assert done.returncode == 2
    assert "\x1b" not in done.stderr and "\u202e" not in done.stderr and "RED" in done.stderr
    assert done.stderr.count("\n") == 1


def test_a_report_named_like_an_option_is_not_passed_to_nsys_as_one(tmp_path):
    """`nsys export` converts an .nsys-rep: a file named `-o.nsys-rep` must reach it as a path."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "nsys-args"
    fake = bindir / "nsys"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {log}\necho 'cannot convert' >&2\nexit 1\n")
    fake.chmod(0o755)
    report = tmp_path / "-o.nsys-rep"
    report.write_bytes(b"not really a report")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    done = subprocess.run([str(DIAGNOSE), "--", "-o.nsys-rep"], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 2 and "could not convert" in done.stderr
    args = log.read_text().split("\n")
    assert "-o.nsys-rep" not in args and str(report) in args


@pytest.mark.slow
def test_too_little_address_space_is_one_sentence():
    """DuckDB aborts the process (exit 134) when it cannot reserve address space: refuse up front instead."""
    done = subprocess.run(["bash", "-c", f"ulimit -v 600000; exec {DIAGNOSE} {EXAMPLE} -q --no-cache"],
                          capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("diagnose: error: the address-space limit") and "ulimit -v" in done.stderr
    ok = subprocess.run(["bash", "-c", f"ulimit -v 3000000; exec {DIAGNOSE} {EXAMPLE} -q --no-cache"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.slow
def test_running_out_of_memory_is_not_called_a_damaged_file(tmp_path, big):
    env = dict(os.environ, NSYS_DIAGNOSE_MEMORY_LIMIT="20MB")
    done = subprocess.run([str(DIAGNOSE), str(big), "-q", "--no-cache"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    assert "ran out of memory" in done.stderr and "NSYS_DIAGNOSE_MEMORY_LIMIT" in done.stderr
    assert "damaged" not in done.stderr and "altered" not in done.stderr and done.stderr.count("\n") == 1
