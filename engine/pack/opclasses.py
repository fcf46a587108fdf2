"""Operation classes are data: rules/vocabulary/operation_classes.yaml, plus an operation_classes.yaml in a team's rule
directory. Each class lists RE2 patterns over the demangled kernel name; the first class that matches wins. The
classes and the GEMM precisions become two DuckDB macros, op_class_of(name) and gemm_precision_of(name), with
every pattern written in as a constant so DuckDB compiles each regular expression once (as compute.py does for
the phase patterns)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import duckdb
import yaml

from .layout import bundled, vocabulary_file, VOCABULARY_DIR
from .yamlfile import safe_load
from ..base.duck import sql_literal
from ..base.errors import PackError
from ..base.regexes import compiled_together, regex_problem, scratch_cursor

CLASSES_FILE = "operation_classes.yaml"
# Classes that never come from a pattern: copies and memsets have tables of their own, `other` is what is left.
BUILT_IN = ("memcpy", "memset", "other")
OTHER = "other"
UNKNOWN_PRECISION = "unknown"
_NAME = re.compile(r"^[a-z0-9]+([-/][a-z0-9]+)*$")
_CLASS_KEYS = {"name", "doc", "glue", "patterns"}
_PRECISION_KEYS = {"name", "tensor_cores", "patterns"}


class OpClassError(PackError):
    """An operation_classes.yaml is broken; the message starts with the file and says what to change."""


@dataclass(frozen=True)
class OpClass:
    name: str
    doc: str
    patterns: tuple[str, ...]
    glue: bool = False
    """Elementwise glue a fused kernel or a compiler would merge (fusion_candidates adds these classes up)."""
    source: str = "bundled"

    @property
    def regex(self) -> str:
        return "(?i)" + "|".join(f"({p})" for p in self.patterns)


@dataclass(frozen=True)
class Precision:
    name: str
    tensor_cores: bool
    patterns: tuple[str, ...]

    @property
    def regex(self) -> str:
        return "(?i)" + "|".join(f"({p})" for p in self.patterns)


@dataclass(frozen=True)
class OperationClasses:
    classes: tuple[OpClass, ...]
    precisions: tuple[Precision, ...]

    def names(self) -> list[str]:
        """Every class in display order: the pattern classes, then memcpy, memset and other."""
        return [c.name for c in self.classes] + list(BUILT_IN)

    def key(self) -> dict[str, Any]:
        """What the fact rows depend on (engine/facts/results_cache.py)."""
        return {"classes": [[c.name, c.glue, list(c.patterns)] for c in self.classes],
                "precisions": [[p.name, p.tensor_cores, list(p.patterns)] for p in self.precisions]}


def _bundled_file() -> Path:
    return bundled(VOCABULARY_DIR, CLASSES_FILE)


def _written_patterns(data: dict[str, Any]) -> list[str]:
    """Every text written as a pattern, with the (?i) the classes are matched with, for compiled_together."""
    out = []
    for key in ("classes", "gemm_precisions"):
        entries = data.get(key)
        for entry in entries if isinstance(entries, list) else []:
            patterns = entry.get("patterns") if isinstance(entry, dict) else None
            patterns = [patterns] if isinstance(patterns, str) else patterns if isinstance(patterns, list) else []
            out += ["(?i)" + p for p in patterns if isinstance(p, str)]
    return out


def _patterns(entry: dict[str, Any], where: str, con: duckdb.DuckDBPyConnection,
              compiled: frozenset[str] = frozenset()) -> tuple[str, ...]:
    patterns = entry.get("patterns")
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list) or not patterns:
        raise OpClassError(f"{where}: patterns must be a list of regular expressions in quotes, e.g. "
                           f'patterns: ["rms_?norm"]')
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            raise OpClassError(f"{where}: the pattern {pattern!r} is not a regular expression in quotes")
        problem = None if "(?i)" + pattern in compiled else regex_problem(con, "(?i)" + pattern)
        if problem:
            raise OpClassError(f"{where}: {pattern!r} is not a regular expression DuckDB accepts ({problem}); "
                               f"patterns are RE2 syntax (no look-behind or back-references)")
    return tuple(patterns)


def _entries(data: Any, key: str, path: Path, allowed: set[str]) -> list[tuple[str, dict[str, Any]]]:
    items = data.get(key) or []
    if not isinstance(items, list):
        raise OpClassError(f"{path}: {key} must be a list of {{{', '.join(sorted(allowed))}}} entries")
    out = []
    for i, entry in enumerate(items, 1):
        if not isinstance(entry, dict):
            raise OpClassError(f"{path}: {key} entry {i} must be a mapping with {', '.join(sorted(allowed))}")
        name = entry.get("name")
        where = f"{path}: {key} entry {i}" + (f" ({name})" if isinstance(name, str) else "")
        unknown = sorted(str(k) for k in set(entry) - allowed)
        if unknown:
            raise OpClassError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(sorted(allowed))}")
        if not isinstance(name, str) or not _NAME.match(name):
            raise OpClassError(f"{where}: name must be a lower-case name such as 'norm' or 'my-fused-mlp', "
                               f"not {name!r}")
        out.append((where, entry))
    return out


def _read(path: Path, source: str, con: duckdb.DuckDBPyConnection) -> tuple[list[OpClass], list[Precision]]:
    try:
        data = safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise OpClassError(f"{path}: cannot read the operation classes ({exc})") from None
    except yaml.YAMLError as exc:
        raise OpClassError(f"{path}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return [], []
    if not isinstance(data, dict):
        raise OpClassError(f"{path}: the operation classes must be a mapping with `classes:` (and optionally "
                           f"`gemm_precisions:`)")
    unknown = sorted(str(k) for k in set(data) - {"classes", "gemm_precisions"})
    if unknown:
        raise OpClassError(f"{path}: unknown key {unknown[0]!r}; allowed keys: classes, gemm_precisions")
    compiled = compiled_together(con, _written_patterns(data))
    classes, seen = [], set()
    for where, entry in _entries(data, "classes", path, _CLASS_KEYS):
        name = entry["name"]
        if name in BUILT_IN:
            raise OpClassError(f"{where}: {name!r} is a built-in class (memcpy and memset come from their own "
                               f"tables, other is what no pattern matches); choose another name")
        if name in seen:
            raise OpClassError(f"{where}: the class {name!r} is listed twice in one file")
        seen.add(name)
        doc = entry.get("doc", "")
        if not isinstance(doc, str):
            raise OpClassError(f"{where}: doc must be text")
        glue = entry.get("glue", False)
        if not isinstance(glue, bool):
            raise OpClassError(f"{where}: glue must be true or false (would a fused kernel merge this class?)")
        classes.append(OpClass(name, doc, _patterns(entry, where, con, compiled), glue, source))
    precisions = []
    for where, entry in _entries(data, "gemm_precisions", path, _PRECISION_KEYS):
        if not isinstance(entry.get("tensor_cores"), bool):
            raise OpClassError(f"{where}: tensor_cores must be true or false (does this precision run on the "
                               f"tensor cores?)")
        precisions.append(Precision(entry["name"], entry["tensor_cores"], _patterns(entry, where, con, compiled)))
    return classes, precisions


@functools.lru_cache(maxsize=1)
def _bundled() -> tuple[tuple[OpClass, ...], tuple[Precision, ...]]:
    with scratch_cursor() as con:
        classes, precisions = _read(_bundled_file(), "bundled", con)
    return tuple(classes), tuple(precisions)


def load_operation_classes(rule_dirs: list[Path] | None = None) -> OperationClasses:
    """The bundled classes with each team directory's DIR/operation_classes.yaml applied in order: a class of a
    bundled (or earlier) name gets the new patterns in its old place; a class of a new name is matched before the
    others (a team names its own kernels more precisely than the generic patterns). Precisions work the same."""
    bundled_classes, bundled_precisions = _bundled()
    classes, precisions = list(bundled_classes), list(bundled_precisions)
    files = [vocabulary_file(Path(d), CLASSES_FILE) for d in rule_dirs or []]
    files = [f for f in files if f.is_file()]
    if files:
        with scratch_cursor() as con:
            for path in files:
                team_classes, team_precisions = _read(path, str(path), con)
                classes = _merged(classes, team_classes)
                precisions = _merged(precisions, team_precisions)
    return OperationClasses(tuple(classes), tuple(precisions))


class _HasName(Protocol):
    @property
    def name(self) -> str: ...


_Named = TypeVar("_Named", bound=_HasName)


def _merged(old: list[_Named], new: list[_Named]) -> list[_Named]:
    names = {item.name: i for i, item in enumerate(old)}
    out = list(old)
    added = []
    for item in new:
        if item.name in names:
            out[names[item.name]] = item
        else:
            added.append(item)
    return added + out


def default_classes() -> OperationClasses:
    return load_operation_classes()


def define_op_classes(con: Any, classes: OperationClasses | None) -> None:
    """Macros op_class_of(name) (the first class whose pattern matches, else 'other') and
    gemm_precision_of(name) (the first precision, else 'unknown'), and the tables _op_classes(op_class, rank) and
    _gemm_precisions(precision, tensor_cores, rank) that facts join for display order, glue and tensor-core use."""
    classes = classes or default_classes()
    cases = " ".join(f"WHEN regexp_matches(t, {sql_literal(c.regex)}) THEN {sql_literal(c.name)}"
                     for c in classes.classes)
    con.execute(f"CREATE OR REPLACE MACRO op_class_of(t) AS "
                f"{'CASE ' + cases + ' ELSE ' + sql_literal(OTHER) + ' END' if cases else sql_literal(OTHER)}")
    cases = " ".join(f"WHEN regexp_matches(t, {sql_literal(p.regex)}) THEN {sql_literal(p.name)}"
                     for p in classes.precisions)
    unknown = sql_literal(UNKNOWN_PRECISION)
    con.execute(f"CREATE OR REPLACE MACRO gemm_precision_of(t) AS "
                f"{'CASE ' + cases + ' ELSE ' + unknown + ' END' if cases else unknown}")
    glue = {c.name for c in classes.classes if c.glue}
    values = ", ".join(f"({sql_literal(n)}, {i}, {str(n in glue).lower()})" for i, n in enumerate(classes.names()))
    con.execute(f"CREATE OR REPLACE TABLE _op_classes AS SELECT * FROM (VALUES {values}) t(op_class, rank, is_glue)")
    values = ", ".join(f"({sql_literal(p.name)}, {str(p.tensor_cores).lower()}, {i})"
                       for i, p in enumerate(classes.precisions)) or f"({unknown}, NULL, 0)"
    con.execute(f"CREATE OR REPLACE TABLE _gemm_precisions AS SELECT * FROM (VALUES {values}) "
                f"t(precision, tensor_cores, rank)")
