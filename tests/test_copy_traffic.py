"""Copies are counted by what they move (fact _copy_stalls, column traffic): host-device copies (HtoD, DtoH and
the CUDA-array kinds HtoA, AtoH) are the PCIe volume, split by the host side's memory kind into pinned and
pageable; device-to-device copies, peer copies, unified-memory migrations and memsets are counted apart. A copy
stalls the GPU only for the part of it with no kernel running, so large pinned copies on a side stream hidden
under kernels are not PCIe-bound. Small synthetic exports built with the fixture generator's export writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_diagnose.fixtures import _kernels as K
from nsys_diagnose.fixtures import generator as gen
from nsys_diagnose.fixtures._export import ERA_2024, H100_SXM, Proc

from conftest import analysis, slow_but

# copyKind and memory-kind codes (CUPTI CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind)
HTOD, DTOH, HTOA, DTOD, HTOH, PTOP, UVM_HTOD = 1, 2, 3, 8, 9, 10, 11
PAGEABLE, PINNED, DEVICE, UNKNOWN = 0, 1, 2, 7
MIB = 1 << 20
US = 1_000
T0 = 1_000_000_000
SIDE_STREAM = 13


def _export(path: Path, build) -> Path:
    x = gen._new_export(ERA_2024, H100_SXM, 1, nvtx=False, command=("python3", ["copies.py"]))
    p = Proc(48213, "python3", extra_streams=(SIDE_STREAM,))
    x.procs.append(p)
    build(x, p)
    gen._finish(x, path)
    return path


def _kernels(x, p, start: int, n: int, dur: int, gap: int) -> int:
    """n kernels on the default stream, `gap` apart; returns when the last one ends."""
    t = start
    for _ in range(n):
        corr = x.runtime(p, "cudaLaunchKernel_v7000", t - 8 * US, t - 2 * US)
        x.kernel(p, K.MUL, t, t + dur, corr)
        t += dur + gap
    return t - gap


def _copy(x, p, start: int, dur: int, nbytes: int, kind: int, src: int, dst: int, *, stream: int | None = None):
    corr = 0 if kind == UVM_HTOD else x.runtime(p, "cudaMemcpyAsync_v3020", start - 8 * US, start - 2 * US)
    x.memcpy(p, start, start + dur, corr, nbytes, kind, src, dst, stream=stream)


def _memset(x, p, start: int, dur: int, nbytes: int) -> None:
    corr = x.runtime(p, "cudaMemsetAsync_v3020", start - 8 * US, start - 2 * US)
    x.add("CUPTI_ACTIVITY_KIND_MEMSET", start=start, end=start + dur, deviceId=p.device, contextId=p.context,
          streamId=p.stream, correlationId=corr, globalPid=p.gpid, value=0, bytes=nbytes, memKind=DEVICE)


# One copy of every traffic, one after the other after the kernels, so each one's stall time is its duration:
# (copyKind, srcKind, dstKind, bytes, duration).
MIXED = [
    (HTOD, PINNED, DEVICE, 8 * MIB, 400 * US),
    (DTOH, DEVICE, PINNED, 4 * MIB, 200 * US),
    (HTOD, PAGEABLE, DEVICE, 2 * MIB, 600 * US),
    (HTOA, PINNED, 3, 1 * MIB, 50 * US),            # host to a CUDA array: crosses PCIe too
    (DTOD, DEVICE, DEVICE, 64 * MIB, 30 * US),
    (PTOP, DEVICE, DEVICE, 16 * MIB, 300 * US),
    (UVM_HTOD, UNKNOWN, UNKNOWN, 2 * MIB, 100 * US),
    (HTOH, PINNED, PINNED, 1 * MIB, 20 * US),
]
MEMSETS = [(1 * MIB, 10 * US)] * 3


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    def build(x, p):
        t = _kernels(x, p, T0, 60, 50 * US, 50 * US) + 100 * US
        for kind, src, dst, nbytes, dur in MIXED:
            _copy(x, p, t, dur, nbytes, kind, src, dst)
            t += dur + 20 * US
        for nbytes, dur in MEMSETS:
            _memset(x, p, t, dur, nbytes)
            t += dur + 20 * US
    return analysis(_export(tmp_path_factory.mktemp("copies") / "mixed.sqlite", build))


def test_pcie_volume_counts_host_device_copies_only_split_into_pinned_and_pageable(mixed):
    facts, _ = mixed
    (row,) = facts.rows("transfer_overview")
    assert row["pcie_count"] == 4                       # HtoD pinned, DtoH pinned, HtoD pageable, HtoA pinned
    assert row["pcie_bytes"] == 15 * MIB                # not the DtoD, PtoP, UVM and HtoH bytes, nor memsets
    assert row["pcie_ns"] == (400 + 200 + 600 + 50) * US
    assert (row["pinned_count"], row["pinned_bytes"], row["pinned_ns"]) == (3, 13 * MIB, 650 * US)
    assert (row["pageable_count"], row["pageable_bytes"], row["pageable_ns"]) == (1, 2 * MIB, 600 * US)
    assert row["pcie_stall_ns"] == row["pcie_ns"]       # no kernel ran beside them
    assert row["pcie_stall_fraction"] == pytest.approx(row["pcie_ns"] / row["window_ns"])
    assert row["long_copy_count"] == 3                  # the host-device copies over 100 µs; not the 300 µs PtoP
    assert row["long_copy_stall_ns"] == 1_200 * US
    assert row["main_direction"] == "HtoD"
    assert row["main_direction_gbps"] == pytest.approx(10 * MIB / (1_000 * US))


def test_device_peer_memset_and_uvm_traffic_are_counted_apart(mixed):
    facts, _ = mixed
    (row,) = facts.rows("transfer_overview")
    assert (row["dtod_count"], row["dtod_bytes"], row["dtod_ns"]) == (1, 64 * MIB, 30 * US)
    assert (row["peer_count"], row["peer_bytes"], row["peer_ns"]) == (1, 16 * MIB, 300 * US)
    assert (row["memset_count"], row["memset_bytes"], row["memset_ns"]) == (3, 3 * MIB, 30 * US)
    assert (row["uvm_count"], row["uvm_bytes"], row["uvm_ns"]) == (1, 2 * MIB, 100 * US)
    # stall_ns is every copy and memset, whatever it moves
    assert row["stall_ns"] == sum(d for *_, d in MIXED) + sum(d for _, d in MEMSETS)


def test_copy_summary_names_the_traffic_of_each_row(mixed):
    facts, _ = mixed
    traffic = {(r["op"], r["copy_kind"], r["src_mem"]): (r["traffic"], r["count"])
               for r in facts.rows("copy_summary")}
    assert traffic == {
        ("memcpy", "HtoD", "pinned"): ("host_device", 1),
        ("memcpy", "DtoH", "device"): ("host_device", 1),
        ("memcpy", "HtoD", "pageable"): ("host_device", 1),
        ("memcpy", "HtoA", "pinned"): ("host_device", 1),
        ("memcpy", "DtoD", "device"): ("device", 1),
        ("memcpy", "PtoP", "device"): ("peer", 1),
        ("memcpy", "UVM HtoD", "unknown"): ("uvm", 1),
        ("memcpy", "HtoH", "pinned"): ("other", 1),
        ("memset", "memset", "device"): ("memset", 3),
    }


def test_summary_and_key_metrics_say_what_they_count(mixed):
    _, report = mixed
    m = report.metrics
    assert (m["pcie_count"], m["pcie_bytes"], m["pcie_ns"]) == (4, 15 * MIB, 1_250 * US)
    assert (m["pinned_bytes"], m["pageable_bytes"]) == (13 * MIB, 2 * MIB)
    assert (m["dtod_count"], m["dtod_bytes"], m["peer_count"], m["peer_bytes"]) == (1, 64 * MIB, 1, 16 * MIB)
    assert (m["memset_count"], m["memset_bytes"]) == (3, 3 * MIB)
    assert m["memcpy_bytes"] == sum(b for *_, b, _ in MIXED)  # every copy, whatever it moves; memsets apart
    shown = {k.key: k for k in report.key_metrics}
    assert shown["pcie_bytes"].label == "PCIe volume" and shown["pcie_bytes"].value == 15 * MIB
    assert shown["pageable_bytes"].value == 2 * MIB and shown["pinned_bytes"].value == 13 * MIB
    assert shown["dtod_bytes"].value == 64 * MIB and shown["peer_bytes"].value == 16 * MIB
    assert shown["memset_count"].label == "Memsets" and shown["memset_count"].value == 3


def _large_pinned_copies(hidden: bool):
    """100 ms of back-to-back kernels and ten 256 MiB pinned HtoD copies of 5 ms on a side stream, either
    during the kernels (hidden under them) or after them (the GPU has nothing else to do)."""
    def build(x, p):
        end = _kernels(x, p, T0, 200, 500 * US, 0)
        first = T0 + 5_000 * US if hidden else end + 1_000 * US
        for i in range(10):
            _copy(x, p, first + i * 9_000 * US, 5_000 * US, 256 * MIB, HTOD, PINNED, DEVICE, stream=SIDE_STREAM)
    return build


@pytest.mark.parametrize("hidden", slow_but([True, False], True), ids=["hidden-under-kernels", "after-the-kernels"])
def test_pinned_async_copies_hidden_under_kernels_are_not_pcie_bound(tmp_path, hidden):
    facts, report = analysis(_export(tmp_path / "side_stream.sqlite", _large_pinned_copies(hidden)))
    (row,) = facts.rows("transfer_overview")
    assert (row["pcie_count"], row["pinned_bytes"], row["long_copy_count"]) == (10, 2_560 * MIB, 10)
    fired = [f for f in report.findings if f.rule == "pcie-bound"]
    if hidden:
        assert row["pcie_stall_ns"] == 0 and row["pcie_stall_fraction"] == 0
        assert not fired
    else:
        assert row["pcie_stall_ns"] == row["pcie_ns"] == 50_000 * US
        assert row["pcie_stall_fraction"] > 0.2
        assert [f.subject for f in fired] == ["GPU 0"]
        assert "10 host-device copies (2.5 GiB pinned, 0 B pageable" in fired[0].message
    assert not [f for f in report.findings if f.rule == "pageable-memory-copies"]
