"""The default NVTX phase, start-up and step patterns: the generic ones and every software stack's
(rules/vocabulary/stacks.yaml), as the regular expressions compute.py writes into phase_of(), startup_of() and
step_of()."""

from __future__ import annotations

from ..pack.stacks import Stacks, bundled_stacks

# The NVTX phase, start-up and step patterns are case-insensitive RE2 regular expressions on the range text. The
# defaults are the generic ones below and those of every software stack (rules/vocabulary/stacks.yaml, a team's
# DIR/vocabulary/stacks.yaml), all of them applied to every profile: the stack is decided from the facts they feed.
# diagnose.yaml's `phases:`, `startup:` and `steps:` replace them.
#
# Phases: the first phase whose pattern matches wins, so a range that names both is prefill. A phase word counts
# only as a whole word: what surrounds it must be the start or end of the text or a non-letter (`_`, `:`, `@`,
# space, digit ...), so `decode_step`, `forward_decode`, `LLM@decode_all` and `decode 12` are decode, while
# nvFuser's compiler ranges `LoopNestGenerator` and `generateCudaKernel`, or a model's `LlamaDecoderLayer` (run in
# both phases), are not. RE2's `\b` would not do: it treats `_` as part of a word. camelCase labels
# (`runDecodeStep`) need a `phases:` pattern of their own. `generate` is deliberately no decode word: Hugging
# Face's `generate()` is the whole loop, prefill and every decode step, so a range named after it is not a step
# and would hide the prefill inside it. The stacks add their own words (SGLang's `extend`, TensorRT-LLM's
# context and generation phases ...).
_WORD_START, _WORD_END = r"(^|[^a-z])", r"([^a-z]|$)"
GENERIC_PHASE_PATTERNS: dict[str, tuple[str, ...]] = {
    "prefill": (rf"{_WORD_START}(prefill|prefilling){_WORD_END}",),
    "decode": (rf"{_WORD_START}(decode|decoding){_WORD_END}",),
}

# Start-up: `load` for loading and initialising the model (a text that opens with init/load/setup, or names the
# model, weights or checkpoint being loaded), `warmup` for warm-up, compilation (torch.compile, autotuning) and
# CUDA-graph capture. Word edges keep `preload` or `reload_cache` out, but a loop's own `load_batch` or
# `load_kv_cache` matches the text: what keeps the loop out is that a start-up range counts only before the first
# kernel launched outside such ranges (rules/facts/startup.sql).
GENERIC_STARTUP_PATTERNS: dict[str, tuple[str, ...]] = {
    "load": (r"^[^a-z]*(init|initiali[sz]e|initiali[sz]ation|load|loading|setup|set_up)([^a-z]|$)"
             r"|(^|[^a-z])(load|init|initiali[sz]e)[ _.-]?(model|weights?|checkpoint|engine|params)([^a-z]|$)"
             r"|(^|[^a-z])model[ _.-]?(load|init|initiali[sz]ation)([^a-z]|$)",),
    "warmup": (r"(^|[^a-z])(warm[ _-]?up|warming[ _-]?up|compile|compilation|autotun[a-z]*|profile[ _-]?run)"
               r"([^a-z]|$)|(^|[^a-z])(cuda[ _-]?)?graph[ _-]?capture([^a-z]|$)"
               r"|(^|[^a-z])capture[ _-]?(cuda[ _-]?)?graphs?([^a-z]|$)",),
}

# Steps: ranges that mark one iteration of a serving engine's loop (a range whose text matches a phase pattern is
# a step as well: a 'decode' range per decode step). The generic one: a range named only step or iteration,
# optionally numbered and prefixed with engine/model/inference/serving/profiler (`step 12`, `engine_step`,
# `iteration #3`): PyTorch loops labelled with torch.cuda.nvtx, and torch.profiler's `ProfilerStep#N`, one per
# prof.step() call of a loop. The stacks add their engines' step ranges (vLLM's `gpu_model_runner: forward`,
# TensorRT-LLM's `[Executor] _forward_step` ...).
GENERIC_STEP_PATTERNS: tuple[str, ...] = (
    r"^\s*((engine|model|inference|serving|profiler)[ _-]?)?(step|iteration)[ _:#-]*[0-9]*\s*$",
)


def _any_of(patterns: list[str] | tuple[str, ...]) -> str:
    """One case-insensitive regular expression that matches where any of `patterns` does."""
    return "(?i)" + "|".join(f"({p})" for p in patterns)


def default_phase_patterns(stacks: Stacks | None = None) -> dict[str, str]:
    """The default phase patterns, by phase in priority order: the generic ones and every stack's."""
    stacks = stacks or bundled_stacks()
    return {phase: _any_of([*generic, *stacks.phase_patterns(phase)])
            for phase, generic in GENERIC_PHASE_PATTERNS.items()}


def default_startup_patterns(stacks: Stacks | None = None) -> dict[str, str]:
    """The default start-up patterns, by kind (load, warmup): the generic ones and every stack's."""
    stacks = stacks or bundled_stacks()
    return {kind: _any_of([*generic, *stacks.startup_patterns(kind)])
            for kind, generic in GENERIC_STARTUP_PATTERNS.items()}


def default_step_patterns(stacks: Stacks | None = None) -> dict[str, str]:
    """The default step patterns: every stack's, then the generic one (which one matches is never shown)."""
    stacks = stacks or bundled_stacks()
    steps = {f"{s.key}-{i}": p for s in stacks for i, p in enumerate(s.steps, 1)}
    return {name: f"(?i){p}" for name, p in {**steps, "generic": GENERIC_STEP_PATTERNS[0]}.items()}
