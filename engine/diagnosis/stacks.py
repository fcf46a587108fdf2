"""Which software stack a profile comes from, decided from the rows of the software_stack fact.

The most specific stack with evidence wins (rules/vocabulary/stacks.yaml lists them in that order, a team's
DIR/vocabulary/stacks.yaml adds its own): a vLLM
server also runs PyTorch kernels, and is vLLM. A profile with no recognised framework is plain CUDA, so it
never gets framework- or serving-specific advice. Evidence comes from the processes that launched GPU work;
a process on the same host that launched none (source `host`: an idle `sglang::detokenizer` beside a PyTorch
script) is named as context after the evidence and never decides the stack."""

from __future__ import annotations

from ..facts.compute import FactSet
from ..model.report import StackInfo
from ..base.units import fmt_ratio
from ..pack.stacks import Stacks, bundled_stacks

_SOURCES = {"kernels": "kernels", "nvtx": "NVTX ranges", "process": "processes"}
# Rows of this source are processes that launched no GPU work: context, never the stack.
_HOST = "host"
# Rows of this source are processes that launched GPU work.
_PROCESS = "process"
# The one row of a run with no stack evidence (it carries serves_tokens): no evidence, plain CUDA.
_NONE = "none"


def _example(row: dict) -> str:
    example = str(row.get("example") or "")
    return example if len(example) <= 80 else example[:79] + "…"


def _evidence(row: dict) -> str:
    what = _SOURCES.get(row.get("source") or "", str(row.get("source")))
    share = f", {fmt_ratio(row['time_share'], 0)} of kernel time" if row.get("time_share") is not None else ""
    return f"{row.get('matches', 0):,} {what}{share}, e.g. {_example(row)}"


def _on_host(row: dict, stacks: Stacks) -> str:
    label = stacks.label(row.get("stack"))
    n = row.get("matches", 0)
    return (f"also on the host, not counted (no GPU work): {n:,} process{'' if n == 1 else 'es'} named like "
            f"{label}, e.g. {_example(row)}")


def detect_stack(facts: FactSet) -> StackInfo:
    """The profile's stack, among the stacks its facts were computed with (FactSet.stacks)."""
    stacks = facts.stacks or bundled_stacks()
    rows = facts.rows("software_stack") if "software_stack" in facts.results else []
    deciding = [r for r in rows if r.get("source") not in (_HOST, _NONE)]
    found = {s.key for s in stacks if any(r.get("stack") == s.key for r in deciding)}
    # A process that launched the GPU work and is named after a serving stack (`trtllm-serve`, `vllm serve`)
    # says which server ran, whatever kernel library it borrowed (serving stacks share attention and cache
    # kernels): its stack wins over the other stacks' kernel names.
    served = {s.key for s in stacks if any(r.get("stack") == s.key and r.get("source") == _PROCESS for r in deciding)}
    stack = next((s for s in stacks if s.key in (served or found)), stacks.fallback)
    evidence = [_evidence(r) for r in deciding if r.get("stack") == stack.key]
    evidence = evidence or ["no kernel, NVTX or process name of a known framework"]
    evidence += [_on_host(r, stacks) for r in rows if r.get("source") == _HOST]
    also = [s.key for s in stacks if s.key in found and s.key != stack.key]
    return StackInfo(name=stack.key, label=stack.label, lineage=list(stack.lineage), evidence=evidence, also=also,
                     serving=stack.serving)
