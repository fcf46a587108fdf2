"""Throughput: the decode step time from the steps (fact `steps`), and tokens/s when the user says how many tokens
were generated. The decode step's median period bounds the time per output token from below: every request in a
decode step waits at least one step for its next token (docs/measures.md "Steps and phases")."""

from __future__ import annotations

from typing import Any

from ..base.errors import InputError
from ..model.measures import Throughput


def decode_row(steps: list[dict[str, Any]], tokens: int | None) -> dict[str, Any] | None:
    """The row of the `steps` fact whose steps generated the tokens: the decode phase's, found by their NVTX text or
    their shape. Without any phase, an unclassified step may be a prefill, so the steps count as decode only when
    --tokens says the run generated tokens and no step looked like a prefill (fact _steps found none, so the
    steps are alike): then every step is a decode step, the 'all' row."""
    decode = next((s for s in steps if s.get("phase") == "decode" and (s.get("step_count") or 0) > 0), None)
    if decode is None and tokens and [s.get("phase") for s in steps] == ["all"]:
        decode = steps[0] if (steps[0].get("step_count") or 0) > 0 else None
    return decode


def check_tokens(steps: list[dict[str, Any]], tokens: int | None, name: str = "") -> None:
    """Refuse (InputError, exit 2) a --tokens N below the decode steps found: a decode step emits at least one token
    per sequence in it (docs/measures.md "Steps and phases"), so the captured window alone holds at least that many
    tokens, and tokens/s from N would contradict the time per output token beside it."""
    decode = decode_row(steps, tokens)
    count = int(decode["step_count"]) if decode else 0
    if tokens and tokens < count:
        where = f" of {name}" if name else ""
        raise InputError(f"--tokens {tokens:,} is fewer than the {count:,} decode steps{where} captured, and every "
                         f"decode step emits at least one token per sequence: give the output tokens of the "
                         f"profiled run, at least {count:,}.")


def throughput(duration_ns: float | None, steps: list[dict[str, Any]], tokens: int | None) -> Throughput | None:
    """`steps`: the rows of the `steps` fact (decode_row picks the decode steps). The time per output token is per
    request, as `vllm bench serve` measures TPOT: every request in a decode step gets one token per step, so it is
    the median decode step, which the tokens of a step (the batch) share; tokens/s counts every request's tokens.
    Only without decode steps is it duration / tokens, the run taken as one stream of tokens."""
    decode = decode_row(steps, tokens)
    count = int(decode["step_count"]) if decode else None
    step_ns = decode.get("median_step_ns") if decode else None
    if count is None and not tokens:
        return None
    per_s = tokens / duration_ns * 1e9 if tokens and duration_ns else None
    per_token = step_ns if tokens and step_ns else duration_ns / tokens if tokens and duration_ns else None
    return Throughput(tokens=tokens, duration_ns=duration_ns, tokens_per_s=per_s, time_per_token_ns=per_token,
                      decode_steps=count, step_time_ns=step_ns,
                      steps_per_s=1e9 / step_ns if step_ns else None,
                      inferred=decode.get("phase_source") in ("inferred", None) if decode else None)
