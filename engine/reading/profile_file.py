"""The profile as it is read: one open file descriptor, whose fstat and content hash key the cache.

SQLite opens files by path (it even resolves `/proc/self/fd/N` back to the file's name), so the scans read the
profile's real path, resolved once when it is opened, and the file there is checked to still be the one the
descriptor holds, unchanged, once every table is read. Switching a `current.sqlite` symlink during a run
therefore changes nothing (the resolved file is read), and moving another export over the profile during a
run is reported instead of mixing two exports or leaving a cache keyed to one and holding the other.

An export that SQLite may still be writing (a `-wal` file or a hot `-journal` beside it, or WAL mode in its
header) is never cached: rows committed to the WAL change neither the size, the modification time nor the
content of the main file.

An export in WAL mode, or with a `-wal` file beside it, is not read in place: SQLite, even read-only, creates the
`-shm` (and `-wal`) files beside a WAL database to share its WAL index, unless they exist already
(https://www.sqlite.org/wal.html, "Read-Only Databases"), and the only way to open it without them, the URI
parameter `immutable=1`, also ignores the rows committed to an existing WAL (https://www.sqlite.org/uri.html). DuckDB's
SQLite scanner takes a file name, not a URI, anyway. So the file (from the descriptor that was checked and hashed)
and its `-wal` are copied into the run's private scratch directory and read there, where SQLite may write its
side files; the copy is removed once the tables are read.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
import threading
from pathlib import Path

from .inputs import SQLITE_MAGIC, live_reason
from ..base.errors import InputError

_CHUNK = 1 << 22
_COPY_CHUNK = 1 << 26  # per copy call: Ctrl-C stops a copy of a large export between two of them


class ProfileFile:
    def __init__(self, path: Path, fd: int, st: os.stat_result, live: str | None) -> None:
        self.path = path
        self.fd = fd
        self.stat = st
        self.live = live  # why the export may still change under SQLite (a WAL or hot journal), else None
        self.scan_path = os.path.realpath(path)  # what SQLite opens: the file itself, not a link to it
        self.wal = _in_wal_mode(fd, self.scan_path)  # read from a private copy (see the module's doc)
        self._digest: str | None = None
        self._hasher: threading.Thread | None = None
        self._hash_error: BaseException | None = None
        self._stop_hashing = threading.Event()  # stop_hashing() and close(): a hash nobody will read stops early

    @classmethod
    def open(cls, path: Path) -> "ProfileFile":
        try:
            # O_NONBLOCK: a path switched to a FIFO after it was checked must not hang the open.
            fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except PermissionError:
            raise InputError(f"{path}: permission denied; make the file readable (chmod +r) or run as its "
                             f"owner.") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot be opened ({exc.strerror}).") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{path} is not a regular file; give the path of an nsys SQLite export.")
            opened = cls(path, fd, st, live_reason(Path(os.path.realpath(path)), fd))  # side files sit by the file
            opened.check_unchanged()  # the path still leads to the file just opened
            return opened
        except BaseException:
            os.close(fd)
            raise

    def private_copy(self, directory: Path) -> Path:
        """Copy the export (from its descriptor) and its `-wal`, if any, into `directory`, for SQLite to read
        there; returns the copy's path. Its side files are created there, never beside the profile."""
        target = directory / "export.sqlite"
        try:
            with open(target, "xb") as out:
                os.fchmod(out.fileno(), 0o600)
                _copy(self.fd, out.fileno())
            wal = self.scan_path + "-wal"
            try:
                fd = os.open(wal, os.O_RDONLY | os.O_NOCTTY | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                return target
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise InputError(f"{wal} is not a regular file, so SQLite cannot read the rows it should hold; "
                                     f"remove it if no program is writing {self.path}.")
                with open(str(target) + "-wal", "xb") as out:
                    os.fchmod(out.fileno(), 0o600)
                    _copy(fd, out.fileno())
            finally:
                os.close(fd)
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
            why = "has no space for it" if full else f"cannot hold it ({exc.strerror})"
            raise InputError(f"{self.path} is in SQLite's write-ahead-log mode, which SQLite cannot read without "
                             f"writing beside it, so it is read from a private copy, but the temporary directory "
                             f"{tempfile.gettempdir()} {why}; free some space or point TMPDIR at a larger disk, or "
                             f"leave WAL mode with `sqlite3 {self.path} 'PRAGMA journal_mode=DELETE'`.") from None
        return target

    def link_into(self, directory: Path) -> str:
        """A symbolic link in `directory`, under an ASCII name, to the file at the scanned path; for a name that is
        not valid UTF-8 (kept in a str by surrogate escapes, https://peps.python.org/pep-0383/), which DuckDB
        cannot take: it passes file names on as UTF-8 text. SQLite follows the link to the file itself, so its
        side files are looked for beside the file, never beside the link (https://www.sqlite.org/c3ref/open.html)."""
        link = directory / "export-link.sqlite"
        try:
            os.symlink(self.scan_path, link)
        except OSError as exc:
            raise InputError(f"{self.path}: its name is not valid UTF-8 and cannot be read through a link in the "
                             f"temporary directory {tempfile.gettempdir()} ({exc.strerror}); rename the file and "
                             f"run again.") from None
        return str(link)

    def start_hashing(self) -> None:
        """Hash the content in a background thread (hashlib releases the GIL), e.g. while the export is read."""
        if self._hasher is None and self._digest is None:
            thread = threading.Thread(target=self._hash, name="nsys-diagnose-hash", daemon=True)
            thread.start()
            self._hasher = thread  # only once started: a stop signal may land between the two lines above

    def _hash(self) -> None:
        try:
            digest = hashlib.sha256()
            offset = 0
            while chunk := os.pread(self.fd, _CHUNK, offset):
                if self._stop_hashing.is_set():
                    return
                digest.update(chunk)
                offset += len(chunk)
            self._digest = digest.hexdigest()
        except BaseException as exc:  # handed to the thread that asks for the digest
            self._hash_error = exc

    def stop_hashing(self) -> None:
        """No cache will be keyed on this content: a hash under way stops at its next chunk. fingerprint() then
        refuses."""
        self._stop_hashing.set()

    def fingerprint(self) -> dict[str, int | str]:
        """What must be unchanged for a cache to be reused: the file (device, inode), its size, modification
        time and the SHA-256 of its whole content, all taken from the descriptor the scans read."""
        self.start_hashing()
        assert self._hasher is not None or self._digest is not None
        if self._hasher is not None:
            self._hasher.join()
            self._hasher = None
        if self._hash_error is not None:
            raise InputError(f"{self.path}: cannot be read ({self._hash_error}).")
        if self._digest is None:
            raise RuntimeError("the profile's hash was stopped: no cache may be keyed on it")
        st = self.stat
        return {"device": st.st_dev, "inode": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                "sha256": self._digest}

    def check_unchanged(self) -> None:
        """The file at the scanned path must still be the one first opened, unchanged: else what SQLite read
        may mix two exports."""
        try:
            now = os.stat(self.scan_path)
        except OSError:
            now = None
        before = self.stat
        if now is None or (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != \
                (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns):
            raise InputError(f"{self.path} changed while it was being read (it was replaced, moved or written to); "
                             f"run again once the export is complete.")

    def close(self) -> None:
        if self._hasher is not None:
            self._stop_hashing.set()
            self._hasher.join()
            self._hasher = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "ProfileFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



def _in_wal_mode(fd: int, path: str) -> bool:
    """SQLite opens this file in WAL mode: its header says so (bytes 18-19 = 2, https://www.sqlite.org/fileformat.html)
    or a `-wal` file is beside it (which SQLite then uses whatever the header says)."""
    header = os.pread(fd, 20, 0)
    if not header.startswith(SQLITE_MAGIC[:16]) or len(header) < 20:
        return False
    return (header[18] == 2 and header[19] == 2) or os.path.lexists(path + "-wal")


def _copy(source: int, target: int) -> None:
    """All of `source` (from its start) into `target`: in the kernel (copy_file_range) where it can, else by reading
    and writing (another file system on older kernels, or one that does not support it)."""
    offset = 0
    while True:
        try:
            done = os.copy_file_range(source, target, _COPY_CHUNK, offset)
        except (AttributeError, OSError) as exc:
            unsupported = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)
            if isinstance(exc, OSError) and exc.errno not in unsupported:
                raise
            break
        if done == 0:
            return
        offset += done
    while chunk := os.pread(source, _CHUNK, offset):  # where the kernel cannot copy between these two files
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view):]
        offset += len(chunk)
