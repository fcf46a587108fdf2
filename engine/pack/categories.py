"""Bottleneck categories are data: rules/vocabulary/categories.yaml, plus a categories.yaml in a team's rule directory.

Each has an id (what rules name in `category:`), a kind (the default kind of its rules' findings), a title and a
description for the reports; their order in the file is their display order, bundled before team ones.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .layout import bundled, vocabulary_file, VOCABULARY_DIR
from ..base.errors import PackError
from ..base.vocabulary import Kind
from .yamlfile import SAFE_LOADER, error_position, error_problem

CATEGORY_FILE = "categories.yaml"


class CategoryError(PackError):
    """A categories.yaml is broken; the message starts with file:line:col."""


class Category(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    kind: Kind
    title: str = Field(min_length=1)
    description: str = Field(min_length=1)
    overhead: bool = False
    """An overhead around the kernels (launches, host work, syncs, copies, migrations), not the kernels' own speed:
    on a GPU whose kernels run nearly all of the window, such a cause costing little is not the primary."""
    source: str = "bundled"  # 'bundled' or the file a team category came from


def _bundled_file() -> Path:
    return bundled(VOCABULARY_DIR, CATEGORY_FILE)


def _read(path: Path, source: str) -> list[Category]:
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=SAFE_LOADER)
    except (OSError, UnicodeDecodeError) as exc:
        raise CategoryError(f"{path}:1:1: cannot read the categories ({exc})") from None
    except yaml.YAMLError as exc:
        line, col = error_position(exc) or (1, 1)
        raise CategoryError(f"{path}:{line}:{col}: invalid YAML: {error_problem(exc)}") from None
    if not isinstance(data, list):
        raise CategoryError(f"{path}:1:1: categories.yaml must be a YAML list of "
                            f"{{id, kind, title, description}} entries")
    out = []
    for i, entry in enumerate(data):
        where = f"{path}:1:1: category {i + 1}"
        if not isinstance(entry, dict):
            raise CategoryError(f"{where} must be a mapping with id, kind, title, description")
        try:
            out.append(Category.model_validate({**entry, "source": source}))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            name = entry.get("id", i + 1)
            raise CategoryError(f"{path}:1:1: category {name!r}: {loc}: {first['msg']}") from None
    return out


def _trusted(path: Path) -> bool:
    """Ours (or root's) and writable by nobody else: a categories.yaml planted in a shared directory is ignored."""
    try:
        st = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid in (os.geteuid(), 0) and not st.st_mode & 0o022


def team_category_file(rule_path: Path) -> Path | None:
    """The categories.yaml that applies to a team rule file checked on its own: the nearest trusted one in its
    directory or above it, as DIR/vocabulary/categories.yaml or DIR/categories.yaml (vocabulary_file)."""
    for directory in rule_path.resolve().parents:
        candidate = vocabulary_file(directory, CATEGORY_FILE)
        if candidate.is_file():
            return candidate if _trusted(candidate) else None
    return None


def load_categories(extra_files: list[Path] | None = None) -> dict[str, Category]:
    """Bundled categories, then those of each team file, in display order; a team may not redefine one."""
    categories: dict[str, Category] = {c.id: c for c in _read(_bundled_file(), "bundled")}
    seen: set[Path] = set()
    for path in extra_files or []:
        if path.resolve() in seen or path.resolve() == _bundled_file().resolve():
            continue
        seen.add(path.resolve())
        for category in _read(path, str(path)):
            if category.id in categories:
                where = categories[category.id].source
                raise CategoryError(f"{path}:1:1: category {category.id!r} is already defined "
                                    f"({'bundled' if where == 'bundled' else 'in ' + where}); pick another id")
            categories[category.id] = category
    return categories
