"""The inputs of tools/benchmark.py: the large synthetic exports (generated once, reused from the work directory)
and their PyTorch-profiler traces, read once so that every command finds them in the OS page cache."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import benchmark_kineto as kineto
from benchmark_measure import Size


def export_path(workdir: Path, kernels: int, phased: bool = False) -> Path:
    return workdir / f"large-{kernels}{'-phased' if phased else ''}.sqlite"


def kernel_count(path: Path) -> int | None:
    """Rows in the kernel table, or None when `path` is no readable export."""
    try:
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return None


def ensure_export(workdir: Path, kernels: int, phased: bool = False) -> Size:
    """Reuse WORKDIR/large-N[-phased].sqlite when it holds N kernels, else generate it (atomically, via a temp
    name)."""
    path = export_path(workdir, kernels, phased)
    generated: float | None = None
    if not (path.is_file() and kernel_count(path) == kernels):
        from nsys_diagnose.fixtures.generator import generate_large

        partial = path.with_name(path.name + ".partial")
        partial.unlink(missing_ok=True)
        begin = time.perf_counter()
        generate_large(partial, kernels=kernels, phased=phased)
        generated = time.perf_counter() - begin
        partial.replace(path)
    warm_page_cache(path)
    return Size(kernels=kernels, path=str(path), file_mb=path.stat().st_size / 1e6, generated_s=generated)


def ensure_trace(workdir: Path, export: Size, gz: bool, writer: str) -> Size:
    """The PyTorch-profiler trace of `export`'s run (tools/benchmark_kineto.py), reused when its sidecar matches."""
    path = kineto.trace_path(workdir, export.kernels, gz)
    written = kineto.ensure_trace(Path(export.path), export.kernels, path, writer)
    warm_page_cache(path)
    return Size(kernels=export.kernels, path=str(path), file_mb=path.stat().st_size / 1e6, generated_s=written)


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass
