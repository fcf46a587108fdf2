"""What a PyTorch-profiler trace says about itself without being parsed whole: its head (the top-level keys before
traceEvents), and where needed the rest, read through in bounded memory (gzipped or not)."""

from __future__ import annotations

import codecs
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .kineto_file import GZIP_MAGIC, KINETO_CATEGORIES, KINETO_KEYS, array_end, NeedMore, parse_head
_HEAD_BYTES = 1 << 20   # Kineto writes its header keys before traceEvents (output_json.cpp, handleTraceStart): small
_TAIL_BYTES = 1 << 20   # the keys older Kineto wrote after the events (distributedInfo, traceName)
_READ = 1 << 20
# An event of GPU activity (libkineto/src/ActivityType.cpp, toString; the capitalised names of old Kineto): the
# categories kineto.py reads GPU work from.
_GPU_EVENT = re.compile(rb'"cat"\s*:\s*"(?:kernel|gpu_memcpy|gpu_memset|cuda_runtime|cuda_driver|Kernel|Memcpy|Memset|'
                        rb'Runtime)"')
_CATEGORY = re.compile(rb'"cat"\s*:\s*"([A-Za-z_]{1,40})"')
_TIMESTAMP = re.compile(rb'"ts"\s*:\s*(\d{1,20}(?:\.\d{1,9})?)[\s,}]')
_EPOCH_2001_NS = 10**18  # an absolute time stamp (Unix epoch) is beyond it, a relative one far below
_OVERLAP = 64           # a GPU event's "cat" split between two reads is still found


class _Decompressed:
    """The bytes of a trace, gunzipped when it is gzip, in reads of about _READ bytes (a gzip of a huge trace
    never inflates at once). A damaged or cut gzip just ends early: `complete` is then False, and what is wrong
    with it is for the diagnosis to say."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.complete = False

    def __iter__(self) -> Iterator[bytes]:
        first = self.fh.read(_READ)
        if not first.startswith(GZIP_MAGIC):
            while first:
                yield first
                first = self.fh.read(_READ)
            self.complete = True
            return
        inflate, data = zlib.decompressobj(16 + zlib.MAX_WBITS), first
        while True:
            try:
                out = inflate.decompress(data, _READ)
            except zlib.error:
                return
            data = inflate.unconsumed_tail
            if out:
                yield out
            if inflate.eof:
                data = inflate.unused_data or self.fh.read(_READ)
                if not data:
                    self.complete = True
                    return
                if not data.startswith(GZIP_MAGIC[:len(data)]):
                    return  # something after the gzip: not a trace as the profiler writes it
                inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next member of a multi-member gzip
            elif not data and len(out) < _READ:
                data = self.fh.read(_READ)
                if not data:
                    return  # the gzip ends before its end: cut short


@dataclass(frozen=True)
class TraceHead:
    """What a Chrome trace says about itself without being parsed whole."""

    header: dict[str, Any] = field(default_factory=dict)
    """Its top-level keys before traceEvents, and those after it when the whole trace was read."""
    events: bool = False
    """It is a JSON object with a traceEvents list."""
    kineto: bool = False
    """A top-level key or an event category (among the first events) that only the PyTorch profiler writes."""
    gpu: bool | None = None
    """GPU activity (a kernel, copy, memset or CUDA call) seen: True; the whole trace read without one: False;
    not looked for, or the trace could not be read to its end: None."""
    first_ts_us: float | None = None
    """The earliest time stamp (above 0) among the events of the head, in the trace's microseconds."""

    @property
    def start_ns(self) -> int | None:
        """When the capture started, about (its earliest event of the head), in Unix-epoch nanoseconds: the trace's
        time stamps count from its baseTimeNanoseconds since PyTorch 2.4, from the Unix epoch before that
        (pytorch/kineto, output_json.cpp, transToRelativeTime)."""
        if self.first_ts_us is None:
            return None
        base = self.header.get("baseTimeNanoseconds")
        if isinstance(base, int) and not isinstance(base, bool) and base > 0:
            return base + round(self.first_ts_us * 1000)
        absolute = round(self.first_ts_us * 1000)
        return absolute if absolute > _EPOCH_2001_NS else None

    @property
    def distributed(self) -> dict[str, Any]:
        info = self.header.get("distributedInfo")
        return info if isinstance(info, dict) else {}

    @property
    def rank(self) -> int | None:
        return _whole_number(self.distributed.get("rank"))

    @property
    def world_size(self) -> int | None:
        return _whole_number(self.distributed.get("world_size"))


def _whole_number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def read_trace_head(path: Path, *, whole: bool = False) -> TraceHead:
    """The head of the trace at `path` (gzipped or not): its top-level keys before traceEvents, and whether it is
    a PyTorch-profiler trace. With `whole`, a trace whose head records no rank in its distributedInfo is read to
    its end, in bounded memory, for the keys after its events and for GPU activity (a trace that records its rank
    is a worker of a distributed run: read no further). Never raises: what it cannot tell is left unknown."""
    try:
        with open(path, "rb") as fh:
            return _read_trace_head(_Decompressed(fh), whole)
    except (OSError, ValueError, RecursionError):
        return TraceHead()


def _read_trace_head(stream: _Decompressed, whole: bool) -> TraceHead:
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")  # one character per stray byte
    chunks = iter(stream)
    seen, text = b"", ""
    header: dict[str, Any] = {}
    start: int | None = None
    for chunk in chunks:
        seen += chunk
        text += decoder.decode(chunk)
        try:
            header, start = parse_head(text, final=False)
            break
        except NeedMore:
            if len(seen) > _HEAD_BYTES:
                return TraceHead()
        except ValueError:
            return TraceHead()
    else:
        try:
            header, start = parse_head(text + decoder.decode(b"", final=True), final=True)
        except (ValueError, NeedMore):
            return TraceHead()
    if start is None:
        return TraceHead(header=header)
    events = seen[len(text[:start].encode("utf-8", "surrogateescape")):]
    categories = {c.decode() for c in _CATEGORY.findall(events[:_HEAD_BYTES])}
    kineto = any(k in header for k in KINETO_KEYS) or bool(categories & KINETO_CATEGORIES)
    gpu: bool | None = True if _GPU_EVENT.search(events) else None
    first = min((t for t in map(float, _TIMESTAMP.findall(events[:_HEAD_BYTES])) if t > 0), default=None)
    if not whole or TraceHead(header).rank is not None:
        return TraceHead(header, True, kineto, gpu, first)
    tail = events[-(_TAIL_BYTES + _OVERLAP):]
    for chunk in chunks:
        if gpu is None and _GPU_EVENT.search(tail[-_OVERLAP:] + chunk):
            gpu = True
        tail = (tail + chunk)[-(_TAIL_BYTES + _OVERLAP):]
    if not stream.complete:
        return TraceHead(header, True, kineto, gpu, first)
    after = _keys_after_events(tail)
    return TraceHead({**header, **after}, True, kineto or any(k in after for k in KINETO_KEYS),
                     gpu if gpu is not None else False, first)


def _keys_after_events(tail: bytes) -> dict[str, Any]:
    """The top-level keys that follow the events in `tail`, the last bytes of a trace (kineto_file.array_end)."""
    skip = 0
    while skip < min(len(tail), 3) and tail[skip] & 0xC0 == 0x80:  # start on a character, not inside one
        skip += 1
    found = array_end(tail[skip:])
    return found[1] if found is not None else {}


def holds_trace(path: Path) -> bool:
    """Whether `path` (a regular file) begins like a PyTorch-profiler trace: a JSON object, plain or gzipped,
    with a traceEvents list and a top-level key or an early event category only Kineto writes."""
    head = read_trace_head(path)
    return head.events and head.kineto
