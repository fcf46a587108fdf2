"""`diagnose profile [--preset NAME] [options] -- CMD ARGS`: capture, export and diagnose in one command (the
capture itself is engine/capture/; this module prints, asks and reports). Its command line is parser(), beside
run()."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

from ..runs.api import diagnose
from ..capture.flags import CaptureOptions, build_plan
from ..capture.nsys import INSTALL_HINT, NsysError, installed_nsys
from ..pack.presets import (expected_settings, guess_preset, load_presets, parallel_size, resolve_preset,
                            visible_gpus)
from ..capture.run import (create_default_out_dir, default_out_dir, export_sqlite, finish_report, prepare_out_dir,
                           run_capture)
from ..diagnosis.config import resolve_config
from ..base.errors import InputError
from ..reports.render import render
from ..base.timings import Timings
from .deliver import deliver
from .exits import EXIT_PROGRAM_FAILED, exit_codes_help, one_line
from .interrupt import StopRequest
from .options import CommandParser, add_report_options, positive_int_of
from .output import check_output, check_outside_cache, emit, output_formats
from .progress import Progress

PROG = "diagnose profile"


def _say(text: str, *, quiet: bool = False) -> None:
    if not quiet:
        sys.stderr.write(f"{PROG}: {one_line(text)}\n")
        sys.stderr.flush()


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _nsys_switch(text: str) -> str:
    from ..capture.flags import own_switch_problem

    if not text.startswith("--") or len(text.split("=", 1)[0]) < 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not an nsys switch; write it whole, e.g. "
                                         f"--nsys-arg=--cuda-graph-trace=node")
    problem = own_switch_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def parser() -> argparse.ArgumentParser:
    from ..capture.flags import RANGE_CHOICES
    from ..pack.presets import preset_choices

    p = CommandParser(
        prog="diagnose profile",
        usage="diagnose profile [--preset NAME] [options] -- CMD [ARGS ...]",
        description="Capture CMD with Nsight Systems the way its stack needs (flags, environment), export the "
                    "capture to SQLite and diagnose it, in one command. The preset is guessed from the command "
                    "(vllm, sglang, trtllm-*, python ...) and printed; --preset overrides it (trtllm is "
                    "tensorrt-llm). The flags are spelled "
                    "for the installed nsys; a flag it lacks is dropped with a warning saying what is lost. The "
                    "program's output goes to standard error; standard output carries only the report.",
        epilog="Outputs go to --out-dir (default: a new ./nsys-diagnose-<timestamp>-<pid>/): profile.nsys-rep, "
               "profile.sqlite, report.md, capture.log and capture.json; nothing is overwritten without --force. "
               "Ctrl-C stops the program and lets nsys write what it captured, which is then diagnosed; a second "
               "Ctrl-C aborts. " + exit_codes_help("profile"))
    p.add_argument("command", nargs="*", metavar="CMD", help="the program to profile and its arguments, after --")
    p.add_argument("--preset", choices=preset_choices(),
                   help="the capture preset (default: guessed from CMD); `--dry-run` prints what it sets and why")
    p.add_argument("--duration", dest="duration_s", type=_seconds, metavar="S",
                   help="stop capturing after S seconds (a server that never exits needs it, or --range)")
    p.add_argument("--delay", dest="delay_s", type=_seconds, metavar="S",
                   help="start capturing S seconds after the program starts (skip loading and warm-up)")
    p.add_argument("--range", dest="capture_range", choices=RANGE_CHOICES,
                   help="capture only between the program's cudaProfilerStart and cudaProfilerStop; the preset's "
                        "note says how its stack brackets them")
    p.add_argument("--gpu-metrics", action="store_true",
                   help="sample GPU metrics (SM activity, tensor cores, DRAM) where the installed nsys supports it")
    p.add_argument("--nsys-arg", dest="nsys_args", action="append", default=[], type=_nsys_switch,
                   metavar="--SWITCH=VALUE", help="pass this switch to `nsys profile` as well (replacing the "
                                                  "preset's value of the same switch); repeatable, e.g. "
                                                  "--nsys-arg=--cuda-graph-trace=node")
    p.add_argument("--out-dir", type=Path, metavar="DIR",
                   help="directory for the report, the .nsys-rep and the .sqlite (default: a new "
                        "./nsys-diagnose-<timestamp>-<pid>/)")
    p.add_argument("--force", action="store_true", help="replace an earlier capture in --out-dir")
    p.add_argument("--dry-run", action="store_true",
                   help="print the nsys and export command lines and the environment, and run nothing")
    p.add_argument("--nsys", metavar="PATH", help="the nsys executable (default: NSYS_DIAGNOSE_NSYS, else nsys on "
                                                   "PATH)")
    p.add_argument("--expect-gpus", type=positive_int_of("GPUs"), metavar="N",
                   help="GPUs the run should use (default: the product of the parallel sizes in CMD, e.g. "
                        "--tensor-parallel-size); fewer in the capture is reported as a capture problem")
    p.add_argument("--expect-ranks", type=positive_int_of("processes"), metavar="N",
                   help="processes that should run GPU work (default: as --expect-gpus); fewer is reported")
    add_report_options(p)
    return p


def run(args: argparse.Namespace, stop: StopRequest) -> int:
    begin = time.perf_counter()
    command = list(args.command)
    if not command:
        raise InputError("give the program to profile after --, e.g. `diagnose profile -- python bench.py`.")
    if command[0].startswith("-"):  # nsys would take it for one of its own switches
        raise InputError(f"the program {command[0]!r} starts with '-', which nsys would read as a switch; name it "
                         f"by a path, e.g. ./{command[0]}.")
    quiet = args.quiet
    presets = load_presets()
    if args.preset:
        preset, why = resolve_preset(args.preset), "--preset"
    else:
        name, reason = guess_preset(command)
        preset, why = presets[name], f"guessed: {reason}; --preset overrides"
    _say(f"preset {preset.preset} ({why}): {preset.title}", quiet=quiet and not args.dry_run)
    try:
        nsys, cached = installed_nsys(args.nsys)
        if not nsys.export_sqlite:
            raise NsysError(f"{nsys.path} (nsys {nsys.version}) is too old: it has no `nsys export --type sqlite`, "
                            f"which the diagnosis reads; {INSTALL_HINT}.")
    except NsysError:
        # no usable nsys: the stack's own PyTorch profiler is the other way to a profile `diagnose` reads
        _say(f"without nsys: {preset.torch_profiler}")
        raise
    explicit = args.out_dir is not None
    # the default directory is only named here; it is created (by this run alone) when the capture starts
    out_dir = Path(os.path.abspath(args.out_dir if explicit else default_out_dir()))
    options = CaptureOptions(duration_s=args.duration_s, delay_s=args.delay_s, capture_range=args.capture_range,
                             gpu_metrics=args.gpu_metrics, force=args.force, extra=tuple(args.nsys_args))
    environ = dict(os.environ)
    plan = build_plan(nsys, preset, command, out_dir, options, environ)
    for warning in plan.warnings:
        _say(f"warning: {warning}")
    parallel = parallel_size(preset, command)
    visible = visible_gpus(environ)
    if parallel and visible is not None and parallel > visible:
        _say(f"warning: the command asks for {parallel} GPUs but CUDA_VISIBLE_DEVICES shows {visible}; the capture "
             f"will be checked for {args.expect_gpus or parallel}.")
    if args.capture_range:
        _say(f"note: {' '.join(preset.range_note.split())}", quiet=quiet)
    sets = expected_settings(args.expect_gpus, args.expect_ranks, parallel)
    if args.dry_run:
        return _dry_run(plan, nsys.version, sets, args)
    outputs = output_formats(args.outputs, args.format)
    for output, _ in outputs:
        check_output(output, [], args.cache_dir)
    config = resolve_config(args.config, args.rule_dirs, [*sets, *args.sets])
    if explicit:
        check_outside_cache(out_dir, args.cache_dir, "--out-dir")  # the capture and its report go there
        prepare_out_dir(out_dir, force=args.force)
    else:
        out_dir = create_default_out_dir()
        plan = build_plan(nsys, preset, command, out_dir, options, environ)
    _say(f"capturing with nsys {nsys.version} into {out_dir}", quiet=quiet)
    window_end = (args.delay_s or 0) + args.duration_s if args.duration_s else None
    timings = Timings() if args.timings else None
    with _stage(timings, "capture"):
        result = run_capture(plan, lambda text: _say(text), environ, window_end)
    if result.rejected:
        raise NsysError(f"nsys rejected its arguments (it said: {result.rejection}) and ran nothing; correct the "
                        f"--nsys-arg switches (`nsys profile --help` lists what this nsys {nsys.version} accepts). "
                        f"What nsys printed is in {out_dir / 'capture.log'}.")
    status = result.program_status()
    if result.interrupted is not None or result.failed:
        _say(f"the program {status}; diagnosing the partial capture nsys wrote")
    else:
        _say(f"the program {status}", quiet=quiet)
    for note in result.notes:
        _say(note)
    with _stage(timings, "import"):
        report = finish_report(plan, result, lambda text: _say(text, quiet=quiet))
    stop.check()
    with _stage(timings, "export"):
        sqlite = export_sqlite(plan, lambda text: _say(text, quiet=quiet))
    stop.check()
    progress = Progress(stop, quiet=quiet, prog=PROG)
    document = diagnose(sqlite, config, tokens=args.tokens, progress=progress, cache=args.cache,
                        cache_dir=args.cache_dir, what_if_batch=args.what_if_batch, timings=timings,
                        capture_preset=preset.preset)
    kept = out_dir / "report.md"
    emit(render(document, "md"), kept, inputs=[str(sqlite)], cache_dir=args.cache_dir)
    _record(out_dir, plan, nsys.version, result, command, sets)
    _say(f"kept {report}, {sqlite}, {kept} (and capture.log, capture.json)", quiet=False)
    code = deliver(args, document, document.findings, outputs, [str(sqlite), str(report)], stop, progress, timings,
                   begin)
    if result.interrupted is not None:
        return 128 + result.interrupted
    if result.failed:
        return EXIT_PROGRAM_FAILED
    return code


def _stage(timings: Timings | None, name: str) -> contextlib.AbstractContextManager[None]:
    """The capture's own stages (the program under nsys, the import of a .qdstrm, the export) in --timings."""
    return timings.stage(name) if timings else contextlib.nullcontext()


def _record(out_dir: Path, plan, version: str, result, command: list[str], sets: list[str]) -> None:
    """capture.json: how the capture was made and how the program ended, for whoever reads the directory later."""
    data = {"nsys_version": version, "preset": plan.preset.preset, "command": command,
            "nsys_command": plan.profile_argv, "export_command": plan.export_argv, "environment": plan.env,
            "warnings": plan.warnings, "program_exit_status": result.returncode,
            "stopped_by_signal": result.interrupted, "ended_by_duration": result.ended_by_duration,
            "program": result.program_status(), "seconds": result.seconds,
            "settings": sets}
    emit(json.dumps(data, indent=2) + "\n", out_dir / "capture.json", inputs=[])


def _dry_run(plan, version: str, sets: list[str], args: argparse.Namespace) -> int:
    """The exact command lines and environment, ready to paste into a job script; nothing runs."""
    lines = [f"# nsys {version}, preset {plan.preset.preset}: {' '.join(plan.preset.note.split())}"]
    if args.capture_range:
        lines.append(f"# {' '.join(plan.preset.range_note.split())}")
    lines.append(f"# without nsys: {' '.join(plan.preset.torch_profiler.split())}")
    lines += [f"# warning: {w}" for w in plan.warnings]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in plan.env.items()]
    lines += [shlex.join(plan.profile_argv), shlex.join(plan.export_argv),
              shlex.join(["diagnose", str(plan.sqlite), *[f"--set={s}" for s in sets]])]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
