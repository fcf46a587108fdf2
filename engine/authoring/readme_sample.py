"""The README's sample report, made by a real run: `diagnose EXAMPLE` on the bundled example the README names, its
terminal report up to the end of WHERE THE TIME GOES. `make docs` writes it, so a new key metric or a changed
verdict reaches the README without a hand edit (tests/test_readme_sample.py runs the CLI and compares)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from ..base.errors import DiagnoseError
from ..reports.render import render
from ..runs.api import diagnose

README = "README.md"
HEADING = "## A sample report"
LAST_SECTION = "WHERE THE TIME GOES"  # the sample ends with this section of the terminal report
_COMMAND = re.compile(r"`diagnose ([^`\s]+)`")
_BLOCK = re.compile(r"```\n(.*?)```", re.S)


def _section(text: str) -> tuple[int, str]:
    at = text.find(HEADING)
    if at < 0:
        raise DiagnoseError(f"{README} has no section {HEADING!r} to put the sample report in")
    return at, text[at:]


def sample(repo: Path, example: str) -> str:
    """The first lines of the terminal report of `example` (relative to `repo`), as `diagnose` prints them there."""
    with contextlib.chdir(repo):
        report = diagnose(example, cache=False)
    lines = render(report, "terminal").splitlines()
    try:
        start = lines.index(LAST_SECTION)
        end = lines.index("", start)
    except ValueError:
        raise DiagnoseError(f"the report of {example} has no {LAST_SECTION} section to end the sample with") from None
    return "\n".join(lines[:end]) + "\n"


def readme(repo: Path) -> str:
    """README.md with its sample report made anew."""
    text = (repo / README).read_text(encoding="utf-8")
    at, section = _section(text)
    command, block = _COMMAND.search(section), _BLOCK.search(section)
    if command is None or block is None:
        raise DiagnoseError(f"{README}: the section {HEADING!r} needs the command `diagnose EXAMPLE` and a ``` block")
    start, end = at + block.start(1), at + block.end(1)
    return text[:start] + sample(repo, command.group(1)) + text[end:]
