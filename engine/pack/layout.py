"""Where each part of a knowledge pack lives. The bundled pack (rules/ in the repository, installed as
nsys_diagnose.bundled_rules) and a team's rule directory share one layout:

    CATEGORY/ID.yaml, CATEGORY/ID.test.yaml   rules and their tests
    facts/*.sql, facts/*.test.yaml            facts and their tests (facts/cross_rank/: the multi-rank facts)
    vocabulary/*.yaml                         categories, headline wording, operation classes, stacks ...
    capture/presets/*.yaml                    `diagnose profile` capture presets
"""

from __future__ import annotations

import functools
import importlib.resources
from pathlib import Path

FACTS_DIR = "facts"
CROSS_RANK_DIR = "facts/cross_rank"
VOCABULARY_DIR = "vocabulary"
PRESETS_DIR = "capture/presets"
# Folders of a pack that hold no rule files.
NOT_RULES = (FACTS_DIR, VOCABULARY_DIR, PRESETS_DIR)


@functools.lru_cache(maxsize=1)
def bundled_pack() -> Path:
    """The bundled pack's root directory."""
    return Path(str(importlib.resources.files("nsys_diagnose.bundled_rules")))


def bundled(*parts: str) -> Path:
    """A path inside the bundled pack: bundled("vocabulary", "headlines.yaml")."""
    return bundled_pack().joinpath(*parts)


def is_rule_file(path: Path, pack: Path) -> bool:
    """A rule of the pack rooted at `pack`: a YAML file that is not a test, outside facts/, vocabulary/ and
    capture/presets/ (the vocabulary files a team keeps at its directory's top are left out by the rule loader)."""
    if path.suffix != ".yaml" or path.name.endswith(".test.yaml"):
        return False
    folder = path.relative_to(pack).parent.as_posix()
    return not any(folder == d or folder.startswith(d + "/") for d in NOT_RULES)


def vocabulary_file(directory: Path, name: str) -> Path:
    """A team directory's vocabulary file `name`: DIR/vocabulary/NAME, as in the bundled pack, or DIR/NAME, where
    packs written before the vocabulary folder keep it. The first that exists; DIR/vocabulary/NAME when neither."""
    nested = Path(directory) / VOCABULARY_DIR / name
    flat = Path(directory) / name
    return flat if flat.is_file() and not nested.is_file() else nested
