"""Small PyTorch-profiler (Kineto) traces written by hand for the tests, in the layout of pytorch/kineto's
ChromeTraceLogger (libkineto/src/output_json.cpp): a header (`schemaVersion`, `deviceProperties`, metadata such as
`distributedInfo`, `displayTimeUnit`, `baseTimeNanoseconds`), `traceEvents`, then trailing keys (`traceName`)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

DEVICE = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045395456, "computeMajor": 9,
          "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
          "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132}
PID = 4711
# One record_function range around an aten op that launches one kernel: the smallest trace with GPU work.
ANNOTATION = {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": PID, "tid": PID, "ts": 1000.0,
              "dur": 80.0, "args": {"External id": 1, "Record function id": 0}}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": PID, "tid": PID, "ts": 1005.0, "dur": 40.0,
      "args": {"External id": 2, "Record function id": 0}}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": PID, "ts": 1010.0,
          "dur": 6.5, "args": {"External id": 2, "cbid": 211, "correlation": 7}}
KERNEL = {"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float>(float const*, float*)", "pid": 0, "tid": 7,
          "ts": 1020.0, "dur": 30.25, "args": {"External id": 2, "queued": 0, "device": 0, "context": 1, "stream": 7,
                                               "correlation": 7, "registers per thread": 32, "shared memory": 0,
                                               "grid": [132, 1, 1], "block": [128, 1, 1]}}
FLOW = {"ph": "s", "id": 7, "pid": PID, "tid": PID, "ts": 1010.0, "cat": "ac2g", "name": "ac2g"}
TINY = [ANNOTATION, OP, LAUNCH, FLOW, KERNEL]


def trace(events: list[dict[str, Any]], *, distributed: dict[str, Any] | None = None, after: bool = False,
          **header: Any) -> str:
    """A Kineto trace as text: its header keys, `traceEvents`, then `traceName` (and `distributedInfo` when
    `after`, where Kineto before 2024 wrote it)."""
    head: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [DEVICE], **header}
    if distributed is not None and not after:
        head["distributedInfo"] = distributed
    head.setdefault("displayTimeUnit", "ms")
    head.setdefault("baseTimeNanoseconds", 1759300000000000000)  # 2025-10-01 06:26:40 UTC
    text = "{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items())
    text += '  "traceEvents": [\n' + ",\n".join("  " + json.dumps(e) for e in events) + "\n  ],\n"
    if distributed is not None and after:
        text += f'  "distributedInfo": {json.dumps(distributed)},\n'
    return text + '  "traceName": "trace.pt.trace.json"\n}\n'


def write(path: Path, content: str | bytes) -> Path:
    data = content.encode("utf-8") if isinstance(content, str) else content
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
