"""Leftovers of runs that were killed. Every temporary directory and cache build directory carries the process id
in its name; a later run removes those whose process is gone (a SIGKILL or a power cut cannot clean up after
itself)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

from .cache import BUILD_PREFIX
from .workspace import SCRATCH_PREFIX
LEFTOVER_AGE_S = 300          # a leftover younger than this may belong to a run that is just starting
_LEFTOVER = re.compile(r"^(?:" + re.escape(SCRATCH_PREFIX) + r"|" + re.escape(BUILD_PREFIX) + r")(\d+)-")
# Scratch directories of versions that did not put the process id in the name: no run lasts a day.
_LEGACY_LEFTOVER = re.compile(r"^" + re.escape(SCRATCH_PREFIX) + r"[a-z0-9_]{8}$")
LEGACY_LEFTOVER_AGE_S = 86_400


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def sweep_leftovers(directories: list[Path], now: float | None = None) -> list[Path]:
    """Remove scratch and cache-build directories in `directories` that belong to this user, are older than
    LEFTOVER_AGE_S and whose process is gone. Returns what was removed."""
    now = time.time() if now is None else now
    removed: list[Path] = []
    for d in directories:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for entry in entries:
            m = _LEFTOVER.match(entry.name)
            legacy = m is None and _LEGACY_LEFTOVER.match(entry.name) is not None
            if not (m or legacy) or (m and int(m.group(1)) == os.getpid()):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            age = LEGACY_LEFTOVER_AGE_S if legacy else LEFTOVER_AGE_S
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or now - st.st_mtime < age:
                continue
            if legacy or (m is not None and _process_gone(int(m.group(1)))):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
    return removed


_SWEPT: set[str] = set()


def sweep_once(*directories: Path | None) -> None:
    """sweep_leftovers over the temporary directory and the given cache directories, once per process each."""
    todo = [Path(d) for d in (Path(tempfile.gettempdir()), *directories) if d is not None and str(d) not in _SWEPT]
    _SWEPT.update(str(d) for d in todo)
    sweep_leftovers(todo)
