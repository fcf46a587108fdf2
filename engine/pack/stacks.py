"""Software stacks are data: rules/vocabulary/stacks.yaml, plus DIR/vocabulary/stacks.yaml of a team's rule
directory. Each stack has its key, label, remediation lineage, whether it serves tokens, its capture preset, the
patterns that detect it (kernel, NVTX and process names) and the NVTX patterns of its steps, phases and start-up.
The detection patterns become three DuckDB macros, stack_of_kernel(name), stack_of_nvtx(label) and
stack_of_process(name), with every pattern written in as a constant (as opclasses.py does), and a table
_stacks(stack, rank, serving) that rules/facts/software_stack.sql reads."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from .layout import bundled, PRESETS_DIR, VOCABULARY_DIR
from .yamlfile import Positions, read_pack_yaml
from ..base.duck import sql_literal
from ..base.errors import PackError
from ..base.regexes import compiled_together, regex_problem, scratch_cursor

STACKS_FILE = "stacks.yaml"
FLAGS_FILE = "nsys-flags.yaml"  # the one file of capture/presets/ that is no preset
PHASES = ("prefill", "decode")
STARTUP_KINDS = ("load", "warmup")
DETECT_SOURCES = ("kernels", "kernels_last", "nvtx", "processes")
DEFAULT_PRESET = "cuda"
_KEY = re.compile(r"^[a-z0-9]+([-_][a-z0-9]+)*$")
_FIELDS = ("key", "label", "lineage", "serving", "preset", "detect", "steps", "phases", "startup")


class StackError(PackError):
    """A stacks.yaml is broken; the message starts with FILE:LINE:COL and says what to change."""


@dataclass(frozen=True)
class Stack:
    """A software stack a profile can come from (the software_stack fact detects it)."""

    key: str
    label: str
    lineage: tuple[str, ...]
    """The stacks whose remediation steps and references apply, most specific first (vLLM's: vllm, pytorch)."""
    serving: bool = False
    preset: str = DEFAULT_PRESET
    detect: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(source, patterns) for each of DETECT_SOURCES the stack names."""
    steps: tuple[str, ...] = ()
    phases: tuple[tuple[str, tuple[str, ...]], ...] = ()
    startup: tuple[tuple[str, tuple[str, ...]], ...] = ()
    source: str = "bundled"

    def patterns(self, source: str) -> tuple[str, ...]:
        return dict(self.detect).get(source, ())


@dataclass(frozen=True)
class Stacks:
    """Every stack, most specific first; the last one is the stack of a profile with no evidence."""

    stacks: tuple[Stack, ...]

    def __iter__(self) -> Iterator[Stack]:
        return iter(self.stacks)

    def keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.stacks)

    def get(self, key: str | None) -> Stack | None:
        return next((s for s in self.stacks if s.key == key), None)

    def label(self, key: str | None) -> str:
        found = self.get(key)
        return found.label if found else str(key)

    @property
    def fallback(self) -> Stack:
        return self.stacks[-1]

    def serving_keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.stacks if s.serving)

    def step_patterns(self) -> list[str]:
        return [p for s in self.stacks for p in s.steps]

    def phase_patterns(self, phase: str) -> list[str]:
        return [p for s in self.stacks for p in dict(s.phases).get(phase, ())]

    def startup_patterns(self, kind: str) -> list[str]:
        return [p for s in self.stacks for p in dict(s.startup).get(kind, ())]

    def key(self) -> list[Any]:
        """What the fact rows depend on (engine/facts/results_cache.py)."""
        return [[s.key, s.serving, s.detect, s.steps, s.phases, s.startup] for s in self.stacks]


def _written_patterns(data: dict[str, Any]) -> list[str]:
    """Every text written where a stack takes patterns, for compiled_together (checked one by one when a pattern
    does not compile, or is no text)."""
    out: list[str] = []
    for entry in data["stacks"]:
        if not isinstance(entry, dict):
            continue
        values = [entry.get("steps")] + [v for group in ("detect", "phases", "startup")
                                         if isinstance(entry.get(group), dict) for v in entry[group].values()]
        for value in values:
            if isinstance(value, str):
                out.append(value)
            elif isinstance(value, list):
                out += [p for p in value if isinstance(p, str)]
    return out


class _Reader:
    """One stacks.yaml: each problem is raised as one sentence starting with FILE:LINE:COL."""

    def __init__(self, path: Path, text: str, con: duckdb.DuckDBPyConnection):
        self.path, self.at, self.con = path, Positions(text), con
        self.compiled: frozenset[str] = frozenset()  # patterns known to compile

    def fail(self, where: tuple[object, ...], message: str) -> StackError:
        return StackError(f"{self.path}:{self.at.of(*where)}: {message}")

    def patterns(self, value: Any, where: tuple[object, ...], what: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value:
            raise self.fail(where, f"{what} must be a list of regular expressions in quotes, e.g. ['my_engine::']")
        for i, pattern in enumerate(value):
            if not isinstance(pattern, str) or not pattern:
                raise self.fail((*where, i), f"{what}: {pattern!r} is not a regular expression in quotes")
            problem = None if pattern in self.compiled else regex_problem(self.con, pattern)
            if problem:
                raise self.fail((*where, i), f"{what}: {pattern!r} is not a regular expression DuckDB accepts "
                                             f"({problem}); patterns are RE2 syntax (no look-behind or "
                                             f"back-references)")
        return tuple(value)

    def grouped(self, value: Any, where: tuple[object, ...], what: str,
                names: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict):
            raise self.fail(where, f"{what} must be a mapping of {' or '.join(names)} to a list of patterns")
        out = []
        for name, patterns in value.items():
            if name not in names:
                raise self.fail((*where, name), f"{what}: unknown key {name!r}; allowed keys: {', '.join(names)}")
            out.append((str(name), self.patterns(patterns, (*where, name), f"{what}.{name}")))
        return tuple(out)

    def stack(self, entry: Any, i: int, presets: set[str], source: str) -> Stack:
        where: tuple[object, ...] = ("stacks", i)
        if not isinstance(entry, dict):
            raise self.fail(where, f"stack entry {i + 1} must be a mapping with key, label and lineage")
        unknown = sorted(str(k) for k in set(entry) - set(_FIELDS))
        if unknown:
            raise self.fail((*where, unknown[0]), f"unknown key {unknown[0]!r}; allowed keys: {', '.join(_FIELDS)}")
        key = entry.get("key")
        if not isinstance(key, str) or not _KEY.match(key):
            raise self.fail((*where, "key"), f"key must be a lower-case name such as 'vllm' or 'my-engine', "
                                             f"not {key!r}")
        label = entry.get("label")
        if not isinstance(label, str) or not label.strip():
            raise self.fail((*where, "label"), f"stack {key!r}: label must be the name reports show, e.g. "
                                               f"label: My Engine")
        lineage = entry.get("lineage", [key])
        if (not isinstance(lineage, list) or not lineage or lineage[0] != key
                or not all(isinstance(k, str) for k in lineage)):
            raise self.fail((*where, "lineage"), f"stack {key!r}: lineage must be a list of stack keys that "
                                                 f"starts with {key!r}, e.g. lineage: [{key}, pytorch]")
        serving = entry.get("serving", False)
        if not isinstance(serving, bool):
            raise self.fail((*where, "serving"), f"stack {key!r}: serving must be true or false (does it serve "
                                                 f"LLM tokens?)")
        preset = entry.get("preset", DEFAULT_PRESET)
        if preset not in presets:
            raise self.fail((*where, "preset"), f"stack {key!r}: preset {preset!r} is no capture preset (the "
                                                f"presets: {', '.join(sorted(presets))})")
        detect = self.grouped(entry.get("detect"), (*where, "detect"), f"stack {key!r}: detect", DETECT_SOURCES)
        steps = entry.get("steps")
        return Stack(key=key, label=label, lineage=tuple(lineage), serving=serving, preset=preset, detect=detect,
                     steps=() if steps is None else self.patterns(steps, (*where, "steps"), f"stack {key!r}: steps"),
                     phases=self.grouped(entry.get("phases"), (*where, "phases"), f"stack {key!r}: phases", PHASES),
                     startup=self.grouped(entry.get("startup"), (*where, "startup"), f"stack {key!r}: startup",
                                          STARTUP_KINDS),
                     source=source)


def _preset_names() -> set[str]:
    """The bundled capture presets, by file name (presets.py checks each file names its preset after itself)."""
    return {p.stem for p in bundled(PRESETS_DIR).glob("*.yaml") if p.name != FLAGS_FILE}


def _read(path: Path, source: str, con: duckdb.DuckDBPyConnection) -> list[Stack]:
    data, text = read_pack_yaml(path, StackError, "the software stacks")
    if data is None:
        return []
    reader = _Reader(path, text, con)
    if not isinstance(data, dict) or set(data) != {"stacks"} or not isinstance(data["stacks"], list):
        raise reader.fail((), "the software stacks must be a mapping with one key, `stacks:`, a list of entries "
                              "(key, label, lineage, serving, preset, detect, steps, phases, startup)")
    presets = _preset_names()
    reader.compiled = compiled_together(con, _written_patterns(data))
    out: list[Stack] = []
    for i, entry in enumerate(data["stacks"]):
        stack = reader.stack(entry, i, presets, source)
        if any(s.key == stack.key for s in out):
            raise reader.fail(("stacks", i, "key"), f"the stack {stack.key!r} is listed twice in one file")
        out.append(stack)
    return out


def _check_lineages(stacks: list[Stack]) -> None:
    keys = {s.key for s in stacks}
    for stack in stacks:
        unknown = [k for k in stack.lineage if k not in keys]
        if unknown:
            raise StackError(f"{stack.source}: stack {stack.key!r}: its lineage names {unknown[0]!r}, which is no "
                             f"stack (the stacks: {', '.join(sorted(keys))})")


@functools.lru_cache(maxsize=1)
def _bundled() -> tuple[Stack, ...]:
    with scratch_cursor() as con:
        return tuple(_read(bundled(VOCABULARY_DIR, STACKS_FILE), "bundled", con))


def _merged(old: list[Stack], new: list[Stack]) -> list[Stack]:
    """A stack of a known key replaces it in its place; a new one is checked before the others (a team's own
    engine is more specific than the stacks it runs on). The last stack, the fallback, stays last."""
    index = {s.key: i for i, s in enumerate(old)}
    out, added = list(old), []
    for stack in new:
        if stack.key in index:
            out[index[stack.key]] = stack
        else:
            added.append(stack)
    return added + out


def load_stacks(rule_dirs: list[Path] | tuple[Path, ...] | None = None) -> Stacks:
    """The bundled stacks with each team directory's DIR/vocabulary/stacks.yaml applied in order."""
    stacks = list(_bundled())
    # Only DIR/vocabulary/stacks.yaml: the file is newer than the vocabulary folder, so no pack keeps it at its top
    # (where the rule loader would take it for a rule).
    files = [Path(d) / VOCABULARY_DIR / STACKS_FILE for d in rule_dirs or []]
    files = [f for f in files if f.is_file()]
    if files:
        with scratch_cursor() as con:
            for path in files:
                stacks = _merged(stacks, _read(path, str(path), con))
    _check_lineages(stacks)
    return Stacks(tuple(stacks))


def bundled_stacks() -> Stacks:
    return load_stacks()


# The bundled stack keys, for the rule model's `stack_remediation` and `stack_references` keys
# (engine/diagnosis/rule_spec.py), which are checked when a rule file loads.
BUNDLED_STACK_KEYS: tuple[str, ...] = bundled_stacks().keys()


def _classifier(con: Any, macro: str, cases: list[tuple[str, str]]) -> None:
    whens = " ".join(f"WHEN regexp_matches(t, {sql_literal(p)}) THEN {sql_literal(k)}" for k, p in cases)
    con.execute(f"CREATE OR REPLACE MACRO {macro}(t) AS {'CASE ' + whens + ' END' if whens else 'NULL'}")


def define_stacks(con: Any, stacks: Stacks | None) -> None:
    """Macros stack_of_kernel(name), stack_of_nvtx(label), stack_of_process(name): the first stack whose pattern
    matches (NULL for none), and the table _stacks(stack, rank, serving), rank 0 the most specific."""
    stacks = stacks or bundled_stacks()
    kernels = [(s.key, p) for s in stacks for p in s.patterns("kernels")]
    kernels += [(s.key, p) for s in stacks for p in s.patterns("kernels_last")]
    _classifier(con, "stack_of_kernel", kernels)
    _classifier(con, "stack_of_nvtx", [(s.key, p) for s in stacks for p in s.patterns("nvtx")])
    _classifier(con, "stack_of_process", [(s.key, p) for s in stacks for p in s.patterns("processes")])
    values = ", ".join(f"({sql_literal(s.key)}, {i}, {str(s.serving).lower()})" for i, s in enumerate(stacks))
    con.execute(f"CREATE OR REPLACE TABLE _stacks AS SELECT * FROM (VALUES {values}) t(stack, rank, serving)")
