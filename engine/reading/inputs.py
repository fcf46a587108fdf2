"""Input checks and conversion: whether a path is an Nsight Systems export that can be read, and the one
sentence that tells the user what to do when it is not.

- `check_profile_path`: a missing, special, unreadable or non-SQLite file is refused before anything opens it;
- `convert_report`: an .nsys-rep (or older .qdrep) report is converted by the `nsys export` on PATH;
- `live_reason`: an export SQLite may still be writing (a WAL or hot journal beside it, or WAL mode);
- `source_columns` / `check_nsys_export`: the tables of the file, and whether they are an nsys export;
- `unreadable` / `describe_sqlite_failure`: what to say when reading the file fails half-way.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

from .cache import CACHE_DIR_ENV
from .workspace import out_of_memory_error
from .kineto_file import sniff
from ..base.duck import is_out_of_memory
from ..base.errors import DiagnoseError, InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

# Tables whose presence marks a file as an nsys export (the empty-capture export has only the first).
NSYS_MARKERS = (
    "StringIds",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "TARGET_INFO_GPU",
    "TARGET_INFO_SESSION_START_TIME",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
)

# Columns a canonical table cannot do without: a table that lacks one is refused, naming it, since a NULL in its
# place would not fail but answer wrongly (kernels without deviceId belong to no GPU: "0 kernels, GPU idle").
# Every nsys version from 2021 (nvhpc 21.2) to 2026.2 writes all of them (nsys-schema.md; checked on every export
# of the real-export corpus); the columns nsys added or renamed over the years (graphId, greenContextId, mangledName,
# srcKind ...) are not listed and degrade to NULL through adapter_base.Source.col.
_GPU_ACTIVITY = ("start", "end", "deviceId", "streamId", "globalPid", "correlationId")
REQUIRED_COLUMNS = {
    "StringIds": ("id", "value"),
    "EXPORT_META_DATA": ("name", "value"),
    "META_DATA_EXPORT": ("name", "value"),
    "META_DATA_CAPTURE": ("name", "value"),
    "CUPTI_ACTIVITY_KIND_KERNEL": (*_GPU_ACTIVITY, "shortName"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId", "nameId"),
    "CUPTI_ACTIVITY_KIND_DRIVER": ("start", "end", "globalTid", "correlationId", "nameId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (*_GPU_ACTIVITY, "bytes", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": (*_GPU_ACTIVITY, "bytes"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (*_GPU_ACTIVITY, "syncType"),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": _GPU_ACTIVITY,
    "NVTX_EVENTS": ("start", "end", "eventType", "globalTid"),
    "TARGET_INFO_GPU_METRICS": ("typeId", "metricId", "metricName"),
    "PROCESSES": ("pid", "name"),
}


class DiskFullError(InputError):
    """The cache or the scratch directory ran out of disk space."""


def is_report(p: Path) -> bool:
    return p.suffix in REPORT_SUFFIXES


def check_profile_path(path: str | os.PathLike) -> Path:
    """Fail with one clear sentence unless `path` is a readable SQLite file, a report nsys can convert, or JSON that
    may be a PyTorch-profiler trace (which the reader then checks)."""
    if os.fspath(path) == "":  # Path("") would mean the working directory
        raise InputError("the profile path is empty; give the path of an nsys SQLite export, e.g. run.sqlite.")
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file; give the path of an nsys SQLite export "
                         f"(`nsys export --type sqlite report.nsys-rep`) or of a PyTorch-profiler trace "
                         f"(.pt.trace.json.gz).")
    if p.is_dir():
        raise InputError(f"{p} is a directory; give the path of one .sqlite export.")
    if not p.is_file():  # checked before any open: opening a FIFO blocks, reading a device never ends
        kind = ("a FIFO (named pipe)" if p.is_fifo() else "a socket" if p.is_socket()
                else "a character device" if p.is_char_device() else "a block device" if p.is_block_device()
                else "a special file")
        raise InputError(f"{p} is not a regular file but {kind}; give the path of an nsys SQLite export file "
                         f"(`nsys export --type sqlite --output run.sqlite report.nsys-rep`).")
    if is_report(p) and not shutil.which("nsys"):
        raise InputError(
            f"{p} is an Nsight Systems report, not a SQLite export; convert it first with "
            f"`nsys export --type sqlite --output {p.with_suffix('.sqlite')} {p}`."
        )
    if is_report(p):
        return p  # converted by open_export with the nsys on PATH
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except PermissionError:
        raise InputError(f"{p}: permission denied; make the file readable (chmod +r) or run as its owner.") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot be read ({exc.strerror}).") from None
    if not head:
        raise InputError(f"{p} is empty; give an nsys SQLite export or a PyTorch-profiler trace (the file may have "
                         f"been written by a run that was stopped before it finished).")
    if head != SQLITE_MAGIC:
        trace_kind = sniff(p)
        if trace_kind == "trace":
            return p  # a Chrome trace in object form: read as a PyTorch-profiler trace, which it must prove to be
        if trace_kind == "json-array":
            raise InputError(f"{p} is a Chrome trace in array form, which the PyTorch profiler never writes; give "
                             f"the .pt.trace.json(.gz) file torch.profiler, vLLM or SGLang wrote, or an nsys export.")
        raise InputError(f"{p} is neither an nsys SQLite export nor a PyTorch-profiler trace; export the profile "
                         f"with `nsys export --type sqlite`, or give the .pt.trace.json(.gz) file the PyTorch "
                         f"profiler wrote.")
    return p


def is_trace(p: Path) -> bool:
    """Whether `p` is read as a PyTorch-profiler trace: no SQLite database and no nsys report, but JSON (plain or
    gzipped) in object form (kineto_file.sniff)."""
    if is_report(p):
        return False
    try:
        with open(p, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                return False
    except OSError:
        return False
    return sniff(p) == "trace"


def export_command(report: Path, output: Path) -> list[str]:
    # Absolute paths: a report named "-x.nsys-rep" must never reach nsys as an option.
    return ["nsys", "export", "--type", "sqlite", "--output", str(output.absolute()), "--force-overwrite", "true",
            str(report.absolute())]


def convert_report(report: Path, output: Path) -> Path:
    """Convert an .nsys-rep with the `nsys` on PATH; one clear sentence (with nsys's own words) on failure."""
    command = export_command(report, output)
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    except OSError as exc:
        raise InputError(f"{report}: cannot run `nsys` to convert it ({exc.strerror or exc}); convert it yourself "
                         f"with `nsys export --type sqlite --output {report.with_suffix('.sqlite')} {report}`."
                         ) from None
    if done.returncode != 0 or not output.is_file():
        said = " ".join((done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").split())
        raise InputError(f"{report}: `nsys export --type sqlite` could not convert it (nsys said: {said[:500]}); "
                         f"check that the report is complete and that this nsys is at least as new as the one "
                         f"that recorded it.")
    return output


def live_reason(path: Path, fd: int) -> str | None:
    """Why the SQLite file open at `fd` (found at `path`, where its side files sit) may still change under SQLite:
    a non-empty `-wal` or `-journal` beside it, or WAL mode in its header (bytes 18-19 = 2, per the SQLite file
    format, https://www.sqlite.org/fileformat.html). None when it cannot, or when it is no database at all."""
    header = os.pread(fd, 100, 0)
    if not header.startswith(SQLITE_MAGIC):  # an .nsys-rep, or no database at all
        return None
    for suffix, what in (("-wal", "a write-ahead log"), ("-journal", "a rollback journal")):
        side = Path(str(path) + suffix)
        try:
            if side.stat().st_size > 0:
                return f"{what} ({side.name})"
        except OSError:
            continue
    if len(header) >= 20 and header[18] == 2 and header[19] == 2:
        return "write-ahead-log mode"
    return None


def sqlite_uri(scan: str | os.PathLike[str]) -> str:
    """The read-only `file:` URI of `scan` (https://www.sqlite.org/uri.html). A URI names an absolute path, so a
    relative one is made absolute first; the name's bytes are percent-encoded, so one that is not valid UTF-8
    (held in a str by surrogate escapes, https://peps.python.org/pep-0383/) reaches SQLite unchanged."""
    return Path(os.path.abspath(scan)).as_uri() + "?mode=ro"


def source_columns(scan: str) -> dict[str, list[str]]:
    """Table -> columns, read with SQLite itself (DuckDB's catalog of an attached file is much slower). A table
    whose name is not valid UTF-8 is no table nsys writes, and is left out."""
    lite = sqlite3.connect(sqlite_uri(scan), uri=True)
    try:
        lite.text_factory = bytes
        rows = lite.execute("SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p "
                            "WHERE m.type = 'table' ORDER BY m.name, p.cid").fetchall()
    finally:
        lite.close()
    tables: dict[str, list[str]] = {}
    for table, column in rows:
        try:
            tables.setdefault(table.decode("utf-8"), []).append(column.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    return tables


def check_nsys_export(p: Path, tables: dict[str, list[str]]) -> None:
    """Refuse a SQLite file that is no nsys export, or whose tables lack a column read without a fallback."""
    if not any(t in tables for t in NSYS_MARKERS):
        raise InputError(
            f"{p} is a SQLite database but not an Nsight Systems export (it has none of the tables "
            f"nsys writes, such as StringIds or CUPTI_ACTIVITY_KIND_KERNEL); export the profile with "
            f"`nsys export --type sqlite`."
        )
    for table, needed in REQUIRED_COLUMNS.items():
        missing = [c for c in needed if table in tables and c not in tables[table]]
        if missing:
            names = ", ".join(f"`{c}`" for c in missing)
            raise InputError(
                f"{p}: the {table} table has no {names} column{'s' if len(missing) > 1 else ''}, which the "
                f"diagnosis needs and every nsys version writes; the export looks damaged or hand-edited, so "
                f"export the profile again with `nsys export --type sqlite`.")


def unreadable(p: Path, exc: Exception, table: str | None = None, *, trace: bool = False) -> DiagnoseError:
    """The sentence for an export that failed while it was read: a full disk, DuckDB's memory limit, a lock, or
    values no nsys export holds. `trace`: `p` is a PyTorch-profiler trace, not an export."""
    text = str(exc).lower()
    if "no space left" in text or "could not write" in text or "disk full" in text:
        return DiskFullError(f"{p}: the disk ran out of space while its tables were being written (the cache "
                             f"directory, or the temporary directory {tempfile.gettempdir()}); free some space, or "
                             f"point TMPDIR or {CACHE_DIR_ENV} at a larger disk.")
    if is_out_of_memory(exc):
        return out_of_memory_error(f"reading {p}")
    detail = " ".join(str(exc).split("\n")[0].split())
    if trace:
        return InputError(f"{p} holds values no PyTorch-profiler trace has ({detail[:300]}); the file was altered or "
                          f"damaged, so export the trace again.")
    if any(word in text for word in ("locked", "busy", "permission", "unable to open")):
        return InputError(describe_sqlite_failure(p, exc))
    where = f"the {table} table of {p}" if table else str(p)
    return InputError(f"{where} holds values no nsys export has ({detail}); the file was altered or damaged, so "
                      f"export the profile again with `nsys export --type sqlite`.")


def describe_sqlite_failure(p: Path, exc: Exception, live: str | None = None) -> str:
    msg = str(exc).lower()
    if "locked" in msg or "busy" in msg:
        return f"{p} is locked by another program; wait for it to finish (or copy the file) and try again."
    if live and "journal" in live:
        return (f"{p} has {live} left by a program that stopped while writing it, and SQLite must roll it back "
                f"before the export can be read ({str(exc).splitlines()[0]}); open it once with "
                f"`sqlite3 {p} 'PRAGMA quick_check'` (which rolls the journal back), or export the profile again.")
    if live:
        return (f"{p} has {live} that SQLite cannot read without writing beside the export "
                f"({str(exc).splitlines()[0]}); wait until the program writing it has finished, or fold the log "
                f"into the file and leave WAL mode with "
                f"`sqlite3 {p} 'PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE'`.")
    if "permission" in msg or "readonly" in msg or "unable to open" in msg:
        return f"{p} cannot be opened for reading; check its permissions."
    return (f"{p} is damaged or truncated ({str(exc).splitlines()[0]}); export the profile again with "
            f"`nsys export --type sqlite`.")
