"""The README's sample report is what `diagnose` prints for the bundled example today: a newcomer who runs the
command shown there sees those lines, not a report of an older version."""

from __future__ import annotations

import re
from pathlib import Path

from cli_in_process import run_cli

REPO = Path(__file__).resolve().parents[1]


def _sample() -> tuple[str, list[str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## A sample report", 1)[1]
    command = re.search(r"`diagnose ([^`]+)`", section).group(1)
    block = re.search(r"```\n(.*?)```", section, flags=re.S).group(1).splitlines()
    return command, [line for line in block if line != "..."]


def test_the_readme_sample_is_the_current_output_for_the_bundled_example():
    command, sample = _sample()
    done = run_cli(*command.split(), "--no-cache", cwd=REPO)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[:len(sample)] == sample, (
        f"README.md's sample report is stale: replace it with the first {len(sample)} lines of "
        f"`diagnose {command}` run in the repository")
