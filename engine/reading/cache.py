"""Where the canonical tables live: a compressed DuckDB file, cached in the user's own cache directory and
reused while the profile is unchanged, plus a private scratch directory for everything else.

Why files and not DuckDB's memory: an in-memory table of 5 M kernels takes about 1 GB uncompressed, while the
same rows in a database file are compressed (about 80 MB) and can be evicted, so peak memory stays bounded
by the memory limit set here. Facts then run in an in-memory scratch database that attaches the canonical file:
a database file would write and sync its log on every fact's table (about ten times the cost of the query itself on
a small export) and checkpoint them all at close, only to delete them; past the memory limit DuckDB spills the
facts' tables to the spill directory like any other data.

Layout of one diagnosis:
    <scratch dir>/spill/             DuckDB's spill files: sorts, joins and fact tables larger than the memory limit
    <cache file>                     the canonical tables, in the scratch dir when there is no cache, else
                                     <cache dir>/<hash of the profile path>-<name>.nsys-diagnose.duckdb

Trust (the cache is private to its user; see docs/security.md):
- The cache directory is `$XDG_CACHE_HOME/nsys-diagnose` (else `~/.cache/nsys-diagnose`), created 0700. Another
  directory, such as the profile's own, is used only when asked for (`--cache-dir` or NSYS_DIAGNOSE_CACHE_DIR), and
  only when it exists: a directory the user named is never created (a typo would otherwise leave directories, with
  whatever mode, wherever it points), so without it the run goes on without a cache and says why.
- Every cache is sealed with the user's random key, kept in the cache directory itself (`.nsys-diagnose-key-<uid>`,
  0600): nothing is written outside the directory the user chose, and users sharing a directory have a key each.
- A cache file is used only when it is a regular file owned by this user that nobody else may write, in a
  directory nobody else may write (or one with the sticky bit, where others cannot replace our files). One of this
  user's that others may write (or, the key, read) is never read but replaced; one of another user's is left alone.
  Whatever keeps the cache from being used is said as a CacheWarning, which the command line prints once.
- Its catalog must hold exactly the canonical tables, created by exactly the statements this version writes:
  no view, macro, sequence, index, constraint, default or generated column, which could run SQL when read.
- It is read by a DuckDB instance that never loads the SQLite extension and has external access disabled, so
  even a forged cache could not read a file or run a file-reading function.
- A cache is built in a private (0700) directory beside its final place and renamed into place complete; it
  gets the profile's read permission bits, so a private profile never gets a cache others can read.

The scratch space and DuckDB's settings are in workspace.py, the format of a cache in cache_format.py, the
removal of what killed runs left behind in leftovers.py, the lasting progress messages in messages.py.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

from ..base.text import is_utf8, printable, shown_path

CACHE_SUFFIX = ".nsys-diagnose.duckdb"
FACTS_SUFFIX = ".facts.json"  # the computed facts kept beside a cache (engine/facts/results_cache.py)
CACHE_DIR_ENV = "NSYS_DIAGNOSE_CACHE_DIR"
BUILD_PREFIX = ".nsys-diagnose-build-"
_NAME_BYTES = 120             # the profile's name kept in a cache file name (file names stop at 255 bytes)


# -- The cache directory and what in it is trusted -----------------------------------------------------------

def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base and os.path.isabs(base) else Path.home() / ".cache") / "nsys-diagnose"


def _safe_directory(d: Path, *, private: bool) -> bool:
    """A directory whose files only this user can replace: ours (or root's), and not writable by others unless
    the sticky bit stops them renaming or removing our files. `private`: ours and 0700, made so if needed."""
    try:
        st = os.stat(d)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or not os.access(d, os.W_OK | os.X_OK):
        return False
    mine = st.st_uid == os.geteuid()
    if private:
        if not mine:
            return False
        if st.st_mode & 0o077:
            try:
                os.chmod(d, 0o700)
            except OSError:
                return False
        return True
    if not (mine or st.st_uid == 0):
        return False
    return not (st.st_mode & 0o022) or bool(st.st_mode & stat.S_ISVTX)


def chosen_cache_dir(override: str | os.PathLike | None) -> Path | None:
    """The cache directory the user chose: `override` (--cache-dir), else NSYS_DIAGNOSE_CACHE_DIR; None for the
    default."""
    chosen = override if override not in (None, "") else os.environ.get(CACHE_DIR_ENV) or None
    return None if chosen is None else Path(chosen)


def cache_dir(override: str | os.PathLike | None = None) -> Path | None:
    """Where caches go: `override` (--cache-dir), else NSYS_DIAGNOSE_CACHE_DIR, else the user's own cache
    directory (created 0700). None when that directory cannot be used safely: the run then goes on without."""
    return usable_cache_dir(override)[0]


def usable_cache_dir(override: str | os.PathLike | None = None) -> tuple[Path | None, str | None]:
    """cache_dir, and when there is none, why and what to do about it (one clause, for the warning the command line
    prints: CacheWarning). A directory the user named must exist."""
    d = chosen_cache_dir(override)
    if d is None:
        private = cache_dir_private()
        if private is not None and not is_utf8(str(private)):
            return None, (f"the cache directory {shown_path(private)} has a name that is not valid UTF-8, which "
                          f"DuckDB cannot open; choose another with --cache-dir or {CACHE_DIR_ENV}")
        if private is not None:
            return private, None
        own = user_cache_dir()
        return None, (f"the cache directory {own} cannot be created, or is not yours alone (0700); create it "
                      f"(mkdir -p -m 0700 {own}) or choose another with --cache-dir or {CACHE_DIR_ENV}")
    named, undo = (("--cache-dir", "drop --cache-dir") if override not in (None, "")
                   else (CACHE_DIR_ENV, f"unset {CACHE_DIR_ENV}"))
    if not d.is_dir():
        if d.exists():
            return None, f"the cache directory {d} ({named}) is not a directory; name a directory, or {undo}"
        return None, f"the cache directory {d} ({named}) does not exist; create it (mkdir -p {d}), or {undo}"
    if not _safe_directory(d, private=False):
        return None, f"the cache directory {d} ({named}) {_unsafe_because(d)}, or {undo}"
    if not is_utf8(str(d)):
        return None, (f"the cache directory {shown_path(d)} ({named}) has a name that is not valid UTF-8, which "
                      f"DuckDB cannot open; give another directory, or {undo}")
    return d, None


def cache_problem(override: str | os.PathLike | None = None) -> str | None:
    """Why no cache can be kept in the cache directory (usable_cache_dir) or under its key (key_problem), and what
    to do; None when caching works. The key is made if need be."""
    d, why_not = usable_cache_dir(override)
    if d is not None and cache_secret(d) is None:
        return key_problem(d)
    return why_not


def _unsafe_because(d: Path) -> str:
    """Why `d`, an existing directory, fails _safe_directory(private=False), and what to do: the start of a clause
    that ends with the alternative of not using it."""
    try:
        st = os.stat(d)
    except OSError as exc:
        return f"cannot be read ({exc.strerror}); give another directory"
    if not os.access(d, os.W_OK | os.X_OK):
        return "is not writable for you; give a directory you can write to"
    if st.st_uid not in (os.geteuid(), 0):
        return "belongs to another user, who could replace the caches in it; give a directory of your own"
    return (f"may be written by others and has no sticky bit, so they could replace the caches in it: "
            f"chmod +t {d} (as /tmp has) or chmod 0700 {d} (if it is yours alone)")


def cache_dir_private() -> Path | None:
    """The user's own cache directory, created 0700 (and made 0700 again if it was opened up)."""
    d = user_cache_dir()
    try:
        d.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        d.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return d if _safe_directory(d, private=True) else None


def _short_name(name: str) -> str:
    name = printable(name)  # DuckDB opens the cache by its name, which it takes as UTF-8 text only
    data = name.encode("utf-8")
    if len(data) <= _NAME_BYTES:
        return name
    return data[:_NAME_BYTES].decode("utf-8", "ignore")


def _cache_name(profile: Path) -> str:
    """One file per profile path (a hash of the absolute path), so two profiles of one name never share a cache."""
    keyed = hashlib.sha256(os.fsencode(os.path.abspath(profile))).hexdigest()[:16]
    return f"{keyed}-{_short_name(Path(profile).name)}{CACHE_SUFFIX}"


def cache_path(profile: Path, directory: str | os.PathLike | None = None) -> Path | None:
    """The cache file of `profile`, or None when there is no usable cache directory (it is created if need be)."""
    d = cache_dir(directory)
    return None if d is None else d / _cache_name(profile)


def cache_location(profile: Path, directory: str | os.PathLike | None = None) -> Path:
    """Where the cache of `profile` is or would be, without creating or checking anything."""
    return (chosen_cache_dir(directory) or user_cache_dir()) / _cache_name(profile)


_SECRET_BYTES = 32
KEY_PREFIX = ".nsys-diagnose-key-"


def key_path(directory: Path) -> Path:
    """This user's key for the caches of `directory`, kept in it: one per user, so that users sharing a directory
    (with the sticky bit) do not share or overwrite one key. The name is predictable: another user who plants a file
    under it is never trusted (_read_secret checks owner and mode), but costs this user the cache in that directory
    (the run goes on without one)."""
    return Path(directory) / f"{KEY_PREFIX}{os.geteuid()}"


def cache_file_kind(name: str) -> str | None:
    """What a file of this name in a cache directory is to caching (for a message), None when it is none of its
    files: a report written over one would replace the key that seals every cache there, or a cache."""
    if name.startswith(KEY_PREFIX):
        return "the key that seals the caches"
    if name.startswith(BUILD_PREFIX):
        return "a cache being built"
    for suffix, what in ((CACHE_SUFFIX, "a cache"), (CACHE_SUFFIX + ".wal", "a cache's write-ahead log"),
                         (CACHE_SUFFIX + FACTS_SUFFIX, "the facts kept beside a cache")):
        if name.endswith(suffix):
            return what
    return None


@functools.lru_cache(maxsize=16)
def cache_secret(directory: Path) -> bytes | None:
    """This user's random key for the caches in `directory` (a usable cache directory, see cache_dir), kept there,
    0600: every cache carries an HMAC of its fingerprint under it, so a cache made by anyone else (planted, shipped
    with a profile) never matches even though the fingerprint itself can be computed from the profile alone. None
    when it cannot be kept safely."""
    path = key_path(directory)
    found = _read_secret(path)
    if found is not None and len(found) == _SECRET_BYTES:
        return found
    # No key yet, or a private one of the wrong size that never sealed anything (an empty file left by a run
    # killed between creating and writing it, in versions that wrote the key in place): a complete key is written
    # aside and linked into place, so no run ever reads half a key, and of two first runs racing, both use the
    # key linked first. A regular file of this user's that others may read or write (chmod, or a report written
    # over it) is no secret any more: it is replaced by a fresh private key in the same way (its caches are then
    # rebuilt), rather than turning caching off for good. A file of another user's, or anything but a regular
    # file, is left alone: key_problem says so.
    if found is None and own_unsafe_file(path):
        found = b""
    try:
        build = new_build_dir(path)
    except OSError:
        return None
    try:
        fresh = build / "secret"
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(_SECRET_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
        if found is None:
            try:
                os.link(fresh, path)
            except FileExistsError:
                pass  # another run linked its key first: that one is read below
        else:
            os.replace(fresh, path)
    except OSError:
        return None
    finally:
        shutil.rmtree(build, ignore_errors=True)
    found = _read_secret(path)
    return found if found is not None and len(found) == _SECRET_BYTES else None


def _read_secret(path: Path) -> bytes | None:
    """The bytes of the key file when it is this user's private regular file, else None (also when missing)."""
    return read_own_file(path, _SECRET_BYTES + 1, private=True)


def own_unsafe_file(path: Path) -> bool:
    """`path` is a regular file (not a link) of this user's that others may write, or, for the key, read: never
    trusted, but this user's to replace, in a directory where nobody else can swap it (usable_cache_dir)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and bool(st.st_mode & 0o077)


def _not_trusted_because(path: Path) -> str:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "could not be created"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return "belongs to another user"
    return "may be written by others"


def key_problem(directory: Path) -> str:
    """Why cache_secret found no key for `directory`, and what to do: one clause for the warning (CacheWarning)."""
    path = key_path(directory)
    return (f"the key that seals the caches in {directory}, {path}, {_not_trusted_because(path)}, so it is never "
            f"trusted; remove it (a new private key is then made), or choose another cache directory")


def cache_file_problem(path: Path) -> str:
    """Why the file at a cache's path is neither reused nor replaced, and what to do (one clause, CacheWarning)."""
    return (f"the cache file {path} {_not_trusted_because(path)}, so it is never trusted; remove it, or choose "
            f"another cache directory")


def read_own_file(path: Path, limit: int, *, private: bool = False) -> bytes | None:
    """Up to `limit` bytes of `path` when it is a regular file of this user that nobody else may write (with
    `private`: nor read), else None (also when missing or unreadable). Checked on the descriptor that is read, so
    the file cannot be swapped between the check and the read; never following a link, and never waiting on a
    FIFO planted under the name."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not trusted_stat(st) or (private and st.st_mode & 0o077):
                return None
            return f.read(limit)
    except OSError:
        return None


def seal(fingerprint: str, directory: Path) -> str | None:
    """The HMAC of a cache fingerprint under this user's key for the caches in `directory` (None without a key:
    then nothing is cached)."""
    key = cache_secret(Path(directory))
    return None if key is None else hmac.new(key, fingerprint.encode(), hashlib.sha256).hexdigest()


def sealed(fingerprint: str, seal_text: str | None, directory: Path) -> bool:
    expected = seal(fingerprint, directory)
    return expected is not None and seal_text is not None and hmac.compare_digest(expected, seal_text)


def trusted_cache_file(path: Path) -> bool:
    """A regular file (not a link) owned by this user that nobody else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return trusted_stat(st)


def trusted_stat(st: os.stat_result) -> bool:
    """The file `st` describes is a regular file owned by this user that nobody else may write."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def new_build_dir(final: Path) -> Path:
    """A private (0700) directory beside `final`, on the same file system so the finished cache is renamed
    into place atomically, and unreadable by others while it is being written."""
    return Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{os.getpid()}-", dir=final.parent))


def cache_mode(profile_mode: int) -> int:
    """The cache is as readable as the profile, never more, and never writable by others."""
    return (profile_mode & 0o644) | 0o600


def publish(built: Path, final: Path, mode: int) -> None:
    """Give the finished cache its mode and rename it into place (a stale cache of ours is replaced)."""
    os.chmod(built, mode)
    os.replace(built, final)
