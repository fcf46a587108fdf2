"""The measures a report shows beside its findings: throughput, where each GPU's window went, the operation-class
breakdown, and the start-up the capture opens with."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .document import Model


class Throughput(Model):
    """Tokens/s and time per output token (with --tokens N), and the decode steps (fact `steps`)."""

    tokens: int | None = Field(None, description="Output tokens generated in the profiled run (--tokens).")
    duration_ns: float | None = Field(None, description="Profiled duration the rates are computed over (ns).")
    tokens_per_s: float | None = Field(None, description="tokens / duration.")
    time_per_token_ns: float | None = Field(None, description="Time per output token of a request (ns): the median "
                                                            "decode-step period, each request getting one token per "
                                                            "step; duration / tokens without decode steps.")
    decode_steps: int | None = Field(None, description="Decode steps, when steps were found to be decode by their "
                                                       "NVTX text or their shape, or, with --tokens, every step of a "
                                                       "run whose steps have no phase and none looks like a prefill.")
    step_time_ns: float | None = Field(None, description="Median decode-step period, start to the next step's start "
                                                         "(ns): a lower bound on the time per output token.")
    steps_per_s: float | None = Field(None, description="Decode steps per second at the median step period.")
    inferred: bool | None = Field(None, description="True when the decode steps were inferred from their shape, "
                                                    "not named by NVTX text.")


class WindowShare(Model):
    """One part of a GPU's window: kernels running, only copies running, or idle time of one cause."""

    key: str = Field(description="kernels, copies, or an idle cause: sync, allocation, uvm, launch, host, gpu-side, "
                                 "other (docs/measures.md \"Where the idle time goes\").")
    label: str
    short: str = Field(description="Short label, after \"idle:\" for the idle causes (terminal).")
    ns: int = Field(ge=0, description="Time of the window in this part (ns).")
    share: float = Field(ge=0, le=1, description="ns / the window.")
    idle: bool = Field(description="True for the idle causes.")


class StartUp(Model):
    """The one-off start-up the capture opens with (the `startup` fact): model load, then warm-up."""

    found_by: Literal["nvtx", "shape"] = Field(description="nvtx: start-up ranges (init/load, warm-up/compile/graph "
                                                           "capture); shape: a burst of host-to-device copies before "
                                                           "the first kernel.")
    startup_ns: int = Field(ge=0, description="From the first CUDA call to the end of the start-up (ns).")
    startup_fraction: float = Field(ge=0, le=1, description="startup_ns / the traced span.")
    load_ns: int = Field(ge=0, description="Length of the model load (ns).")
    load_bytes: int = Field(ge=0, description="Bytes copied host-to-device during the load.")
    load_copy_count: int = Field(ge=0, description="Host-to-device copies during the load.")
    load_gbps: float | None = Field(None, description="Their effective bandwidth (GB/s).")
    pageable_share: float | None = Field(None, ge=0, le=1, description="Share of those bytes read from pageable "
                                                                       "host memory.")
    alloc_count: int = Field(ge=0, description="Device-memory allocation calls during the start-up.")
    warmup_ns: int = Field(ge=0, description="Length of the warm-up ranges (ns); 0 without any.")
    warmup_kernel_count: int = Field(ge=0, description="Kernels and graph replays run during the warm-up.")
    graph_capture_count: int = Field(ge=0, description="CUDA-graph captures and instantiations during the start-up.")
    steady_ns: int = Field(ge=0, description="The steady window after the start-up (ns).")
    judged_after: bool = Field(description="True when the rules judged only the steady window; false when the "
                                           "capture is only start-up and was judged whole.")
    line: str = Field(description="One sentence for people: what the start-up did and what the verdict judges.")


class GpuWindow(Model):
    """Where one GPU's window went; the parts add up to the window."""

    device_id: int
    window_ns: int
    parts: list[WindowShare]


class ClassShare(Model):
    """One operation class of a GPU's time (the operation_classes fact)."""

    op_class: str = Field(description="Operation class (rules/vocabulary/operation_classes.yaml), memcpy, memset or "
                                      "other.")
    share: float = Field(ge=0, le=1, description="Share of the GPU's time in kernels, copies and memsets.")
    total_ns: int = Field(ge=0, description="Sum of the class's durations (ns).")
    op_count: int = Field(ge=0, description="Kernels (copies, memsets) of the class.")
    mean_ns: float | None = Field(None, description="Mean duration (ns).")
    top_kernels: list[dict[str, Any]] = Field(default_factory=list, description="Its heaviest kernels: {name, "
                                                                                "calls, total_ns, share}.")


class OperationBreakdown(Model):
    """Where one GPU's time went by operation, over the run or one phase; the classes in descending time."""

    phase: str | None = Field(None, description="The inference phase, or null for the whole run (judged whole).")
    device_id: int
    total_ns: int = Field(ge=0, description="The GPU's time in kernels, copies and memsets (sum of durations, ns).")
    classes: list[ClassShare]
    line: str = Field(description="One line for people: 'decode: attention 61 % · gemm 22 % · norm 6 %'.")
