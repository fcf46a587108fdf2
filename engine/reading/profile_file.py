"""The profile as it is read: one open file descriptor, whose fstat and content hash key the cache.

SQLite opens files by path (it even resolves `/proc/self/fd/N` back to the file's name), so the scans read the
profile's real path, resolved once when it is opened, and the file there is checked to still be the one the
descriptor holds, unchanged, once every table is read. Switching a `current.sqlite` symlink during a run
therefore changes nothing (the resolved file is read), and moving another export over the profile during a
run is reported instead of mixing two exports or leaving a cache keyed to one and holding the other.

An export that SQLite may still be writing (a `-wal` file or a hot `-journal` beside it, or WAL mode in its
header) is never cached: rows committed to the WAL change neither the size, the modification time nor the
content of the main file.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

from .inputs import live_reason
from ..errors import InputError

_CHUNK = 1 << 22


class ProfileFile:
    def __init__(self, path: Path, fd: int, st: os.stat_result, live: str | None) -> None:
        self.path = path
        self.fd = fd
        self.stat = st
        self.live = live  # why the export may still change under SQLite (a WAL or hot journal), else None
        self.scan_path = os.path.realpath(path)  # what SQLite opens: the file itself, not a link to it
        self._digest: str | None = None
        self._hasher: threading.Thread | None = None
        self._hash_error: BaseException | None = None

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
                digest.update(chunk)
                offset += len(chunk)
            self._digest = digest.hexdigest()
        except BaseException as exc:  # handed to the thread that asks for the digest
            self._hash_error = exc

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
        st = self.stat
        return {"device": st.st_dev, "inode": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                "sha256": self._digest or ""}

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
            self._hasher.join()
            self._hasher = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "ProfileFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

