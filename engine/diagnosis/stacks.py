"""Which software stack a profile comes from, decided from the rows of the software_stack fact.

The most specific stack with evidence wins (engine/vocabulary.py STACKS lists them in that order): a vLLM
server also runs PyTorch kernels, and is vLLM. A profile with no recognised framework is plain CUDA, so it
never gets framework- or serving-specific advice."""

from __future__ import annotations

from ..facts.compute import FactSet
from ..reports.model import StackInfo
from ..units import fmt_ratio
from ..vocabulary import STACKS

_SOURCES = {"kernels": "kernels", "nvtx": "NVTX ranges", "process": "processes"}


def _evidence(row: dict) -> str:
    what = _SOURCES.get(row.get("source"), str(row.get("source")))
    share = f", {fmt_ratio(row['time_share'], 0)} of kernel time" if row.get("time_share") is not None else ""
    example = str(row.get("example") or "")
    example = example if len(example) <= 80 else example[:79] + "…"
    return f"{row.get('matches', 0):,} {what}{share}, e.g. {example}"


def detect_stack(facts: FactSet) -> StackInfo:
    rows = facts.rows("software_stack") if "software_stack" in facts.results else []
    found = {s.key for s in STACKS if any(r.get("stack") == s.key for r in rows)}
    stack = next((s for s in STACKS if s.key in found), STACKS[-1])
    evidence = [_evidence(r) for r in rows if r.get("stack") == stack.key]
    also = [s.key for s in STACKS if s.key in found and s.key != stack.key]
    return StackInfo(name=stack.key, label=stack.label, lineage=list(stack.lineage),
                     evidence=evidence or ["no kernel, NVTX or process name of a known framework"], also=also)
