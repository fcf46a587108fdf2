"""The command line's entry point: the dispatch of the command words, and the default command.

    diagnose PROFILE...                  one export, or the ranks of a run (no command word): here
    diagnose profile -- CMD ARGS         capture.py
    diagnose compare BEFORE AFTER        compare.py
    diagnose batch PATHS... --out FILE   batch.py (many independent profiles, one row each)
    diagnose rules list|explain|check|test   rules.py, rules_check.py
    diagnose facts list|show|test        facts.py

Each command module defines its parser beside its handler (parser() and run()), receives the parsed arguments and
never imports this one; the options several commands share are options.py. Diagnosing profiles, the default command,
is implemented here.
"""

from __future__ import annotations

# The stop handlers come first, before every other import (even argparse): importing DuckDB, pydantic and Jinja takes
# a moment, and Ctrl-C, SIGTERM or SIGHUP then is only recorded, so main() stops as soon as the imports are done, with
# 128 + N and no traceback. The console script enters it even earlier, in console.py, before this module is loaded.
from .interrupt import StopRequest, exit_on_stop_signals, starting

_STARTING = starting()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402
from pathlib import Path  # noqa: E402

try:
    from ..runs.api import diagnose
    from ..diagnosis.config import resolve_config
    from ..base.errors import InputError
    from ..base.errors import DiagnoseError
    from .deliver import deliver
    from .exits import EXIT_ERROR, exit_codes_help, finish, one_line
    from .options import CommandParser, add_report_options, merge_after
    from .output import ClosedOutput, check_output, output_formats
    from .progress import Progress
    from ..base.timings import Timings
except ImportError:
    if not _STARTING.requested:
        raise
    # An import interrupted at the C level (DuckDB initialising) can fail even though the handler raised nothing.
    _STARTING.__exit__()
    sys.stderr.write(f"\ndiagnose: {_STARTING.description}\n")
    sys.exit(_STARTING.exit_code)

if TYPE_CHECKING:
    from ..model.report import Report
    from ..model.runmodel import RunReport

Command = Callable[[argparse.Namespace, StopRequest], int]


def profile_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="diagnose",
        description="Diagnose an Nsight Systems SQLite export, or a PyTorch-profiler trace (.pt.trace.json(.gz)), "
                    "of an LLM-inference run: names the bottleneck, "
                    "proves it with numbers and says what to do. Two or more exports (or a directory of them) "
                    "are the ranks of one distributed run: each rank is diagnosed, in parallel, and the ranks are "
                    "compared (straggler, imbalance, NCCL time per rank); exports that are not one run's ranks "
                    "(other nsys versions, sessions started more than 5 minutes apart) are refused: `diagnose "
                    "batch` takes independent profiles.",
        epilog="Commands (`diagnose COMMAND --help` describes each): "
               + "; ".join(f"`{usage}`: {what}" for usage, what in (entry[3] for entry in COMMANDS.values()))
               + ". Multi-rank: `diagnose rank0.sqlite rank1.sqlite ...` or `diagnose RUN_DIR`; --fail-on then "
               "counts every rank's findings and the cross-rank ones. A file named "
               + " or ".join(COMMANDS) + " in the working directory is a profile, not a command. "
               + exit_codes_help("diagnose"))
    p.add_argument("profiles", nargs="+", metavar="PROFILE",
                   help="SQLite export written by `nsys export --type sqlite`, or a PyTorch-profiler trace "
                        "(*.pt.trace.json or .json.gz, from torch.profiler, vLLM or SGLang), read-only; two or "
                        "more, or a "
                        "directory of *.sqlite / *.nsys-rep exports or of PyTorch-profiler traces "
                        "(*.pt.trace.json.gz), diagnose one multi-rank run (rank numbers from the traces' "
                        "distributedInfo, else from names such as rank0, rank_3, -r2, .3.sqlite, else sorted order)")
    add_report_options(p, jobs=True)
    return p


# Each command module is imported when its command runs or its help is shown: every CLI process starts by importing
# this file, and diagnosing a profile needs none of them. A command module defines its parser, parser(), beside its
# implementation, run(args, stop).
def _capture() -> ModuleType:
    from . import capture

    return capture


def _compare() -> ModuleType:
    from . import compare

    return compare


def _batch() -> ModuleType:
    from . import batch

    return batch


def _rules() -> ModuleType:
    from . import rules

    return rules


def _facts() -> ModuleType:
    from . import facts

    return facts


def _lazy(module: Callable[[], ModuleType]) -> tuple[Callable[[], argparse.ArgumentParser], Command]:
    """The parser and the implementation of a command, each importing its module when called."""
    def parser() -> argparse.ArgumentParser:
        return module().parser()

    def command(args: argparse.Namespace, stop: StopRequest) -> int:
        return module().run(args, stop)

    return parser, command


# command word -> (its parser, its implementation, the name its error messages start with, its synopsis and what
# it does for `diagnose --help`). Every command is listed here and nowhere else, so the help cannot leave one out.
COMMANDS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Command, str, tuple[str, str]]] = {
    "profile": (*_lazy(_capture), "diagnose profile",
                ("diagnose profile [--preset vllm|sglang|tensorrt-llm|pytorch|cuda] -- CMD ARGS",
                 "capture CMD with nsys the right way for its stack, export and diagnose it")),
    "compare": (*_lazy(_compare), "diagnose compare",
                ("diagnose compare BEFORE AFTER [--fail-on-regression METRIC:-5pt]", "before/after a change")),
    "batch": (*_lazy(_batch), "diagnose batch",
              ("diagnose batch PATHS... --out FILE", "many independent profiles, one row each (Parquet, CSV, JSONL)")),
    "rules": (*_lazy(_rules), "diagnose",
              ("diagnose rules list|explain ID|check [PATHS]|test [PATHS]", "rule tooling")),
    "facts": (*_lazy(_facts), "diagnose",
              ("diagnose facts list|show FACT PROFILE|test [FACTS]",
               "the facts rules read, their rows on an export, and their tests")),
}


def main(argv: list[str] | None = None) -> int:
    try:
        _STARTING.check()
        _guard_standard_streams()
        # The first tempfile.gettempdir() probes the temporary directory with a file of a random name it then
        # removes: made while a stop signal is only recorded, so no signal can interrupt it and leave the file.
        tempfile.gettempdir()
        return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:  # a signal while importing (deferred until now) or before a command's own handler
        sys.stderr.write(f"\ndiagnose: {_STARTING.description}\n")
        return _STARTING.exit_code
    except DiagnoseError as exc:  # `diagnose --help` with standard output closed: the help cannot be written
        sys.stderr.write(f"diagnose: error: {one_line(exc)}\n")
        return EXIT_ERROR
    finally:
        _STARTING.__exit__()


def run() -> int:
    """main() for a process of its own (the console script `diagnose`, `python -m nsys_diagnose.cli`): then a
    stop signal that lands while the process exits ends it with 128 + N, never with a traceback."""
    code = main()
    exit_on_stop_signals()
    return code


def _guard_standard_streams() -> None:
    """A standard stream closed by the caller (`diagnose run.sqlite >&-`): /dev/null takes its descriptor, so no
    file opened later (the profile, a database, a report) gets number 1 and receives what is meant for standard
    output. Writing to a closed standard output then fails with one sentence (exit 2), as there is nowhere for the
    report to go; a closed standard error only loses the messages, the exit code still tells."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the life of the process
    if sys.stdout is None:
        sys.stdout = ClosedOutput()


def _main(argv: list[str]) -> int:
    # A file named like a command in the working directory is a profile: `diagnose rules` diagnoses ./rules.
    word = argv[0] if argv and argv[0] in COMMANDS and not Path(argv[0]).is_file() else None
    if word is None:
        args = profile_parser().parse_args(argv)
        with StopRequest() as stop:
            _STARTING.check()  # a signal recorded before this command's own handler was in place
            progress = Progress(stop, quiet=args.quiet)
            return finish("diagnose", lambda: _diagnose(args, stop, progress), stop, debug=args.debug,
                          clear=progress.clear)
    build, command, prog, _ = COMMANDS[word]
    args = merge_after(build().parse_args(argv[1:]))
    with StopRequest() as stop:
        _STARTING.check()
        return finish(prog, lambda: command(args, stop), stop, debug=args.debug)


def _diagnose(args: argparse.Namespace, stop: StopRequest, progress: Progress) -> int:
    begin = time.perf_counter()
    timings = Timings() if args.timings else None
    multi_rank = len(args.profiles) > 1 or (args.profiles[0] != "" and Path(args.profiles[0]).is_dir())
    outputs = output_formats(args.outputs, args.format)
    for output, _ in outputs:
        check_output(output, args.profiles, args.cache_dir)  # fail fast: before any diagnosis work
    config = resolve_config(args.config, args.rule_dirs, args.sets)
    if multi_rank:
        if args.tokens:
            raise InputError("--tokens applies to one profile; the ranks of a run need not generate the same "
                             "tokens, so diagnose a rank alone to get its tokens/s.")
        if args.what_if_batch:
            raise InputError("--what-if applies to one profile; diagnose a rank alone to project its batch.")
        if args.timings:
            raise InputError("--timings applies to one profile; diagnose a rank alone to see where its time goes.")
        from ..runs.multirank import diagnose_run  # only multi-rank runs need it

        run = diagnose_run(args.profiles, config, progress=progress, cache=args.cache, workers=args.jobs,
                           cache_dir=args.cache_dir)
        findings = [f for _, f in run.all_findings()]
        document: Report | RunReport = run
    else:
        report = diagnose(args.profiles[0], config, tokens=args.tokens, progress=progress,
                          cache=args.cache, cache_dir=args.cache_dir, what_if_batch=args.what_if_batch,
                          timings=timings, formats={fmt for _, fmt in outputs})
        rank, size = report.profile.rank, report.profile.world_size
        if rank is not None and size is not None and 0 <= rank < size and size > 1:
            progress.note(f"{args.profiles[0]} is rank {rank} of a run of {size} ranks (its trace's "
                          f"distributedInfo), and this report is that rank alone; give every rank's trace "
                          f"(`diagnose DIR` or `diagnose RANK0 RANK1 ...`) to see the balance across the ranks")
        findings = report.findings
        document = report
    return deliver(args, document, findings, outputs, args.profiles, stop, progress, timings, begin)


if __name__ == "__main__":
    sys.exit(run())
