"""The CUDA API families are data: rules/vocabulary/api_names.yaml, plus DIR/vocabulary/api_names.yaml of a team's
rule directory. Each family (allocation, sync, kernel_launch, graph_launch ...) lists API names as globs; a call
belongs to the first family one of whose names matches it. The families become one table,
_api_name_patterns(family, rank, pattern), that rules/facts/_api_classes.sql alone matches the calls' names
against: the one definition of what counts as a launch or a synchronisation."""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from ..base.text import did_you_mean
from .layout import bundled, vocabulary_file, VOCABULARY_DIR
from .yamlfile import Positions, read_pack_yaml
from ..base.duck import sql_literal
from ..base.errors import PackError

API_NAMES_FILE = "api_names.yaml"
_FAMILY = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
# An API name, with `*` (any text) and `?` (one character) as wildcards; no other glob syntax.
_NAME = re.compile(r"^[A-Za-z_*?][A-Za-z0-9_*?]*$")
_FAMILY_KEYS = ("doc", "names")


class ApiNamesError(PackError):
    """An api_names.yaml is broken; the message starts with FILE:LINE:COL and says what to change."""


@dataclass(frozen=True)
class ApiFamily:
    name: str
    doc: str
    names: tuple[str, ...]
    """API names as globs (`cudaMalloc*`), matched case-sensitively on the name without its version suffix."""
    source: str = "bundled"

    def matches(self, api_name: str) -> bool:
        return self._pattern.match(api_name) is not None

    @functools.cached_property
    def _pattern(self) -> re.Pattern[str]:
        """fnmatchcase with any of the names, as one expression (loading the pack checks every name against every
        earlier family)."""
        return re.compile("|".join(fnmatch.translate(name) for name in self.names) or "(?!)")


@dataclass(frozen=True)
class ApiNames:
    families: tuple[ApiFamily, ...]

    def family_of(self, api_name: str) -> str | None:
        """The family a call of this name belongs to (the first that matches), as _api_classes decides it."""
        return next((f.name for f in self.families if f.matches(api_name)), None)

    def names(self, *families: str) -> list[str]:
        """The names (globs) listed under `families`, in file order."""
        return [n for f in self.families if f.name in families for n in f.names]

    def key(self) -> list[list[Any]]:
        """What the fact rows depend on (engine/facts/results_cache.py)."""
        return [[f.name, list(f.names)] for f in self.families]


def _read(path: Path, source: str, known: list[str] | None = None) -> list[ApiFamily]:
    """The families of one file; `known`: the only family names it may use (a team file adds names to the
    families the facts read, it cannot invent one no fact would read)."""
    data, text = read_pack_yaml(path, ApiNamesError, "the API names")
    at = Positions(text)
    if data is None:
        return []
    if not isinstance(data, dict) or set(data) != {"families"} or not isinstance(data["families"], dict):
        raise ApiNamesError(f"{path}:{at.of()}: the API names must be a mapping with one key, `families:`, of "
                            f"family name to {{doc, names}}, e.g. families: {{graph_launch: {{names: "
                            f"[cudaGraphLaunch*]}}}}")
    families = []
    for family, entry in data["families"].items():
        where = f"{path}:{at.of('families', family)}: family {family!r}"
        if not isinstance(family, str) or not _FAMILY.match(family):
            raise ApiNamesError(f"{where}: a family name is lower case with underscores, such as 'graph_launch'")
        if known is not None and family not in known:
            raise ApiNamesError(f"{where}: no fact reads this family; a pack adds names to the families "
                                f"{', '.join(known)}{did_you_mean(family, known)}")
        if not isinstance(entry, dict):
            raise ApiNamesError(f"{where}: must be a mapping with names: (and optionally doc:)")
        unknown = sorted(str(k) for k in set(entry) - set(_FAMILY_KEYS))
        if unknown:
            raise ApiNamesError(f"{path}:{at.of('families', family, unknown[0])}: family {family!r}: unknown key "
                                f"{unknown[0]!r}; allowed keys: {', '.join(_FAMILY_KEYS)}")
        doc = entry.get("doc", "")
        if not isinstance(doc, str):
            raise ApiNamesError(f"{path}:{at.of('families', family, 'doc')}: family {family!r}: doc must be text")
        names = entry.get("names")
        if not isinstance(names, list) or not names:
            raise ApiNamesError(f"{path}:{at.of('families', family, 'names')}: family {family!r}: names must be a "
                                f"list of API names, e.g. names: [cudaGraphLaunch*]")
        for i, name in enumerate(names):
            if not isinstance(name, str) or not _NAME.match(name):
                raise ApiNamesError(f"{path}:{at.of('families', family, 'names', i)}: family {family!r}: {name!r} is "
                                    f"not an API name; write it as the export does, without the _vNNNN suffix, "
                                    f"with * for any text (cudaMalloc*)")
        families.append(ApiFamily(family, doc, tuple(names), source))
    _check_shadowing(families, path)
    return families


def _check_shadowing(families: list[ApiFamily], path: Path | str) -> None:
    """A name an earlier family already matches would never count for the later one: say so instead."""
    for i, family in enumerate(families):
        for name in family.names:
            for earlier in families[:i]:
                if earlier.matches(name):
                    raise ApiNamesError(f"{path}: {name} of family {family.name!r} is already in family "
                                        f"{earlier.name!r} (a call belongs to the first family that names it); "
                                        f"list it once")
            if family.names.count(name) > 1:
                raise ApiNamesError(f"{path}: {name} is listed twice in family {family.name!r}")


@functools.lru_cache(maxsize=1)
def bundled_api_names() -> ApiNames:
    return ApiNames(tuple(_read(bundled(VOCABULARY_DIR, API_NAMES_FILE), "bundled")))


def load_api_names(rule_dirs: list[Path] | tuple[Path, ...] | None = None) -> ApiNames:
    """The bundled families with each team directory's DIR/vocabulary/api_names.yaml applied in order: the names of
    a family are added to it (a team file names only the bundled families)."""
    families = list(bundled_api_names().families)
    for directory in rule_dirs or []:
        path = vocabulary_file(Path(directory), API_NAMES_FILE)
        if not path.is_file():
            continue
        for team in _read(path, str(path), [f.name for f in bundled_api_names().families]):
            known = [i for i, f in enumerate(families) if f.name == team.name]
            if known:
                old = families[known[0]]
                added = tuple(n for n in team.names if n not in old.names)
                families[known[0]] = ApiFamily(old.name, old.doc, old.names + added, old.source)
        _check_shadowing(families, path)
    return ApiNames(tuple(families))


def define_api_names(con: Any, api_names: ApiNames | None = None) -> None:
    """Table _api_name_patterns(family, rank, pattern): one row per listed name, rank the family's place in the
    order (the lowest matching rank wins), read by rules/facts/_api_classes.sql."""
    api_names = api_names or bundled_api_names()
    con.execute("CREATE OR REPLACE TABLE _api_name_patterns (family VARCHAR, rank INTEGER, pattern VARCHAR)")
    values = ", ".join(f"({sql_literal(f.name)}, {rank}, {sql_literal(name)})"
                       for rank, f in enumerate(api_names.families) for name in f.names)
    if values:  # one statement: executemany() would run one INSERT per name
        con.execute(f"INSERT INTO _api_name_patterns VALUES {values}")
