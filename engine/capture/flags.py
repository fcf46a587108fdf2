"""The command lines of a capture: `nsys profile` with the preset's switches in the spellings the installed nsys
accepts (rules/capture/presets/nsys-flags.yaml), the environment the preset sets, and `nsys export`. A switch or
value this nsys lacks is dropped with a one-line warning that says what the capture loses."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from .nsys import Nsys
from ..pack.presets import FlagSpec, Preset, load_flags

RANGE_CHOICES = ("cudaProfilerApi",)
# nsys profile switches that `diagnose profile` sets itself, and what to use instead: through --nsys-arg they would
# contradict its own (two --output, a window it does not know of when judging how the program ended).
OWN_SWITCHES = {
    "--output": "--out-dir DIR",
    "--force-overwrite": "--force",
    "--duration": "--duration S",
    "--delay": "--delay S",
    "--capture-range": "--range cudaProfilerApi",
    "--capture-range-end": "--range cudaProfilerApi (the preset sets how the range ends)",
    "--stop-on-range-end": "--range cudaProfilerApi (the preset sets how the range ends)",
    "--gpu-metrics-devices": "--gpu-metrics",
    "--gpu-metrics-device": "--gpu-metrics",
    "--export": "the profile.sqlite it exports itself (`nsys export` converts profile.nsys-rep to other formats)",
}


def own_switch_problem(switch: str) -> str | None:
    """The sentence refusing an --nsys-arg that sets a switch `diagnose profile` sets itself, or None."""
    name = re.split(r"[=\s]", switch, maxsplit=1)[0]
    instead = OWN_SWITCHES.get(name)
    if instead is None:
        return None
    return f"{name} is set by diagnose profile itself, so it cannot be passed with --nsys-arg; use {instead} instead"


@dataclass(frozen=True)
class CaptureOptions:
    duration_s: float | None = None
    delay_s: float | None = None
    capture_range: str | None = None    # "cudaProfilerApi"
    gpu_metrics: bool = False
    force: bool = False
    extra: tuple[str, ...] = ()         # --nsys-arg: switches passed as given, after the preset's


@dataclass
class Plan:
    preset: Preset
    profile_argv: list[str]
    export_argv: list[str]
    env: dict[str, str]                 # set for the program (the preset's, where the caller had not set them)
    report: Path                        # the .nsys-rep nsys writes
    sqlite: Path
    warnings: list[str] = field(default_factory=list)

    def shell_lines(self) -> list[str]:
        """The command lines as a shell would run them: environment assignments before nsys."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return [(env + " " if env else "") + shlex.join(self.profile_argv), shlex.join(self.export_argv)]


def _spelled(nsys: Nsys, name: str, spec: FlagSpec, value: str, warnings: list[str]) -> str | None:
    """`--switch=value` in this nsys's spelling, or None (with a warning) when it has none."""
    spelling = next((s for s in spec.spellings if nsys.accepts(s)), None)
    if spelling is None:
        warnings.append(f"nsys {nsys.version} has no {spec.spellings[0]} switch: {spec.spellings[0]}={value} "
                        f"dropped; lost: {spec.lost}.")
        return None
    old = spec.old_values.get(spelling)
    if old is not None:
        if value not in old:
            warnings.append(f"nsys {nsys.version} has only {spelling}, which cannot say {spec.spellings[0]}="
                            f"{value}: dropped; lost: {spec.lost}.")
            return None
        value = old[value]
    fallback = spec.fallback_values.get(value)
    if fallback is not None and not nsys.accepts_value(spelling, value):
        value = fallback
    return f"{spelling}={value}"


def _trace(nsys: Nsys, spec: FlagSpec, wanted: list[str], warnings: list[str]) -> str | None:
    kept = []
    for api in wanted:
        if nsys.accepts_value("--trace", api):
            kept.append(api)
        else:
            lost = spec.value_lost.get(api, f"the {api} trace")
            warnings.append(f"nsys {nsys.version} cannot trace {api}: dropped from --trace; lost: {lost}.")
    return f"--trace={','.join(kept)}" if kept else None


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def build_plan(nsys: Nsys, preset: Preset, command: list[str], out_dir: Path, options: CaptureOptions,
               environ: dict[str, str]) -> Plan:
    flags = load_flags()
    warnings: list[str] = []
    argv = [nsys.path, "profile"]
    trace = _trace(nsys, flags["trace"], preset.trace, warnings)
    if trace:
        argv.append(trace)
    wanted: list[tuple[str, str]] = list(preset.flags.items())
    if options.capture_range:
        wanted += [("capture-range", options.capture_range), ("capture-range-end", preset.range_end)]
    if options.delay_s is not None:
        wanted.append(("delay", _seconds(options.delay_s)))
    if options.duration_s is not None:
        wanted.append(("duration", _seconds(options.duration_s)))
    if options.gpu_metrics:
        wanted.append(("gpu-metrics-devices", "cuda-visible"))
    for name, value in wanted:
        switch = _spelled(nsys, name, flags[name], value, warnings)
        if switch:
            argv.append(switch)
    for extra in options.extra:
        name = extra.split("=", 1)[0]
        if not nsys.accepts(name):
            warnings.append(f"nsys {nsys.version} has no {name} switch: --nsys-arg={extra} dropped.")
            continue
        # the user's own value replaces the preset's for the same switch
        argv = [a for a in argv if a.split("=", 1)[0] != name] + [extra]
    base = out_dir / "profile"
    argv.append(f"--output={base}")
    if options.force and nsys.accepts("--force-overwrite"):
        argv.append("--force-overwrite=true")
    argv += command
    report, sqlite = base.with_suffix(".nsys-rep"), base.with_suffix(".sqlite")
    export = [nsys.path, "export", "--type=sqlite", f"--output={sqlite}"]
    if "--force-overwrite" in nsys.export_switches:
        export.append("--force-overwrite=true")
    export.append(str(report))
    env = {k: v for k, v in preset.env.items() if k not in environ}
    warnings += [f"{k} is already set to {environ[k]!r} in your environment; the {preset.preset} preset would set "
                 f"{v!r} ({_why_env(preset)})." for k, v in preset.env.items() if k in environ and environ[k] != v]
    return Plan(preset, argv, export, env, report, sqlite, warnings)


def _why_env(preset: Preset) -> str:
    return "see its note: diagnose profile --preset " + preset.preset + " --dry-run"
