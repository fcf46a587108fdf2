"""`-o` never destroys an input, streams into devices, FIFOs and sockets, follows symbolic links and gives
reports the mode the umask asks for (or the one the replaced report had).

End to end through the CLI in subprocesses; in-process `cli.main` where a step of the run must be stubbed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from nsys_diagnose.cli import compare as comparecli, main as cli
from nsys_diagnose.cli.output import check_output
from nsys_diagnose.base.errors import OutputError
from nsys_diagnose.reading import cache as store
from nsys_diagnose.reading.cache import cache_path

from conftest import slow_but

EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "examples" / "eager_decode.sqlite"
REPORT_MARK = "VERDICT"  # the terminal report's verdict heading
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="creating device nodes and changing owners needs root")


def run(*args: object, cwd: Path | None = None, umask: int = -1, stdout: object = subprocess.PIPE
        ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", *map(str, args)], cwd=cwd, umask=umask,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "run.sqlite"
    shutil.copyfile(EXAMPLE, path)
    return path


def assert_refused(done: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2 and one sentence on stderr, naming what is wrong."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith(("diagnose: error: ", "diagnose compare: error: ")), done.stderr
    assert lines[0].endswith("."), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# -- never onto an input ---------------------------------------------------------------------------------------

def _alias(export: Path, how: str) -> tuple[Path, Path]:
    """(cwd, output) naming `export` in the way `how` says."""
    d = export.parent
    if how == "same path":
        return d, export
    if how == "relative path":
        (d / "sub").mkdir()
        return d / "sub", Path("..") / export.name
    if how == "symlink":
        (d / "link.md").symlink_to(export.name)
        return d, d / "link.md"
    if how == "symlink chain":
        (d / "a.md").symlink_to(export)
        (d / "b.md").symlink_to("a.md")
        return d, d / "b.md"
    if how == "hard link":
        os.link(export, d / "hard.md")
        return d, d / "hard.md"
    raise AssertionError(how)


@pytest.mark.parametrize("how", slow_but(["same path", "relative path", "symlink", "symlink chain", "hard link"],
                                           "symlink chain"))
def test_output_onto_the_input_profile_is_refused(export, how):
    before = digest(export)
    cwd, output = _alias(export, how)
    files = listing(export.parent)
    done = run(export, "-o", output, cwd=cwd)
    assert_refused(done, "the input export", "give the report another path")
    assert digest(export) == before
    assert listing(export.parent) == files


@pytest.mark.parametrize("side", slow_but(["-wal", "-shm", "-journal", "dangling link to -wal"], "-wal"))
def test_output_onto_a_sqlite_side_file_of_the_input_is_refused(export, side):
    output = export.with_name(export.name + side)
    if side.startswith("dangling"):
        output = export.with_name("report.md")
        output.symlink_to(export.name + "-wal")
    done = run(export, "-o", output)
    assert_refused(done, "SQLite")
    assert not export.with_name(export.name + "-wal").exists() and not export.with_name(export.name + "-shm").exists()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["cache", "cache through a dangling link", "facts kept beside the cache"])
def test_output_onto_the_cache_of_the_input_is_refused(export, which):
    warm = run(export, "-q")  # builds the cache
    assert warm.returncode == 0, warm.stderr
    cache = cache_path(export)
    assert cache is not None and cache.is_file(), "the run saves a cache"
    facts = cache.with_name(cache.name + ".facts.json")
    assert facts.is_file(), "the run keeps its facts beside the cache"
    before = digest(cache), digest(facts)
    output = facts if which.startswith("facts") else cache
    if which.endswith("link"):
        output = export.with_name("report.md")
        output.symlink_to(cache.with_name(cache.name + ".wal"))
    done = run(export, "-o", output)
    assert_refused(done, "the facts cached" if which.startswith("facts") else "the cache")
    assert (digest(cache), digest(facts)) == before
    assert not cache.with_name(cache.name + ".wal").exists()


@pytest.mark.parametrize("position", ["before", pytest.param("after", marks=pytest.mark.slow)])
def test_compare_output_onto_either_input_is_refused(tmp_path, position):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copyfile(EXAMPLE, a)
    shutil.copyfile(EXAMPLE, b)
    before = digest(a)
    done = run("compare", a, b, "-o", a if position == "before" else b)
    assert_refused(done, "the input export")
    assert digest(a) == digest(b) == before


def test_output_onto_the_key_that_seals_the_caches_is_refused(export, user_cache):
    """A report written over the key would invalidate every cache sealed with it (docs/security.md)."""
    assert store.cache_dir_private() == user_cache
    assert store.cache_secret(user_cache) is not None
    key = store.key_path(user_cache)
    before = digest(key)
    done = run(export, "-o", key)
    assert_refused(done, f"is in the cache directory of nsys-diagnose, {user_cache}", "never overwritten")
    assert digest(key) == before and listing(user_cache) == {key.name}


def _cache_output(case: str, user_cache: Path, named: Path) -> tuple[Path, Path | None, bool]:
    """(output, --cache-dir, refused) for `case`."""
    user_cache.mkdir(parents=True, exist_ok=True)
    cache = named / f"0123456789abcdef-run.sqlite{store.CACHE_SUFFIX}"
    outputs = {
        "key of the default directory": (store.key_path(user_cache), None, True),
        "report in the default directory": (user_cache / "report.md", None, True),
        "default directory named with --cache-dir": (user_cache / "report.md", user_cache, True),
        "key of --cache-dir": (store.key_path(named), named, True),
        "another user's key in --cache-dir": (named / f"{store.KEY_PREFIX}12345", named, True),
        "cache in --cache-dir": (cache, named, True),
        "cache write-ahead log in --cache-dir": (cache.with_name(cache.name + ".wal"), named, True),
        "facts in --cache-dir": (cache.with_name(cache.name + store.FACTS_SUFFIX), named, True),
        "report beside the caches of --cache-dir": (named / "report.md", named, False),
    }
    return outputs[case]


@pytest.mark.parametrize("case", ["key of the default directory", "report in the default directory",
                                  "default directory named with --cache-dir", "key of --cache-dir",
                                  "another user's key in --cache-dir", "cache in --cache-dir",
                                  "cache write-ahead log in --cache-dir", "facts in --cache-dir",
                                  "report beside the caches of --cache-dir", "key of NSYS_DIAGNOSE_CACHE_DIR",
                                  "link to the key of --cache-dir"])
def test_outputs_never_go_into_the_cache_directory_nor_onto_a_file_of_the_caches(case, export, user_cache,
                                                                                   monkeypatch):
    """Into nsys-diagnose's own cache directory nothing is written; in a directory named for the caches (which may
    be the profiles' own), nothing over the key or a cache. check_output is what every -o, compare -o, batch --out
    and facts show -o runs, before the diagnosis and again right before writing."""
    named = export.parent / "caches"
    named.mkdir()
    if case == "key of NSYS_DIAGNOSE_CACHE_DIR":
        monkeypatch.setenv(store.CACHE_DIR_ENV, str(named))
        output, cache_dir, refused = store.key_path(named), None, True
    elif case == "link to the key of --cache-dir":
        output, cache_dir, refused = export.parent / "report.md", named, True
        output.symlink_to(store.key_path(named))  # dangling: the key is not made yet
    else:
        output, cache_dir, refused = _cache_output(case, user_cache, named)
    if not refused:
        check_output(output, [export], cache_dir)
        return
    with pytest.raises(OutputError, match="cache directory") as raised:
        check_output(output, [export], cache_dir)
    assert "never overwritten" in str(raised.value)
    assert not os.path.exists(output)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["compare", "batch", "facts show"])
def test_every_command_that_writes_a_file_refuses_the_cache_directory(command, export, user_cache):
    assert store.cache_dir_private() == user_cache and store.cache_secret(user_cache) is not None
    key = store.key_path(user_cache)
    before = digest(key)
    args = {"compare": ["compare", export, export, "-o", key],
            "batch": ["batch", export, "--out", user_cache / "results.csv"],
            "facts show": ["facts", "show", "kernel_gaps", export, "-o", key]}[command]
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert "cache directory of nsys-diagnose" in done.stderr and "Traceback" not in done.stderr
    assert digest(key) == before and listing(user_cache) == {key.name}


@pytest.mark.parametrize("given", ["files", pytest.param("directory", marks=pytest.mark.slow)])
def test_multi_rank_output_onto_a_rank_export_is_refused(tmp_path, given):
    ranks = tmp_path / "run"
    ranks.mkdir()
    for rank in (0, 1):
        shutil.copyfile(EXAMPLE, ranks / f"rank{rank}.sqlite")
    before = digest(ranks / "rank0.sqlite")
    inputs = [ranks] if given == "directory" else [ranks / "rank0.sqlite", ranks / "rank1.sqlite"]
    done = run(*inputs, "-o", ranks / ("rank1.sqlite" if given == "directory" else "rank0.sqlite"))
    assert_refused(done, "the input export")
    assert digest(ranks / "rank0.sqlite") == digest(ranks / "rank1.sqlite") == before
    assert listing(ranks) == {"rank0.sqlite", "rank1.sqlite"}


def test_standard_output_appending_to_the_input_is_refused(export):
    before = digest(export)
    with open(export, "ab") as appended:  # diagnose run.sqlite >> run.sqlite
        done = run(export, stdout=appended)
    assert_refused(done, "standard output is the input export")
    assert digest(export) == before


@pytest.mark.parametrize("command", ["diagnose", "compare"])
def test_refusal_comes_before_any_diagnosis(export, command, monkeypatch, capsys):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the diagnosis started although the output had to be refused")

    for module in (cli, comparecli):
        monkeypatch.setattr(module, "diagnose", must_not_run)
    from nsys_diagnose.runs import multirank

    monkeypatch.setattr(multirank, "diagnose_run", must_not_run)  # imported by the command only when it runs
    args = [str(export), "-o", str(export)]
    assert cli.main(["compare", str(export), *args] if command == "compare" else args) == 2
    assert "the input export" in capsys.readouterr().err


@pytest.mark.slow
def test_output_is_checked_again_right_before_writing(export, monkeypatch, capsys):
    """A run can be long: a link put at the output path meanwhile must not lead the report onto the input."""
    before = digest(export)
    output = export.with_name("report.md")
    real = cli.diagnose

    def diagnose_then_link(*args, **kwargs):
        report = real(*args, **kwargs)
        output.symlink_to(export)
        return report

    monkeypatch.setattr(cli, "diagnose", diagnose_then_link)
    assert cli.main([str(export), "-o", str(output)]) == 2
    assert "the input export" in capsys.readouterr().err
    assert digest(export) == before and output.is_symlink()


@pytest.mark.parametrize("kind", slow_but(["existing directory", "missing directory", "file as directory"],
                                          "existing directory"))
def test_output_where_no_file_can_go_is_refused_with_what_to_do(export, kind):
    d = export.parent
    output = {"existing directory": d, "missing directory": d / "nope" / "report.md",
              "file as directory": export / "report.md"}[kind]
    files = listing(d)
    done = run(export, "-o", output)
    expected = {"existing directory": "is a directory; give the path of a file",
                "missing directory": "does not exist; create it first",
                "file as directory": "is not a directory"}[kind]
    assert_refused(done, expected)
    assert listing(d) == files


# -- devices, FIFOs, sockets and standard output -----------------------------------------------------------------

@pytest.mark.slow
@as_root
def test_character_device_is_written_into_not_replaced(export):
    node = export.with_name("null")
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's major and minor numbers
    done = run(export, "-o", node)
    assert done.returncode == 0, done.stderr
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert listing(export.parent) == {"run.sqlite", "null"}


@pytest.mark.slow
@as_root
def test_block_device_is_refused(export):
    node = export.with_name("disk")
    os.mknod(node, 0o660 | stat.S_IFBLK, os.makedev(7, 0))  # never opened: the output is refused first
    done = run(export, "-o", node)
    assert_refused(done, "is a block device")
    assert stat.S_ISBLK(os.lstat(node).st_mode)


@pytest.mark.slow
def test_fifo_reader_gets_the_report(export):
    fifo = export.with_name("pipe")
    os.mkfifo(fifo)
    # Opened non-blocking before the writer, so the reader never hangs, even if the FIFO were replaced.
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    received = bytearray()
    finished = threading.Event()

    def read() -> None:
        while not finished.is_set():
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk:
                received.extend(chunk)
            else:
                time.sleep(0.02)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        done = run(export, "-o", fifo)
        time.sleep(0.2)  # let the reader drain what is left
    finally:
        finished.set()
        reader.join(5)
        os.close(fd)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert REPORT_MARK in received.decode()


@pytest.mark.slow
def test_unix_socket_is_sent_the_report(export, tmp_path):
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(60)
    received = bytearray()

    def serve() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            while chunk := conn.recv(65536):
                received.extend(chunk)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        done = run(export, "-o", path)
        thread.join(10)
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    assert REPORT_MARK in received.decode()


@pytest.mark.slow
def test_dash_is_standard_output(export):
    files = listing(export.parent)
    done = run(export, "-o", "-", cwd=export.parent)
    assert done.returncode == 0, done.stderr
    assert REPORT_MARK in done.stdout
    assert listing(export.parent) == files  # no file named "-"


@pytest.fixture
def dev_stdout_guard():
    """Code that replaces /dev/stdout would break this machine: put the link back, and fail."""
    link = Path("/dev/stdout")
    target = os.readlink(link) if link.is_symlink() else None
    yield
    if target is not None and not link.is_symlink():
        link.unlink()
        link.symlink_to(target)
        pytest.fail("/dev/stdout was replaced (and has been put back)")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_standard_output_names_are_standard_output(export, name, dev_stdout_guard):
    done = run(export, "-o", name)
    assert done.returncode == 0, done.stderr
    assert REPORT_MARK in done.stdout


# -- symbolic links and modes ---------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("target_exists", [True, False])
def test_symlink_output_writes_its_target_and_stays_a_link(export, target_exists):
    (export.parent / "out").mkdir()
    target = export.parent / "out" / "report.txt"
    if target_exists:
        target.write_text("old report\n")
    link = export.with_name("latest.txt")
    link.symlink_to(Path("out") / "report.txt")
    done = run(export, "-o", link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(Path("out") / "report.txt")
    assert REPORT_MARK in target.read_text()
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.txt"]  # no temporary file left


@pytest.mark.slow
def test_new_report_gets_the_mode_the_umask_asks_for(export):
    for umask, mode in ((0o022, 0o644), (0o027, 0o640), (0o077, 0o600)):
        output = export.with_name(f"report-{umask:03o}.txt")
        done = run(export, "-o", output, umask=umask)
        assert done.returncode == 0, done.stderr
        assert stat.S_IMODE(output.stat().st_mode) == mode, f"umask {umask:03o}"


@pytest.mark.slow
def test_replaced_report_keeps_its_mode_and_owner_and_is_private_while_written(export, monkeypatch, capsys):
    output = export.with_name("report.txt")
    output.write_text("old report\n")
    output.chmod(0o640)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    if os.geteuid() == 0:
        os.chown(output, *owner)
    modes_while_written: list[int] = []
    real_write = os.write

    def write(fd, data):
        if os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == str(export.parent.resolve()):
            modes_while_written.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "umask", lambda *_: pytest.fail("os.umask changes the umask of every thread"))
        assert cli.main([str(export), "-o", str(output)]) == 0, capsys.readouterr().err
    st = output.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert (st.st_uid, st.st_gid) == owner
    assert REPORT_MARK in output.read_text()
    assert modes_while_written and all(mode & ~0o640 == 0 for mode in modes_while_written), modes_while_written


@pytest.mark.slow
def test_interrupted_write_leaves_the_old_report_and_no_temporary_file(export, monkeypatch, capsys):
    output = export.with_name("report.txt")
    output.write_text("old report\n")
    files = listing(export.parent)
    real_fsync = os.fsync

    def interrupted(fd):
        if os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == str(export.parent.resolve()):
            raise KeyboardInterrupt  # Ctrl-C once the report is written, before it is renamed into place
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", interrupted)
    assert cli.main([str(export), "-o", str(output)]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert output.read_text() == "old report\n"
    assert listing(export.parent) == files


DIAGNOSE = Path(sys.executable).parent / "diagnose"


def _with_stdout_closed(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`diagnose ARGS >&-`: the caller closed standard output."""
    return subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', str(DIAGNOSE), *map(str, args)], cwd=cwd,
                          stderr=subprocess.PIPE, text=True, timeout=120)


@pytest.mark.parametrize("words", slow_but([[], ["rules", "list"], ["--help"]], []),
                         ids=["report", "rules list", "help"])
def test_a_closed_standard_output_is_one_sentence_and_exit_2(export, words):
    """Nowhere to write the output: said in one sentence, exit 2 (as for any place an output cannot go), before
    any diagnosis work, never an internal error or a traceback."""
    done = _with_stdout_closed(*(words or [export, "-q", "--no-cache"]))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "standard output is closed" in done.stderr
    assert "-o FILE" in done.stderr and "Traceback" not in done.stderr and "internal error" not in done.stderr


@pytest.mark.slow
def test_with_standard_output_closed_a_report_given_o_is_written_and_nothing_else(export, tmp_path):
    """A closed standard output is no reason to fail a run whose report goes to -o; and the descriptor the caller
    closed is never given to a file the run opens, where output meant for standard output would land."""
    out = tmp_path / "out"
    out.mkdir()
    done = _with_stdout_closed(export, "-q", "--no-cache", "-o", out / "report.txt")
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.iterdir()] == ["report.txt"] and REPORT_MARK in (out / "report.txt").read_text()
