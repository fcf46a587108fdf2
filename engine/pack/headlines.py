"""The verdict's wording (its headline, the notes after it, the per-phase lines) and the engine's other sentences
(the start-up line, the "also checked" reason, a phase finding's cost row) are data:
rules/vocabulary/headlines.yaml, plus a headlines.yaml in a team's rule directory that overrides some of its
sentences. A sentence is text with `{placeholder}`s that this module fills in; nothing
in the file runs or reads anything (the team-pack trust rules of docs/security.md)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path


from .layout import bundled, vocabulary_file, VOCABULARY_DIR
from ..base.errors import PackError
from ..base.text import did_you_mean
from .yamlfile import Positions, read_pack_yaml

HEADLINES_FILE = "headlines.yaml"
_PLACEHOLDER = re.compile(r"\{(\w*)\}")
# Each sentence and the placeholders it may use.
PLACEHOLDERS: dict[str, frozenset[str]] = {key: frozenset(names.split()) for key, names in {
    "blocking": "title message",
    "primary": "title cost message also_on notes",
    "cost": "impact",
    "phase_primary": "phase bounds title cost message also_on notes",
    "phase_cost": "phase impact run_impact",
    "phase_bounds": "goal",
    "traced_symptom": "title share cause cost message also_on notes",
    "healthy": "utilization min_impact where notes",
    "healthy_graphs": "share",
    "healthy_kernels": "kernel share",
    "no_gpu_work": "notes",
    "gpu_bound": "utilization where overhead limit notes",
    "gpu_bound_overhead": "title rule cost",
    "gpu_bound_cost": "impact",
    "goal_ttft": "",
    "goal_tpot": "",
    "also_on": "gpus",
    "also_on_gpu": "gpu impact",
    "list_and": "items last",
    "unexplained_gaps": "ratio causes",
    "idle_cause_share": "share cause",
    "server_idle_serving": "share stretches how active",
    "server_idle": "share stretches how active",
    "server_idle_one": "",
    "server_idle_many": "count",
    "server_idle_os_wait": "count calls",
    "server_idle_off_cpu": "count",
    "phase_line": "phase bounds judgement size too_few",
    "phase_line_bounds": "goal",
    "phase_line_finding": "category cost title",
    "phase_line_cost": "phase impact run_impact",
    "phase_line_healthy": "where",
    "phase_no_gpu_work": "",
    "phase_busy": "busy kernels",
    "phase_kernels": "kernel share",
    "phase_size": "steps share",
    "phase_size_no_steps": "share",
    "phase_steps_one": "count",
    "phase_steps_many": "count",
    "phase_too_few": "",
    "startup_judged_after": "steady parts share found",
    "startup_judged_itself": "parts share found",
    "startup_setup": "",
    "startup_load": "",
    "startup_load_warmup": "",
    "startup_found_nvtx": "",
    "startup_found_copies": "",
    "startup_found_shape": "evidence",
    "startup_line_apart": "description steady",
    "startup_line_whole": "description",
    "startup_setup_call": "call duration",
    "startup_first_launch": "duration",
    "startup_module_load": "duration",
    "startup_module_loads": "count duration longest",
    "startup_longest_launch": "duration",
    "startup_copied_before": "size",
    "startup_copied": "size",
    "startup_set_up": "duration",
    "startup_set_up_found": "set_up evidence",
    "startup_model_load": "duration",
    "startup_model_load_copies": "size pageable speed duration",
    "startup_pageable": "share",
    "startup_speed": "gbps",
    "startup_allocations_one": "count",
    "startup_allocations_many": "count",
    "startup_warmup": "what duration",
    "startup_warmup_kernels": "count",
    "startup_graph_captures": "count",
    "negligible": "where limit",
    "negligible_where": "subject",
    "evidence_phase_cost": "phase",
    "evidence_phase_cost_value": "phase impact run_impact",
    "run_finding": "title cost message",
    "run_cost": "impact",
    "run_no_ranks": "",
    "run_healthy": "who spread rank rank_headline",
    "run_common": "spread primary who rank rank_headline",
    "run_all_ranks": "count",
    "run_both_ranks": "",
    "run_some_ranks": "count total ranks",
    "run_spread": "imbalance ranks",
    "run_no_kernels": "",
    "run_no_nccl": "count",
    "run_rank_count_one": "count",
    "run_rank_count_many": "count",
    "run_rank_one": "ranks",
    "run_rank_many": "ranks",
}.items()}


class HeadlineError(PackError):
    """A headlines.yaml is broken: each of `problems` starts with FILE:LINE:COL and says what to change (str() lists
    them, one per line)."""

    def __init__(self, *problems: str):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Headlines:
    """The sentences of the verdict headline, by key (PLACEHOLDERS)."""

    sentences: dict[str, str]

    def say(self, key: str, **values: str) -> str:
        """Sentence `key` with its placeholders filled in."""
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.sentences[key])


def _read(path: Path) -> dict[str, str]:
    data, text = read_pack_yaml(path, HeadlineError, "the headline wording")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise HeadlineError(f"{path}:1:1: the headline wording must be a mapping of sentence name to text, e.g. "
                            f"primary: \"{{title}}{{cost}}: {{message}}{{also_on}}{{notes}}\"")
    at = Positions(text)
    problems = []
    for key, value in data.items():
        where = f"{path}:{at.of(key)}"
        if key not in PLACEHOLDERS:
            problems.append(f"{where}: unknown sentence {key!r}{did_you_mean(str(key), PLACEHOLDERS)} (the "
                            f"sentences are {', '.join(PLACEHOLDERS)})")
            continue
        if not isinstance(value, str):
            problems.append(f"{where}: {key} must be text")
            continue
        allowed = PLACEHOLDERS[key]
        stray = _PLACEHOLDER.sub("", value)
        if "{" in stray or "}" in stray:  # `{title{cost}`, `{cost`, `{cost:>10}` would print as written
            problems.append(f"{where}: {key} has a brace that opens or closes no placeholder; a placeholder is "
                            f"a name in braces, {{name}}, with nothing else inside, and the text has no other braces")
        for name in _PLACEHOLDER.findall(value):
            if name not in allowed:
                listed = ", ".join(f"{{{p}}}" for p in sorted(allowed)) or "none"
                problems.append(f"{where}: {key} uses {{{name}}}, which it cannot fill in"
                                f"{did_you_mean(name, allowed)} (its placeholders: {listed})")
    if problems:
        raise HeadlineError(*problems)
    return dict(data)


@functools.cache
def _bundled() -> dict[str, str]:
    sentences = _read(bundled(VOCABULARY_DIR, HEADLINES_FILE))
    missing = sorted(set(PLACEHOLDERS) - set(sentences))
    if missing:
        raise HeadlineError(f"the bundled {HEADLINES_FILE} lacks {', '.join(missing)}")
    return sentences


def load_headlines(rule_dirs: list[Path] | tuple[Path, ...] | None = None) -> Headlines:
    """The bundled wording with each team directory's DIR/headlines.yaml applied in order."""
    sentences = dict(_bundled())
    for directory in rule_dirs or []:
        path = vocabulary_file(Path(directory), HEADLINES_FILE)
        if path.is_file():
            sentences.update(_read(path))
    return Headlines(sentences)
