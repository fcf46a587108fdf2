"""Throughput: the decode step time from the steps (fact `steps`), and tokens/s when the user says how many tokens
were generated. The decode step's median period bounds the time per output token from below: every request in a
decode step waits at least one step for its next token (docs/measures.md "Steps and phases")."""

from __future__ import annotations

from typing import Any

from ..model import Throughput


def throughput(duration_ns: float | None, steps: list[dict[str, Any]], tokens: int | None) -> Throughput | None:
    """`steps`: the rows of the `steps` fact. Decode numbers only where steps were found to be decode, by their NVTX
    text or their shape: an unclassified step may be a prefill."""
    decode = next((s for s in steps if s.get("phase") == "decode" and (s.get("step_count") or 0) > 0), None)
    count = int(decode["step_count"]) if decode else None
    step_ns = decode.get("median_step_ns") if decode else None
    if count is None and not tokens:
        return None
    per_s = tokens / duration_ns * 1e9 if tokens and duration_ns else None
    return Throughput(tokens=tokens, duration_ns=duration_ns, tokens_per_s=per_s,
                      time_per_token_ns=duration_ns / tokens if tokens and duration_ns else None,
                      decode_steps=count, step_time_ns=step_ns,
                      steps_per_s=1e9 / step_ns if step_ns else None,
                      inferred=decode.get("phase_source") == "inferred" if decode else None)
