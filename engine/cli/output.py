"""Write a rendered report where `-o` says, without ever destroying an input.

`check_output` runs before the diagnosis starts (fail fast) and again inside `emit`, right before writing:
the output must not resolve, through symbolic links or as a hard link, to an input export, the SQLite files
beside it (`-wal`, `-shm`, `-journal`), or its cache (and the cache's `.wal`); it must not lie in the cache
directory of nsys-diagnose nor be a file of the caches in a directory named with --cache-dir (a cache, or the key
that seals them all); it must not be a directory or a block device, and its directory must exist. Then `emit`
writes:

- `-`, /dev/stdout, /dev/fd/1 and /proc/self/fd/1 (and no `-o` at all): standard output;
- a character device, FIFO or socket: opened and streamed into, never replaced;
- anything else: the final target of the symbolic links (the links stay), written atomically: a temporary
  file beside the target, readable by its owner only while it is written, renamed onto the target when
  complete and never left behind. A new report gets the mode the umask asks for; a replaced report keeps
  its mode (and, as root, its owner and group).
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import signal
import socket
import stat
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import InputError, OutputError
from ..reading.ranks import exports_in
from ..reading.cache import (FACTS_SUFFIX, cache_file_kind, cache_location, chosen_cache_dir, key_path,
                             user_cache_dir)
from ..base.text import printable

STDOUT_ALIASES = frozenset({"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"})
SQLITE_SIDE_FILES = {"-wal": "SQLite write-ahead log", "-shm": "SQLite shared-memory file",
                     "-journal": "SQLite rollback journal"}
CACHE_WAL_SUFFIX = ".wal"
Inputs = Sequence[str | os.PathLike[str]]

_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
_STREAM_FLAGS = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC  # no O_CREAT: streaming never makes a file
_UMASK_LOCK = threading.Lock()


@dataclass(frozen=True)
class Protected:
    """A file the report must never replace (it need not exist yet), and what it is, for the message."""

    path: Path
    what: str


_EXTENSION_FORMATS = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".json": "json"}


def output_formats(outputs: list[Path], fmt: str | None) -> list[tuple[Path | None, str]]:
    """(file, format) of every report to write: standard output when no -o is given; `fmt` (-f) for the one file
    when it is given, else each file's extension (.md, .html, .json; anything else: the terminal text)."""
    if not outputs:
        return [(None, fmt or "terminal")]
    if fmt and len(outputs) > 1:
        raise InputError(f"-f {fmt} with {len(outputs)} -o files: with several -o, each file's extension chooses "
                         f"its format (.md, .html, .json); drop -f")
    if len({os.path.abspath(o) for o in outputs}) < len(outputs):
        raise InputError("the same -o file is given twice; give each report its own file")
    return [(o, fmt or _EXTENSION_FORMATS.get(o.suffix.lower(), "terminal")) for o in outputs]


CLOSED_STDOUT = ("standard output is closed, so there is nowhere to write to; redirect it (> report.txt) or, "
                 "for a report, give -o FILE")


class ClosedOutput(io.TextIOBase):
    """sys.stdout when the caller closed standard output (`diagnose run.sqlite >&-`): every write fails with one
    sentence (exit code 2), as with any other place a report cannot be written to."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OutputError(CLOSED_STDOUT + ".")

    def isatty(self) -> bool:
        return False


def is_stdout(output: Path | None) -> bool:
    """No `-o`, or one of the names of standard output."""
    return output is None or os.path.normpath(str(output)) in STDOUT_ALIASES


def protected_files(inputs: Inputs, cache_dir: str | os.PathLike[str] | None = None) -> list[Protected]:
    """Every input export (a directory stands for the exports it holds) and the files that belong to it,
    its cache (in `cache_dir` when one is given, as with --cache-dir) included."""
    files: list[Protected] = []
    for raw in inputs:
        if os.fspath(raw) == "":
            continue  # Path("") would be the working directory; the diagnosis refuses an empty path itself
        given = Path(raw)
        for export in exports_in(given) if given.is_dir() else [given]:
            files.extend(_belonging_to(export, cache_dir))
    return files


def _belonging_to(export: Path, cache_dir: str | os.PathLike[str] | None) -> list[Protected]:
    name = f"the input export {export}"
    files = [Protected(export, name)]
    # SQLite keeps its side files beside the database's real path; a link to it may be what was given.
    for base in dict.fromkeys([str(export), os.path.realpath(export)]):
        files += [Protected(Path(base + suffix), f"the {kind} of {name}")
                  for suffix, kind in SQLITE_SIDE_FILES.items()]
    # The cache is named after the path the export was given by; its real path may have one of its own.
    for cache in dict.fromkeys((cache_location(export, cache_dir),
                                cache_location(Path(os.path.realpath(export)), cache_dir))):
        files += [Protected(cache, f"the cache of {name}"),
                  Protected(cache.with_name(cache.name + CACHE_WAL_SUFFIX), f"the cache write-ahead log of {name}"),
                  Protected(cache.with_name(cache.name + FACTS_SUFFIX), f"the facts cached for {name}")]
    return files


def check_output(output: Path | None, inputs: Inputs, cache_dir: str | os.PathLike[str] | None = None) -> None:
    """Raise OutputError (one sentence) unless a report can go to `output` without harming any input."""
    protected = protected_files(inputs, cache_dir)
    if output is None or is_stdout(output):
        _check_stdout(protected + _cache_keys(cache_dir))
        return
    _check_not_protected(output, protected)
    check_outside_cache(output, cache_dir)
    _check_place(output)


def _cache_keys(cache_dir: str | os.PathLike[str] | None) -> list[Protected]:
    """The keys that seal the caches, in the user's own cache directory and in the one named (--cache-dir)."""
    directories = dict.fromkeys(d for d in (user_cache_dir(), chosen_cache_dir(cache_dir)) if d is not None)
    return [Protected(key_path(d), f"the key that seals the caches in {d}") for d in directories]


def check_outside_cache(output: Path, cache_dir: str | os.PathLike[str] | None = None, option: str = "-o") -> None:
    """Nothing is written into nsys-diagnose's own cache directory ($XDG_CACHE_HOME/nsys-diagnose), nor over a file
    of the caches kept in a directory the user named (--cache-dir, NSYS_DIAGNOSE_CACHE_DIR), which may be the
    profiles' own: a report there would replace the key that seals every cache there (docs/security.md), or a
    cache. Symbolic links are followed, as the report would be."""
    real = Path(_real(output))
    own = Path(_real(user_cache_dir()))
    if real == own or own in real.parents:
        raise OutputError(f"{option} {output} is in the cache directory of nsys-diagnose, {own}; give another path "
                          f"(the caches, and the key that seals them, are never overwritten).")
    chosen = chosen_cache_dir(cache_dir)
    what = cache_file_kind(real.name)
    if chosen is not None and what is not None and real.parent == Path(_real(chosen)):
        raise OutputError(f"{option} {output} is {what} in the cache directory {chosen}; give another path (the "
                          f"caches, and the key that seals them, are never overwritten).")


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.normcase(os.path.realpath(path))


def _check_stdout(protected: list[Protected]) -> None:
    """`diagnose run.sqlite >> run.sqlite` would append the report to the export; `>&-` leaves it nowhere to go."""
    if isinstance(sys.stdout, ClosedOutput):
        raise OutputError(CLOSED_STDOUT + ".")
    try:
        st = os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        return
    if not stat.S_ISREG(st.st_mode):
        return
    for item in protected:
        if _identity(item.path) == (st.st_dev, st.st_ino):
            raise OutputError(f"standard output is {item.what}; redirect it to another file (inputs and their "
                              f"side files are never overwritten).")


def _check_not_protected(output: Path, protected: list[Protected]) -> None:
    real, identity = _real(output), _identity(output)
    for item in protected:
        if real == _real(item.path):
            through_link = os.path.realpath(output) != os.path.abspath(output)
            how = "leads through a symbolic link to" if through_link else "is"
        elif identity is not None and identity == _identity(item.path):
            how = "is a hard link to"
        else:
            continue
        raise OutputError(f"-o {output} {how} {item.what}; give the report another path (inputs and their side "
                          f"files are never overwritten).")


def _check_place(output: Path) -> None:
    """A directory or a block device is refused; a new file needs an existing, writable directory."""
    try:
        st = os.stat(output)
    except (FileNotFoundError, NotADirectoryError):
        st = None  # a new file (or a dangling symbolic link to one)
    except OSError as exc:
        raise OutputError(f"-o {output} cannot be used for the report ({exc.strerror}); give another path.") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"-o {output} is a directory; give the path of a file for the report, such as "
                          f"{output / 'report.md'}.")
    if st is not None and stat.S_ISBLK(st.st_mode):
        raise OutputError(f"-o {output} is a block device; give the path of a file (or of a character device, "
                          f"FIFO or socket) for the report.")
    if st is not None and not stat.S_ISREG(st.st_mode):
        return  # streamed into: no file is created beside it
    directory = Path(os.path.realpath(output)).parent
    if not directory.is_dir():
        state = "is not a directory" if directory.exists() else "does not exist"
        raise OutputError(f"-o {output}: the directory {directory} {state}; create it first (mkdir -p) or give "
                          f"another path for the report.")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"-o {output}: the directory {directory} is not writable for you; give a path in a "
                          f"directory you can write to.")


def emit(text: str, output: Path | None, *, inputs: Inputs = (),
         cache_dir: str | os.PathLike[str] | None = None) -> None:
    """Write a rendered report to `output` (None or `-`: standard output), checking it again first: the
    diagnosis can take long enough for the file system to change."""
    check_output(output, inputs, cache_dir)
    text = printable(text)  # a file name that is not UTF-8 never makes a report unwritable (text.printable)
    if output is None or is_stdout(output):
        sys.stdout.write(text)
        return
    try:
        st: os.stat_result | None = os.stat(output)
    except FileNotFoundError:
        st = None
    data = text.encode("utf-8")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _stream(output, st, data)
    else:
        _replace_atomically(Path(os.path.realpath(output)), data, st)


def _stream(output: Path, st: os.stat_result, data: bytes) -> None:
    """Character devices, FIFOs and sockets are written into, never replaced (a FIFO waits for its reader)."""
    try:
        _stream_into(output, st, data)
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(output)) from None  # e.g. a reader that went away: EPIPE


def _stream_into(output: Path, st: os.stat_result, data: bytes) -> None:
    if stat.S_ISSOCK(st.st_mode):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(output))
            sock.sendall(data)
        return
    fd = os.open(output, _STREAM_FLAGS)
    with open(fd, "wb") as fh:
        if stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a regular file since the check: writing would mix
            raise OutputError(f"-o {output} was replaced by a regular file while the report was being written; "
                              f"run again.")
        fh.write(data)


def _replace_atomically(target: Path, data: bytes, existing: os.stat_result | None) -> None:
    """Temporary file beside `target` (owner-only while written), then rename: never a half-written report."""
    mode = stat.S_IMODE(existing.st_mode) if existing else 0o666 & ~current_umask()
    fd, tmp = -1, None
    try:
        with _interrupts_deferred():  # the name must be known before Ctrl-C can strike, or the file stays
            fd, tmp = _create_temp(target)
        _write_all(fd, data)
        if existing is not None:
            _keep_owner(fd, existing)
        os.fchmod(fd, mode)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        if exc.filename == str(target):
            raise
        raise OSError(exc.errno, exc.strerror, str(target)) from None  # name the report, not the temporary file
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp is not None:
            _unlink_quietly(tmp)


def _create_temp(target: Path) -> tuple[int, Path]:
    for _ in range(100):
        tmp = target.with_name(f".{target.name[:200]}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free name for a temporary file", str(target.parent))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _keep_owner(fd: int, existing: os.stat_result) -> None:
    """Root keeps the replaced report's owner and group; anyone else keeps its group when allowed to."""
    if os.geteuid() == 0:
        os.fchown(fd, existing.st_uid, existing.st_gid)
    elif existing.st_gid != os.getegid():
        try:
            os.fchown(fd, -1, existing.st_gid)
        except PermissionError:
            pass


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def current_umask() -> int:
    """The process's umask. os.umask can only read it by setting it, for every thread at once (the ranks of a
    run are threads, and DuckDB has its own): /proc tells it without that; elsewhere it is set to the strict
    0o077 for the instant before it is put back, under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) for the duration of the block, then deliver it to the handler that was in place."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield  # only the main thread handles signals; a handler set outside Python cannot be put back
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)


def wants_colour(choice: str, output: Path | None) -> bool:
    """--color auto|always|never: auto means colour only on a terminal, and never when NO_COLOR is set."""
    if choice == "always":
        return True
    return choice == "auto" and is_stdout(output) and sys.stdout.isatty() and "NO_COLOR" not in os.environ
