"""The PyTorch-profiler (Kineto) trace rows of tools/benchmark.py (--kineto): the same run as each large export,
written as the `*.pt.trace.json` Chrome trace torch.profiler would have written, diagnosed cold beside it.

For every size N the export WORKDIR/large-N.sqlite is rewritten as WORKDIR/large-N.pt.trace.json (and
large-N.pt.trace.json.gz with --kineto-gzip), kept with a sidecar large-N.pt.trace.json.meta that names the export
(kernels, bytes, modification time) and the writer, so a later run with the same --workdir reuses it. Then

  diagnose trace (cold)    `diagnose TRACE --format json -o ... -q --no-cache` in a fresh child, exactly as the
  diagnose trace.gz (cold) "diagnose (cold)" row runs on the export; "x export" is its wall time over that row's at
                           the same size, and its peak RSS is held to the export's RSS targets.

Two writers make the trace, with the same bytes (tests/test_benchmark.py compares them on a small export):

  convert  fixtures/_kineto.py `write_kineto`, the conversion the test fixtures use: it builds every event's text
           in memory and sorts them, about 2.8 kB of RSS and 30-70 us per kernel, which at 5-20 M kernels no longer
           fits a benchmark machine (--kineto-writer convert).
  stream   (the default) `write_large_trace` below: the same events, formatted with write_kineto's own helpers,
           but read from the export by one SQLite cursor per table in time order and merged, so memory stays flat.
           It covers what `generate_large` writes (kernels, CUDA runtime calls, NVTX ranges, synchronisations of
           one process) and refuses any other export.
"""

from __future__ import annotations

import gzip
import heapq
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

KINETO_COLD = "diagnose trace (cold)"
KINETO_COLD_GZ = "diagnose trace.gz (cold)"
KINETO_ROWS = (KINETO_COLD, KINETO_COLD_GZ)
WRITERS = ("stream", "convert")
# The trace targets: a cold run on the trace at most this many times the cold run on the export of the same run;
# its peak RSS within the export's limits (benchmark.TARGET_RSS_MB).
TARGET_X_EXPORT = 2.0
_WRITER_VERSION = 1  # bump when write_large_trace changes what it writes: cached traces are then written again


# ----------------------------------------------------------------------------------------------------------------
# The trace files


def trace_path(workdir: Path, kernels: int, gz: bool = False) -> Path:
    return workdir / f"large-{kernels}.pt.trace.json{'.gz' if gz else ''}"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".meta")


def _stamp(export: Path, kernels: int, writer: str) -> dict[str, Any]:
    st = export.stat()
    return {"kernels": kernels, "export_bytes": st.st_size, "export_mtime_ns": st.st_mtime_ns, "writer": writer,
            "writer_version": _WRITER_VERSION}


def ensure_trace(export: Path, kernels: int, out: Path, writer: str = "stream") -> float | None:
    """Reuse `out` when its sidecar says it was written from this very export (kernels, size, mtime) by this
    writer and the file still has the size it was written with; else write it (atomically, via a temp name).
    Returns the seconds writing took, None when the file was reused."""
    stamp = _stamp(export, kernels, writer)
    meta = _sidecar(out)
    try:
        known = json.loads(meta.read_text())
        if out.is_file() and known.get("bytes") == out.stat().st_size and \
                {k: known.get(k) for k in stamp} == stamp:
            return None
    except (OSError, ValueError):
        pass
    meta.unlink(missing_ok=True)
    scratch = out.with_name(out.name + ".partial")  # the trace names itself after its file (traceName)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    begin = time.perf_counter()
    if writer == "convert":
        from nsys_diagnose.fixtures._kineto import write_kineto

        write_kineto(export, scratch / out.name)
    else:
        write_large_trace(export, scratch / out.name)
    took = time.perf_counter() - begin
    (scratch / out.name).replace(out)
    scratch.rmdir()
    meta.write_text(json.dumps({**stamp, "bytes": out.stat().st_size, "written_s": round(took, 3)}) + "\n")
    return took


# ----------------------------------------------------------------------------------------------------------------
# The streaming writer

_SUPPORTED = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
              "NVTX_EVENTS"}
_UNSUPPORTED = ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_DRIVER",
                "CUPTI_ACTIVITY_KIND_OVERHEAD")
# write_kineto sorts its events by start, then by the order it made them in: NVTX ranges, API calls, kernels,
# copies, memsets, synchronisations, overhead, each in rowid order. The merge keeps that order with these ranks.
_ANNOTATION, _API, _KERNEL, _SYNC = 0, 1, 2, 5


def write_large_trace(export: Path, out: Path) -> None:
    """Write the export at `export` (as generate_large writes it) as the Kineto trace `out`, gzipped when its name
    ends in `.gz`: the bytes write_kineto writes, in bounded memory (each table is read by its own cursor in
    (start, rowid) order and the events are merged as they are written)."""
    from nsys_diagnose.fixtures import _kineto as kt

    con = kt._open(Path(export))
    try:
        x = kt._read_export(con)
        _check_supported(x)
        base, offset = kt._time_base(x, kt._earliest(x))
        tr = kt.Trace(x, base, offset)
        name = out.name.removesuffix(".gz")
        if out.name.endswith(".gz"):
            with open(out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                       compresslevel=6) as gz:
                sink = kt._TextSink(gz)
                _write_streaming(kt, tr, sink, name)
                sink.flush()
        else:
            with open(out, "w", encoding="utf-8", newline="", buffering=1 << 22) as fh:
                _write_streaming(kt, tr, fh, name)
    finally:
        con.close()


def _check_supported(x: Any) -> None:
    for table in _UNSUPPORTED:
        if table in x.tables and x.con.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone():
            raise ValueError(f"write_large_trace covers the exports generate_large writes; this one has "
                             f"{table} rows: convert it with write_kineto (--kineto-writer convert)")
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if t in x.tables and x.con.execute(f"SELECT count(DISTINCT globalTid >> 24) FROM {t}").fetchone()[0] > 1:
        raise ValueError("write_large_trace covers one process; convert this export with write_kineto")
    t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    if x.has(t, "syncType") and x.con.execute(f"SELECT 1 FROM {t} WHERE syncType = 2 LIMIT 1").fetchone():
        raise ValueError("write_large_trace does not drop stream-wait-events as Kineto does; use write_kineto")


def _rows(x: Any, sql: str) -> Iterator[tuple[Any, ...]]:
    """A cursor of its own over `sql`, so that several tables are read side by side."""
    yield from x.con.cursor().execute(sql)


def _write_streaming(kt: Any, tr: Any, fh: TextIO, trace_name: str) -> None:
    x = tr.x
    ranges = kt._nvtx_ranges(x)  # one per decode step: small
    by_thread: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for ext, (start, end, pid, tid, _text) in enumerate(ranges, start=1):
        by_thread.setdefault((pid, tid), []).append((start, end, ext))
    sweeps: dict[tuple[int, int], tuple[int, list[tuple[int, int, int]]]] = {}
    external: dict[tuple[int, int], int] = {}  # (pid, corr) -> External id, until its GPU event is written

    def annotations() -> Iterator[tuple[Any, ...]]:
        for ext, r in enumerate(ranges, start=1):
            yield r[0], _ANNOTATION, ext, r

    def streams() -> list[Iterator[tuple[Any, ...]]]:
        out = [annotations()]
        t = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if x.has(t, "start", "end", "globalTid", "nameId"):
            klass = x.col(t, "eventClass", "0")
            out.append((r[1], _API, r[0], r) for r in _rows(
                x, f'SELECT rowid, start, "end", globalTid, {x.col(t, "correlationId")}, nameId, {klass} '
                   f'FROM {t} ORDER BY start, rowid'))
        t = "CUPTI_ACTIVITY_KIND_KERNEL"
        if x.has(t, "start", "end", "deviceId", "streamId"):
            out.append((r[1], _KERNEL, r[0], r) for r in _rows(
                x, f'SELECT rowid, start, "end", deviceId, {x.col(t, "contextId", "0")}, streamId, '
                   f'{x.col(t, "correlationId")}, {x.col(t, "globalPid")}, '
                   f'coalesce({x.col(t, "demangledName")}, {x.col(t, "shortName")}), '
                   f'{x.col(t, "registersPerThread", "0")}, {x.col(t, "gridX", "1")}, {x.col(t, "gridY", "1")}, '
                   f'{x.col(t, "gridZ", "1")}, {x.col(t, "blockX", "1")}, {x.col(t, "blockY", "1")}, '
                   f'{x.col(t, "blockZ", "1")}, {x.col(t, "staticSharedMemory", "0")}, '
                   f'{x.col(t, "dynamicSharedMemory", "0")}, {x.col(t, "graphId", "0")}, '
                   f'{x.col(t, "graphNodeId", "0")} FROM {t} ORDER BY start, rowid'))
        t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        if x.has(t, "start", "end", "deviceId", "streamId", "syncType"):
            out.append((r[1], _SYNC, r[0], r) for r in _rows(
                x, f'SELECT rowid, start, "end", deviceId, {x.col(t, "contextId", "0")}, streamId, '
                   f'{x.col(t, "correlationId")}, {x.col(t, "globalPid")}, syncType, '
                   f'{x.col(t, "eventId", str(kt._UINT32_MAX))} FROM {t} ORDER BY start, rowid'))
        return out

    def ext_of(pid: int, corr: int | None, keep: bool = False) -> str:
        key = (pid, corr or 0)
        ext = external.get(key) if keep else external.pop(key, None)
        return f'"External id": {ext},' if ext else ""

    def link(pid: int, tid: int, corr: int, start: int) -> None:
        """kt._link_calls for one call: the innermost range open on its thread when it started."""
        ranges_here = by_thread.get((pid, tid))
        if not ranges_here:
            return
        i, open_ = sweeps.get((pid, tid), (0, []))
        while i < len(ranges_here) and ranges_here[i][0] <= start:
            open_.append(ranges_here[i])
            i += 1
        open_ = [r for r in open_ if r[1] >= start]
        sweeps[(pid, tid)] = (i, open_)
        if open_:
            external[(pid, corr)] = max(open_, key=lambda r: (r[0], -r[1]))[2]

    gpus = {g.id: g for g in x.gpus}
    launch: dict[tuple[Any, ...], str] = {}
    named_rows: set[tuple[int, int]] = set()
    last = 0
    fh.write(kt._header(tr, None, None))
    for start, rank, _seq, r in heapq.merge(*streams()):
        last = start
        if rank == _ANNOTATION:
            _, end, pid, tid, text = r
            ext = _seq
            tr.host_threads.add((pid, tid))
            args = f'"External id": {ext},"Record function id": 0, "Ev Idx": {ext - 1}'
            fh.write(kt._complete("user_annotation", tr.names.event(text), pid, tid, tr.t(start), end - start, args))
        elif rank == _API:
            _, _, end, gtid, corr, name_id, event_class = r
            name = kt._api_name(x.strings.get(name_id, ""))
            driver = event_class == 1
            if not (name in kt._TRACKED_DRIVER if driver else name not in kt._BLOCKLISTED_RUNTIME):
                continue
            pid, tid = kt._pid(gtid), kt._tid(gtid)
            if corr is not None:
                link(pid, tid, corr, start)
            tr.host_threads.add((pid, tid))
            c = tr.corr(pid, corr)
            cbid = kt._cbid(name, driver)
            text = kt._complete("cuda_driver" if driver else "cuda_runtime", tr.names.event(name), pid, tid,
                                tr.t(start), end - start, f'{ext_of(pid, corr, keep=True)}"cbid": {cbid}, '
                                                          f'"correlation": {c}')
            if c > 0:
                starts = kt._TRACKED_DRIVER.get(name, False) if driver else (
                    name in kt._FLOW_START_RUNTIME or cbid in kt._FLOW_START_RUNTIME_CBIDS)
                text += kt._flow(starts, c, pid, tid, tr.t(start))
            fh.write(text)
        elif rank == _KERNEL:
            (_, _, end, device, ctx, stream, corr, gpid, name_id, regs, gx, gy, gz, bx, by, bz, ssm, dsm, graph,
             node) = r
            key = (device, regs, gx, gy, gz, bx, by, bz, ssm, dsm)
            static = launch.get(key)
            if static is None:
                static = launch[key] = kt._launch_args(gpus.get(device), regs, (gx, gy, gz), (bx, by, bz), ssm,
                                                       dsm)
            pid = kt._pid(gpid)
            c = tr.corr(pid, corr)
            args = kt._kernel_args(ext_of(pid, corr), device, ctx, stream, c, static, graph, node)
            fh.write(kt._gpu_event(tr, "kernel", tr.names.event(x.strings.get(name_id, "")), device, stream, start,
                                   end, c, args).text)
        else:
            _, _, end, device, ctx, stream, corr, gpid, kind, event_id = r
            pid = kt._pid(gpid)
            text, sync_row = kt._sync_event(tr, ext_of(pid, corr), start, end, device, ctx, stream,
                                            tr.corr(pid, corr), kind, event_id)
            if sync_row is not None and sync_row[:2] not in named_rows:
                named_rows.add(sync_row[:2])
                fh.write(kt._sync_row_metadata(tr.t(start), *sync_row))
            fh.write(text)
    window_start = tr.t(0)
    for text in kt._resource_metadata(tr, window_start):
        fh.write(text)
    for text in kt._device_metadata(tr, window_start):
        fh.write(text)
    fh.write(kt._record_window_end(tr.t(max(x.duration_ns, last))))
    fh.write(f'\n  ],"traceName": {json.dumps(trace_name)} }}')


# ----------------------------------------------------------------------------------------------------------------
# Ratios, targets, report


def export_ratios(rows: list[Any], export_command: str) -> None:
    """x export (row.x_export) of every trace row: its wall time over the export's cold row at the same size."""
    cold = {r.kernels: r for r in rows if r.command == export_command and r.status == "ok" and r.wall_s}
    for r in rows:
        base = cold.get(r.kernels)
        if r.command in KINETO_ROWS and r.status == "ok" and r.wall_s is not None and base is not None:
            r.x_export = r.wall_s / base.wall_s


def target_lines(rows: list[Any], export_command: str, rss_limits: dict[int, int],
                 kernels: Any) -> list[str]:
    """Per size and trace row: its cold run against the export's (target <= TARGET_X_EXPORT x), and its peak RSS
    against the export's limit at that size where one is set."""
    lines = []
    for r in rows:
        if r.command not in KINETO_ROWS:
            continue
        at = f"{kernels(r.kernels)} kernels"
        if r.status != "ok":
            lines.append(f"- {at}: {r.command} did not succeed, no trace target can be checked")
            continue
        if r.x_export is not None:
            lines.append(f"- {at}: {r.command} {r.x_export:.2f}x the export's cold run ({r.file_mb:.0f} MB of "
                         f"trace; target <= {TARGET_X_EXPORT:g}x): {_mark(r.x_export <= TARGET_X_EXPORT)}")
        limit = rss_limits.get(r.kernels)
        if limit and r.peak_rss_mb is not None:
            lines.append(f"- {at}: {r.command} peak RSS {r.peak_rss_mb:.0f} MB (target <= {limit} MB, as the "
                         f"export's): {_mark(r.peak_rss_mb <= limit)}")
    return lines


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def comparison(rows: list[Any], export_command: str, kernels: Any) -> list[str]:
    """The trace rows beside the export's cold row of the same size, as a Markdown table."""
    pairs = [(r, next((e for e in rows if e.kernels == r.kernels and e.command == export_command), None))
             for r in rows if r.command in KINETO_ROWS]
    if not pairs:
        return []
    out = ["| kernels | trace | trace MB | export MB | export cold s | trace cold s | x export | export RSS MB "
           "| trace RSS MB | trace CPU % |", "|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r, e in pairs:
        out.append("| " + " | ".join([
            kernels(r.kernels), "gzip" if r.command == KINETO_COLD_GZ else "plain", _mb(r.file_mb),
            _mb(e.file_mb) if e else "", _fmt(e.wall_s if e else None, "{:.2f}"),
            _fmt(r.wall_s, "{:.2f}") if r.status == "ok" else r.status, _fmt(r.x_export, "{:.2f}"),
            _fmt(e.peak_rss_mb if e else None, "{:.0f}"), _fmt(r.peak_rss_mb, "{:.0f}"),
            _fmt(r.cpu_pct, "{:.0f}")]) + " |")
    return out


def _mb(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2f}"


def _fmt(value: float | None, fmt: str) -> str:
    return fmt.format(value) if value is not None else ""
