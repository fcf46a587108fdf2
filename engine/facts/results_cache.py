"""The computed facts of a cached export, kept beside its cache so a later run with the same facts skips them.

Rules read only the facts' rows, never the export, so a second run that asks the same questions of the same
canonical tables (same fact SQL, parameters and phase patterns, whatever the rules, thresholds, severities or
output format) reuses the rows instead of computing them again: tuning a rule with `--set`, a team rule pack or
`diagnose.yaml`, or rendering another format, costs the start-up and the rules only.

The rows are kept as JSON data (never code) in `<cache file>.facts.json`, one entry per cache file, written
atomically with the cache file's permissions. An entry is used only when it is this user's own regular file that
nobody else may write, its key equals the run's, and its seal (an HMAC under the user's cache key, like the
cache's own, engine/reading/cache.py) matches: a planted or edited file is ignored and the facts are computed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import importlib.resources
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from ..pack.layout import bundled, FACTS_DIR
from ..reading import cache as store
from ..reading.export import Export
from .catalog import Fact, render_sql, with_needs
from ..base.timings import Timings
from ..pack.opclasses import OperationClasses, default_classes
from ..pack.stacks import Stacks, bundled_stacks
from ..pack.apinames import ApiNames, bundled_api_names
from .compute import (
    METRIC_NAMES_FILE,
    FactResult,
    FactSet,
    compute_facts,
)
from .nvtx_patterns import default_phase_patterns, default_startup_patterns, default_step_patterns

SUFFIX = store.FACTS_SUFFIX
MAX_BYTES = 256 << 20  # a bigger file is not ours (the facts of 5 M kernels take well under a megabyte)
# The code that turns fact SQL into rows: a change to any of it gives every entry a new key.
_COMPUTING_CODE = ("catalog.py", "materialize.py", "compute.py", "nvtx_patterns.py", "scopes.py", "results_cache.py")
# ... and the pack code that turns the operation classes and the software stacks into SQL.
_VOCABULARY_CODE = ("opclasses.py", "stacks.py", "apinames.py")


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    package = importlib.resources.files(__package__)
    digest = hashlib.sha256()
    for name in _COMPUTING_CODE:
        digest.update(b"\0" + name.encode() + b"\0" + package.joinpath(name).read_bytes())
    pack = importlib.resources.files("nsys_diagnose.pack")
    for name in _VOCABULARY_CODE:
        digest.update(b"\0" + name.encode() + b"\0" + pack.joinpath(name).read_bytes())
    digest.update(b"\0" + METRIC_NAMES_FILE.encode() + b"\0" + bundled(FACTS_DIR, METRIC_NAMES_FILE).read_bytes())
    return digest.hexdigest()


def results_key(canonical_key: str, facts: dict[str, Fact], params: dict[str, float] | None,
                phase_patterns: dict[str, str] | None, startup_patterns: dict[str, str] | None = None,
                step_patterns: dict[str, str] | None = None, op_classes: OperationClasses | None = None,
                stacks: Stacks | None = None, api_names: ApiNames | None = None) -> str:
    """What the rows depend on: the canonical tables (their cache key: the profile's content, the tool and the
    table format), every fact's SQL as it runs (parameters filled in) and header, the phase patterns, the
    operation classes, the software stacks (their detection and NVTX patterns) and the CUDA API families."""
    stacks = stacks or bundled_stacks()
    described = {name: {"sql": render_sql(f, params), "team": f.team, "needs": f.needs, "requires": f.requires,
                        "columns": f.column_names, "materialized": f.materialized, "per_phase": f.per_phase}
                 for name, f in sorted(facts.items())}
    text = json.dumps({"code": _code_digest(), "canonical": canonical_key, "facts": described,
                       "phases": phase_patterns if phase_patterns is not None else default_phase_patterns(stacks),
                       "startup": startup_patterns if startup_patterns is not None
                       else default_startup_patterns(stacks),
                       "steps": step_patterns if step_patterns is not None else default_step_patterns(stacks),
                       "op_classes": (op_classes or default_classes()).key(),
                       "stacks": stacks.key(),
                       "api_names": (api_names or bundled_api_names()).key()},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def entry_path(cache_file: Path) -> Path:
    return cache_file.with_name(cache_file.name + SUFFIX)


def _seal(key: str, payload: str, directory: Path) -> str | None:
    return store.seal(key + "\0" + hashlib.sha256(payload.encode()).hexdigest(), directory)


def _payload(facts: FactSet) -> dict[str, Any]:
    def results(fs: FactSet) -> dict[str, Any]:
        return {name: {"columns": r.columns, "rows": r.rows, "skipped": r.skipped} for name, r in fs.results.items()}

    return {"results": results(facts), "phases": {phase: results(fs) for phase, fs in facts.phases.items()}}


def _factset(payload: dict[str, Any], facts: dict[str, Fact]) -> FactSet:
    def results(data: dict[str, Any]) -> dict[str, FactResult]:
        return {name: FactResult(facts[name], list(r["columns"]), list(r["rows"]), r["skipped"])
                for name, r in data.items()}

    return FactSet(results(payload["results"]),
                   {phase: FactSet(results(data)) for phase, data in payload["phases"].items()})


def load(path: Path, key: str, facts: dict[str, Fact]) -> FactSet | None:
    """The facts kept at `path` for `key`, or None when there are none that this user can trust."""
    data = store.read_own_file(path, MAX_BYTES + 1)
    if data is None:
        return None
    try:
        if len(data) > MAX_BYTES:
            return None
        entry = json.loads(data)
        payload = entry["payload"]
        expected = _seal(key, payload, path.parent)
        if entry["key"] != key or expected is None or not hmac.compare_digest(expected, str(entry["seal"])):
            return None
        return _factset(json.loads(payload), facts)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # unreadable, damaged or of another shape: computed afresh and rewritten


def save(path: Path, key: str, facts: FactSet, mode: int) -> None:
    """Keep `facts` at `path` (atomically; nothing is kept when the disk or directory refuses)."""
    payload = json.dumps(_payload(facts), separators=(",", ":"))
    seal = _seal(key, payload, path.parent)
    if seal is None:
        return
    text = json.dumps({"key": key, "seal": seal, "payload": payload})
    # Written in a build directory of this process, as the cache is: a run killed outright (SIGKILL, OOM) leaves
    # the half-written file where the next run's sweep removes it (engine/reading/cache.py sweep_leftovers).
    try:
        build = store.new_build_dir(path)
    except OSError:
        return
    try:
        temp = build / path.name
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
        os.replace(temp, path)
    except OSError:
        pass  # a full disk or a refused rename only means nothing is kept
    finally:
        shutil.rmtree(build, ignore_errors=True)


def facts_of(export: Export, *, facts: dict[str, Fact], params: dict[str, float] | None = None,
             phase_patterns: dict[str, str] | None = None,
             progress: Callable[[str], None] | None = None,
             startup_patterns: dict[str, str] | None = None,
             step_patterns: dict[str, str] | None = None,
             op_classes: OperationClasses | None = None, timings: Timings | None = None,
             stacks: Stacks | None = None, api_names: ApiNames | None = None,
             catalog: dict[str, Fact] | None = None) -> FactSet:
    """compute_facts, or the rows an earlier run computed from the same cached tables with the same facts
    (`timings` then records that stage alone). `catalog`: every fact of the pack, when `facts` is the part of it a
    report reads (engine/runs/selection.py): the entry is keyed on the catalog and reused when it holds every fact
    of `facts`, so reports of other formats share it; when it lacks some, those held are computed again with them."""
    if export.cache_file is None or not export.cache_key:
        return compute_facts(export, params=params, phase_patterns=phase_patterns, facts=facts, progress=progress,
                             startup_patterns=startup_patterns, step_patterns=step_patterns,
                             op_classes=op_classes, timings=timings, stacks=stacks, api_names=api_names)
    path = entry_path(export.cache_file)
    catalog = catalog or facts
    key = results_key(export.cache_key, catalog, params, phase_patterns, startup_patterns, step_patterns, op_classes,
                      stacks, api_names)
    with timings.stage("reuse the cached facts") if timings else contextlib.nullcontext():
        kept = load(path, key, catalog) if export.cache_hit else None
    if kept is not None and not {n for n, f in facts.items() if not f.is_helper} <= kept.results.keys():
        held = with_needs(catalog, [*facts, *kept.results])
        facts, kept = {n: f for n, f in catalog.items() if n in held}, None
    if kept is not None:
        kept.stacks = stacks
        for scoped in kept.phases.values():
            scoped.stacks = stacks
        if progress:
            progress(f"reusing the facts computed from {export.cache_file.name}")
        return kept
    computed = compute_facts(export, params=params, phase_patterns=phase_patterns, facts=facts, progress=progress,
                             startup_patterns=startup_patterns, step_patterns=step_patterns,
                             op_classes=op_classes, timings=timings, stacks=stacks, api_names=api_names)
    save(path, key, computed, stat_mode(export.cache_file))
    return computed


def stat_mode(path: Path) -> int:
    """The permissions of the cache file, which follow the profile's (a 0600 profile gets 0600 facts)."""
    try:
        return os.stat(path).st_mode & 0o666
    except OSError:
        return 0o600
