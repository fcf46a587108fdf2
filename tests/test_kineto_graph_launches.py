"""A kernel of a PyTorch-profiler trace is a CUDA-graph node when the call that launched it is a graph launch, as the
graph_launch family of rules/vocabulary/api_names.yaml names it (the versioned runtime and driver entry points
included); a kernel launched any other way is no graph node."""

from __future__ import annotations

import pytest

from nsys_diagnose.reading.export import open_export

from kineto_traces import FLOW, KERNEL, LAUNCH, OP, ANNOTATION, trace, write


@pytest.mark.parametrize("launcher, cat, graph_node", [
    ("cudaGraphLaunch", "cuda_runtime", 3),
    ("cudaGraphLaunch_v10000", "cuda_runtime", 3),
    ("cuGraphLaunch", "cuda_driver", 3),
    ("cudaLaunchKernel", "cuda_runtime", None),
])
def test_a_kernel_is_a_graph_node_only_when_a_graph_launch_launched_it(tmp_path, launcher, cat, graph_node):
    launch = {**LAUNCH, "name": launcher, "cat": cat}
    kernel = {**KERNEL, "args": {**KERNEL["args"], "graph id": 1, "graph node id": 3}}
    path = write(tmp_path / "trace.pt.trace.json", trace([ANNOTATION, OP, launch, FLOW, kernel]))
    with open_export(path, cache=False) as export:
        assert export.query("SELECT graph_node_id FROM kernels") == [(graph_node,)]

