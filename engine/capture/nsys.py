"""The installed nsys: where it is (--nsys, NSYS_DIAGNOSE_NSYS, PATH), its version, the switches `nsys profile`
accepts and whether it can export SQLite, read once from `nsys --version`, `nsys profile --help` and `nsys export
--help` and cached per binary (its resolved path, size and modification time) in the user's private cache
directory (engine/reading/cache.py: 0700, and a file is read only when this user owns it and nobody else may
write it)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..base.errors import DiagnoseError
from ..reading.cache import cache_dir_private, read_own_file

NSYS_ENV = "NSYS_DIAGNOSE_NSYS"
PROBE_TIMEOUT_S = 60
CACHE_PREFIX = "nsys-capabilities-"
_FORMAT = 1  # bump when what is cached changes
INSTALL_HINT = ("install Nsight Systems (https://developer.nvidia.com/nsight-systems; on Debian or Ubuntu the "
                "nsight-systems package of contrib non-free, or NVIDIA's CUDA repository) or point to it with "
                f"--nsys PATH or {NSYS_ENV}")
_VERSION = re.compile(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")
# A switch in `nsys profile --help`: "\t-t, --trace=" or "\t--cuda-graph-trace=" at the start of a line.
_SWITCH = re.compile(r"^\s*(?:-[A-Za-z], )?(--[a-z][a-z0-9-]*)(?:[=\s]|$)", re.MULTILINE)


class NsysError(DiagnoseError):
    """nsys is missing, too old or cannot run: one sentence, exit 2."""


@dataclass
class Nsys:
    path: str                       # the binary as found (not resolved: the importer is looked up beside it)
    version: str                    # e.g. 2022.4.2.1
    switches: dict[str, str] = field(default_factory=dict)  # --switch -> its paragraph of `nsys profile --help`
    export_sqlite: bool = False     # `nsys export --type sqlite` exists
    export_switches: list[str] = field(default_factory=list)

    @property
    def version_tuple(self) -> tuple[int, ...]:
        m = _VERSION.search(self.version)
        return tuple(int(g) for g in m.groups() if g is not None) if m else ()

    def accepts(self, switch: str) -> bool:
        return switch in self.switches

    def accepts_value(self, switch: str, value: str) -> bool:
        """Whether the help paragraph of `switch` names `value` (quoted or as a bare word): nsys lists the values
        a switch takes there, and a value missing from the list is one this version does not know."""
        text = self.switches.get(switch, "")
        return re.search(r"(?<![\w-])'?" + re.escape(value) + r"'?(?![\w-])", text) is not None


def find_nsys(explicit: str | os.PathLike | None = None) -> str:
    """The nsys to use: --nsys PATH, else NSYS_DIAGNOSE_NSYS, else `nsys` on PATH; one sentence when none."""
    chosen = str(explicit) if explicit not in (None, "") else os.environ.get(NSYS_ENV) or None
    if chosen is not None:
        where = "--nsys" if explicit not in (None, "") else NSYS_ENV
        found = shutil.which(chosen) if os.sep not in chosen else (chosen if os.path.isfile(chosen) else None)
        if found is None:
            raise NsysError(f"{chosen} (from {where}) is not an nsys executable: no such file; {INSTALL_HINT}.")
        if not os.access(found, os.X_OK):
            raise NsysError(f"{found} (from {where}) is not executable; make it executable or {INSTALL_HINT}.")
        return found
    found = shutil.which("nsys")
    if found is None:
        raise NsysError(f"nsys was not found on PATH, so nothing can be captured; {INSTALL_HINT}.")
    return found


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NsysError(f"`{' '.join(argv)}` did not answer within {PROBE_TIMEOUT_S} s, so this nsys is unusable "
                        f"here; {INSTALL_HINT}.") from None
    except OSError as exc:
        raise NsysError(f"{argv[0]} cannot be run ({exc.strerror or exc}); {INSTALL_HINT}.") from None


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").split())[:300]


def parse_switches(help_text: str) -> dict[str, str]:
    """--switch -> the paragraph that documents it in `nsys profile --help` (up to the next switch)."""
    marks = [(m.group(1), m.start()) for m in _SWITCH.finditer(help_text)]
    out: dict[str, str] = {}
    for i, (name, start) in enumerate(marks):
        end = marks[i + 1][1] if i + 1 < len(marks) else len(help_text)
        out.setdefault(name, help_text[start:end])
    return out


def probe(path: str) -> Nsys:
    """Ask the nsys at `path` what it is and accepts (three short runs)."""
    done = _run([path, "--version"])
    m = _VERSION.search(done.stdout + done.stderr)
    if done.returncode != 0 or m is None:
        raise NsysError(f"{path} --version failed ({_said(done)}), so this nsys is unusable here; "
                        f"{INSTALL_HINT}.")
    version = m.group(0)
    profile_help = _run([path, "profile", "--help"])
    switches = parse_switches(profile_help.stdout + "\n" + profile_help.stderr)
    if "--trace" not in switches or "--output" not in switches:
        raise NsysError(f"{path} profile --help lists no --trace or --output switch ({_said(profile_help)}), so "
                        f"this nsys {version} cannot capture here; {INSTALL_HINT}.")
    export_help = _run([path, "export", "--help"])
    export_text = export_help.stdout + "\n" + export_help.stderr
    export_switches = sorted(parse_switches(export_text))
    return Nsys(path=path, version=version, switches=switches,
                export_sqlite=export_help.returncode == 0 and "sqlite" in export_text and "--type" in export_switches,
                export_switches=export_switches)


def _key(path: str) -> dict[str, object] | None:
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return {"format": _FORMAT, "path": os.path.abspath(path), "real": real, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns}


def _cache_file(directory: Path, path: str) -> Path:
    digest = hashlib.sha256(os.fsencode(os.path.abspath(path))).hexdigest()[:16]
    return directory / f"{CACHE_PREFIX}{digest}.json"


def installed_nsys(explicit: str | os.PathLike | None = None, *, cache: bool = True) -> tuple[Nsys, bool]:
    """The nsys to capture with and what it accepts, and whether that came from the cache. The cache is
    trusted only when it is this user's own file, in the private cache directory, and was written for this very
    binary (path, size, modification time); anything else is probed afresh."""
    path = find_nsys(explicit)
    key = _key(path)
    directory = cache_dir_private() if cache and key is not None else None
    if directory is not None and key is not None:
        raw = read_own_file(_cache_file(directory, path), 4 << 20)
        try:
            data = json.loads(raw) if raw else None
            if isinstance(data, dict) and data.get("key") == key:
                return Nsys(**data["nsys"]), True
        except (ValueError, TypeError, KeyError):
            pass
    found = probe(path)
    if directory is not None and key is not None:
        _write_private(_cache_file(directory, path), json.dumps({"key": key, "nsys": asdict(found)}))
    return found, False


def _write_private(target: Path, text: str) -> None:
    """Write `text` to `target` (0600) through a new file renamed into place; a failure only costs the cache."""
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".nsys-capabilities-", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def find_importer(nsys_path: str) -> str | None:
    """QdstrmImporter shipped with this nsys: in its host-linux-x64 directory, looked up beside every step of the
    chain of links that leads to the binary (Debian links /usr/bin/nsys to /usr/lib/nsight-systems/bin/nsys, whose
    importer is in /usr/lib/nsight-systems/host-linux-x64)."""
    seen: list[Path] = []
    current = Path(os.path.abspath(nsys_path))
    for _ in range(16):
        seen.append(current)
        if not current.is_symlink():
            break
        current = Path(os.path.normpath(current.parent / os.readlink(current)))
    seen.append(Path(os.path.realpath(nsys_path)))
    for step in seen:
        for candidate in (step.parent / "QdstrmImporter", step.parent.parent / "host-linux-x64" / "QdstrmImporter",
                          step.parent / "host-linux-x64" / "QdstrmImporter"):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None
