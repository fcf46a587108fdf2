"""Throughput: decode steps from NVTX ranges, and tokens/s when the user says how many tokens were generated."""

from __future__ import annotations

from typing import Any

from ..reports.model import Throughput


def throughput(duration_ns: float | None, phases: list[dict[str, Any]], tokens: int | None) -> Throughput | None:
    decode = next((p for p in phases if p.get("phase") == "decode" and (p.get("range_count") or 0) > 0), None)
    steps = int(decode["range_count"]) if decode else None
    step_ns = decode["range_ns"] / steps if decode and decode.get("range_ns") else None
    if steps is None and not tokens:
        return None
    per_s = tokens / duration_ns * 1e9 if tokens and duration_ns else None
    return Throughput(tokens=tokens, duration_ns=duration_ns, tokens_per_s=per_s,
                      time_per_token_ns=duration_ns / tokens if tokens and duration_ns else None,
                      decode_steps=steps, step_time_ns=step_ns,
                      steps_per_s=1e9 / step_ns if step_ns else None)
