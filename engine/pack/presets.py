"""Capture presets: data in rules/capture/presets/<name>.yaml (flags, environment, a note on what and why, and how to
get a PyTorch-profiler trace from the same stack without nsys), and the guess of which preset a command needs from its
program name or `python -m` module."""

from __future__ import annotations

import fnmatch
import functools
import os
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .layout import bundled, PRESETS_DIR
from .stacks import FLAGS_FILE, Stacks, bundled_stacks
from .yamlfile import safe_load
from ..base.errors import SetupError

# Capture presets live beside the rules, in a directory of their own, and are no rules (engine/diagnosis/rules.py).
FALLBACK = "cuda"  # a command no preset recognises


class FlagSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spellings: list[str] = Field(min_length=1)
    lost: str
    old_values: dict[str, dict[str, str]] = Field(default_factory=dict)
    fallback_values: dict[str, str] = Field(default_factory=dict)
    value_lost: dict[str, str] = Field(default_factory=dict)


class Preset(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preset: str
    # Former names `--preset` still accepts (scripts written before the preset was named after its stack).
    aliases: list[str] = Field(default_factory=list)
    title: str
    programs: list[str] = Field(default_factory=list)
    modules: list[str] = Field(default_factory=list)
    trace: list[str] = Field(min_length=1)
    flags: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    range_end: str = "stop"
    parallel_options: list[str] = Field(default_factory=list)
    note: str
    range_note: str
    # How to get a PyTorch-profiler (Kineto) trace from this stack instead of an nsys capture, for `diagnose` to
    # read (docs/capture.md "Without nsys: a PyTorch-profiler trace"). Required: only bundled presets exist, and
    # every one of them says it, even where the answer is that the stack has no PyTorch profiler.
    torch_profiler: str = Field(min_length=1)
    references: list[str] = Field(default_factory=list)


def presets_dir() -> Path:
    return bundled(PRESETS_DIR)


def _load(path: Path) -> object:
    try:
        return safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SetupError(f"{path}: cannot read this capture-preset file ({exc}); reinstall nsys-diagnose.") from None


@functools.lru_cache(maxsize=1)
def load_flags() -> dict[str, FlagSpec]:
    path = presets_dir() / FLAGS_FILE
    data = _load(path)
    try:
        if not isinstance(data, dict):
            raise AttributeError("not a mapping")
        return {name: FlagSpec.model_validate(spec) for name, spec in data.items()}
    except (ValidationError, AttributeError) as exc:
        raise SetupError(f"{path}: not a valid table of nsys switches ({exc}); reinstall nsys-diagnose.") from None


@functools.lru_cache(maxsize=1)
def load_presets() -> dict[str, Preset]:
    """Every preset by name, checked: its file is named after it and every switch it sets is in nsys-flags.yaml."""
    flags = load_flags()
    out: dict[str, Preset] = {}
    for path in sorted(presets_dir().glob("*.yaml")):
        if path.name == FLAGS_FILE:
            continue
        try:
            preset = Preset.model_validate(_load(path))
        except ValidationError as exc:
            raise SetupError(f"{path}: not a valid capture preset ({exc.errors()[0]['msg']} at "
                             f"{'.'.join(map(str, exc.errors()[0]['loc']))}); reinstall nsys-diagnose.") from None
        unknown = sorted(set(preset.flags) - set(flags))
        if preset.preset != path.stem or unknown:
            raise SetupError(f"{path}: the preset must be named {path.stem!r} and set only the switches of "
                             f"{FLAGS_FILE} (unknown: {', '.join(unknown) or 'none'}); reinstall nsys-diagnose.")
        out[preset.preset] = preset
    return out


def preset_names() -> list[str]:
    return list(load_presets())


def preset_choices() -> list[str]:
    """What `--preset` accepts: every preset's name, then the former names (aliases) still accepted."""
    return preset_names() + [alias for p in load_presets().values() for alias in p.aliases]


def resolve_preset(name: str) -> Preset:
    """The preset named `name`, or the one that once had that name (`trtllm` is `tensorrt-llm`)."""
    presets = load_presets()
    found = presets.get(name) or next((p for p in presets.values() if name in p.aliases), None)
    if found is None:
        raise KeyError(name)
    return found


def _program(argv: list[str]) -> tuple[str, str | None]:
    """The program a command runs, past `env VAR=1`, and the module of `python -m MODULE`."""
    words = list(argv)
    while words and (os.path.basename(words[0]) == "env" or ("=" in words[0] and not words[0].startswith("-"))):
        words.pop(0)
    if not words:
        return "", None
    program = os.path.basename(words[0])
    module = None
    if "-m" in words[1:]:
        i = words.index("-m", 1)
        module = words[i + 1] if i + 1 < len(words) else None
    return program, module


def guess_preset(argv: list[str]) -> tuple[str, str]:
    """The preset a command needs and why: its program (`vllm`, `trtllm-serve`), else its `python -m` module
    (`sglang.launch_server`), else a script's name that names a stack, else `python` → pytorch, else cuda."""
    program, module = _program(argv)
    presets = load_presets()
    for preset in presets.values():
        if any(fnmatch.fnmatchcase(program, pattern) for pattern in preset.programs if "python" not in pattern
               and pattern != "torchrun"):
            return preset.preset, f"the program is {program}"
    if module:
        top = module.split(".")[0]
        for preset in presets.values():
            if top in preset.modules:
                return preset.preset, f"the command runs the module {module}"
    for preset in presets.values():
        if any(fnmatch.fnmatchcase(program, pattern) for pattern in preset.programs):
            return preset.preset, f"the program is {program}"
    return FALLBACK, f"no preset recognises {program or 'the command'}"


def preset_for_stack(lineage: Sequence[str], stacks: Stacks | None = None) -> Preset:
    """The preset whose capture suits a diagnosed stack, given its lineage (vllm, pytorch): the `preset` of the
    first stack in it that rules/vocabulary/stacks.yaml (or a team's) lists, else the generic one."""
    presets = load_presets()
    stacks = stacks or bundled_stacks()
    for key in lineage:
        stack = stacks.get(key)
        if stack is not None and stack.preset in presets:
            return presets[stack.preset]
    return presets[FALLBACK]


def preset_sets(preset: Preset, switch: str) -> bool:
    """Whether the preset already passes `--name=value` (for --trace: traces at least those APIs)."""
    name, _, value = switch.partition("=")
    if name == "--trace":
        return set(value.split(",")) <= set(preset.trace)
    return preset.flags.get(name.removeprefix("--")) == value


def capture_line(lineage: Sequence[str], profile: str, switches: Sequence[str], nsys: str,
                 preset_name: str | None = None) -> str:
    """The remediation step of a capture problem: the `diagnose profile` line that fixes it with the preset the
    capture ran with (`preset_name`, when `diagnose profile` made it), else the one of the profile's stack, and the
    raw nsys switches beside it."""
    try:
        preset = resolve_preset(preset_name) if preset_name else preset_for_stack(lineage)
    except KeyError:
        preset = preset_for_stack(lineage)
    options = [profile] if profile else []
    options += [f"--nsys-arg={s}" for s in switches if not preset_sets(preset, s)]
    line = " ".join(["diagnose profile", f"--preset {preset.preset}", *options, "-- <your command>"])
    env = "".join(f"{k}={v} " for k, v in preset.env.items())
    return f"Capture again with: {line} (by hand: {env}nsys profile {nsys} ...)."


def parallel_size(preset: Preset, argv: list[str]) -> int | None:
    """The GPUs a command asks for: the product of the preset's parallel-size options found in it
    (`--tensor-parallel-size 2 --pipeline-parallel-size 2` is 4), None when it names none."""
    sizes: dict[str, int] = {}
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name not in preset.parallel_options:
            continue
        value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if value.isdigit() and int(value) > 0:
            sizes[name] = int(value)
    if not sizes:
        return None
    product = 1
    for size in sizes.values():
        product *= size
    return product


def visible_gpus(environ: dict[str, str]) -> int | None:
    """GPUs CUDA_VISIBLE_DEVICES lets the program see, None when it is unset (all of them)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return len([d for d in value.split(",") if d.strip()])


def expected_settings(gpus: int | None, ranks: int | None, parallel: int | None) -> list[str]:
    """The fact settings that make the capture rules check the GPUs and processes the run should have used
    (rules/capture/fewer-*-than-expected.yaml): given, else the command's parallel size; ranks default to GPUs."""
    gpus = gpus or parallel
    ranks = ranks or gpus
    return ([f"facts.expected_gpus={gpus}"] if gpus else []) + ([f"facts.expected_ranks={ranks}"] if ranks else [])
