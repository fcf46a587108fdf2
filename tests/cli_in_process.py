"""`diagnose ARGS` run in the test process: the exit code and what it printed, as subprocess.run would give them.

A CLI subprocess pays for starting Python and importing DuckDB, pydantic and Jinja before any work; tests that
check what the CLI says or which exit code it returns do not need that. Keep a subprocess where it is the point:
signals, resource limits and peak memory of one run, import-time behaviour, the `python -m` entry points.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from nsys_diagnose.cli.main import main


@contextlib.contextmanager
def _working_directory(cwd: Path | None, drop_env: tuple[str, ...]) -> Iterator[None]:
    old_cwd = os.getcwd()
    old_env = {name: os.environ.pop(name) for name in drop_env if name in os.environ}
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.update(old_env)


def run_cli(*args: str | os.PathLike[str], cwd: Path | None = None,
            drop_env: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`diagnose ARGS` in `cwd`, without the environment variables `drop_env`; stdout and stderr are captured."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with _working_directory(cwd, drop_env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: --help, --version and usage errors
            if isinstance(exc.code, str):  # what Python prints before exiting 1
                err.write(exc.code + "\n")
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    return subprocess.CompletedProcess(["diagnose", *argv], code, out.getvalue(), err.getvalue())
