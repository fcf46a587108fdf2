"""What the rule tests (ruletest.py) and the fact tests (facttest.py) share: finding the test files of a kind,
reading one, checking its top-level keys, and comparing a value with the expected one."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable


from ..base.errors import DiagnoseError
from ..base.text import did_you_mean
from ..pack.yamlfile import Positions, parse_yaml

# Numbers in `evidence:` checks and fact-test rows are equal when they differ by less than this share (rounding
# of sums of doubles), unless a case sets a tolerance of its own.
REL_TOLERANCE = 1e-9



def is_fact_test(path: Path) -> bool:
    """A `NAME.test.yaml` beside `NAME.sql` tests that fact (engine/authoring/facttest.py)."""
    return path.with_name(path.name.removesuffix(".test.yaml") + ".sql").is_file()


def find_tests_of_kind(paths: list[Path], *, fact_tests: bool, error: type[DiagnoseError],
                     wrong_kind: Callable[[Path], str]) -> list[Path]:
    """The fact tests (`fact_tests`) or the rule tests of `paths`: directories are searched for *.test.yaml files
    of that kind; a named file of the other kind is `error`(wrong_kind(file)), and so is a path that is neither."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += [f for f in sorted(p.rglob("*.test.yaml")) if is_fact_test(f) == fact_tests]
        elif p.name.endswith(".test.yaml") and p.is_file():
            if is_fact_test(p) != fact_tests:
                raise error(wrong_kind(p))
            files.append(p)
        elif not p.exists():
            raise error(f"{p}: no such file or directory")
        else:
            raise error(f"{p}: not a directory or a *.test.yaml file")
    return files


def read_test_yaml(path: Path, error: type[DiagnoseError]) -> tuple[Any, Positions]:
    """The document of a test file and where its keys are; a file that cannot be read or parsed is one
    `FILE:LINE:COL:` sentence."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}:1:1: cannot read the test file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}:1:1: not UTF-8 text (byte {exc.start}); save the test file as UTF-8") from None
    return parse_yaml(path, text, error), Positions(text)


def check_file_keys(path: Path, data: Any, at: Positions, keys: tuple[str, str], error: type[DiagnoseError]) -> None:
    """A test file is a mapping of exactly `keys` (what is tested, its cases): an unknown key is named at its place,
    with the key it may have meant."""
    listed = f"a {keys[0]} test file has the keys {keys[0]!r} and {keys[1]!r}"
    if not isinstance(data, dict):
        raise error(f"{path}:1:1: {listed}")
    for key in data:
        if key not in keys:
            raise error(f"{path}:{at.of(key)}: unknown key {key!r}{did_you_mean(str(key), keys) or '; ' + listed}")
    missing = [k for k in keys if k not in data]
    if missing:
        raise error(f"{path}:1:1: no {missing[0]!r} key; {listed}")


def same_value(want: Any, got: Any, rel_tolerance: float = REL_TOLERANCE) -> bool:
    """Equal values: numbers within `rel_tolerance` of each other, anything else (text, true/false, null) exactly."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if number(want) and number(got):
        return math.isclose(want, got, rel_tol=rel_tolerance, abs_tol=1e-12)
    return type(want) is type(got) and want == got
