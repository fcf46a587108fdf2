"""Reading the YAML of rule, rule-test, category and configuration files: the safe loader and where a syntax error
is, for `FILE:LINE:COL:` messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# The C loader when PyYAML was built with it; both construct plain data only (no Python objects).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """yaml.safe_load, parsed by the C loader when there is one (ten times faster: every start of the program reads
    the pack). A document the C loader refuses is parsed again by the Python one, so a syntax error raises the
    exception, and the wording, that yaml.safe_load always gave."""
    try:
        return yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError:
        return yaml.load(text, Loader=yaml.SafeLoader)


def safe_compose(text: str) -> yaml.Node | None:
    """yaml.compose with the safe loader (the nodes, with their positions), by the C loader when there is one; a
    document it refuses is composed again by the Python one, as in safe_load."""
    try:
        return yaml.compose(text, Loader=SAFE_LOADER)
    except yaml.YAMLError:
        return yaml.compose(text, Loader=yaml.SafeLoader)


def error_position(exc: yaml.YAMLError) -> tuple[int, int] | None:
    """(line, column), 1-based, of a YAML syntax error; None when PyYAML gives no position."""
    mark = getattr(exc, "problem_mark", None)
    return (mark.line + 1, mark.column + 1) if mark else None


def error_problem(exc: yaml.YAMLError) -> str:
    """What is wrong, in PyYAML's words, without its multi-line context."""
    return getattr(exc, "problem", None) or str(exc).splitlines()[0]


def read_pack_yaml(path: Path, error: type[Exception], what: str) -> tuple[Any, str]:
    """(document, text) of a pack's YAML file; one sentence naming the file, and where a syntax error is, when it
    cannot be read or parsed. `what`: what the file holds, for that sentence ("the software stacks")."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read {what} ({exc})") from None
    return parse_yaml(path, text, error), text


def parse_yaml(path: Path, text: str, error: type[Exception]) -> Any:
    """The document in `text` (read from `path`); a syntax error is one `FILE:LINE:COL: invalid YAML (...)`
    sentence."""
    try:
        return yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        line, col = error_position(exc) or (1, 1)
        raise error(f"{path}:{line}:{col}: invalid YAML ({error_problem(exc)})") from None


Path_ = tuple[str, ...]


class Positions:
    """Where each key and list item of a YAML document is, for `FILE:LINE:COL:` messages about its values."""

    def __init__(self, text: str):
        self._text: str | None = text  # composed at the first question: most files have nothing to report
        self._at: dict[Path_, tuple[int, int]] = {}

    def _positions(self) -> dict[Path_, tuple[int, int]]:
        if self._text is not None:
            text, self._text = self._text, None
            try:
                node = safe_compose(text)
            except yaml.YAMLError:
                node = None
            if node is not None:
                self._walk(node, ())
        return self._at

    def _walk(self, node: yaml.Node, path: Path_) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                here = (*path, str(key.value))
                self._at[here] = (key.start_mark.line + 1, key.start_mark.column + 1)
                self._walk(value, here)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                here = (*path, str(i))
                self._at[here] = (item.start_mark.line + 1, item.start_mark.column + 1)
                self._walk(item, here)

    def of(self, *path: object) -> str:
        """'LINE:COL' of the key or item at `path` (keys and 0-based indices), or of the nearest enclosing one
        that is known; '1:1' for the document."""
        at = self._positions()
        keys = tuple(str(p) for p in path)
        while keys and keys not in at:
            keys = keys[:-1]
        line, col = at.get(keys, (1, 1))
        return f"{line}:{col}"
