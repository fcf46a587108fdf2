"""A PyTorch-profiler (Kineto) Chrome trace as a file: recognised by its content, and split, in one streaming
pass, into its header (every top-level key but the events) and files holding only the events of its traceEvents
array, as JSON arrays, which DuckDB then reads element by element (engine/reading/kineto.py). No event becomes a
Python object, so a trace of gigabytes is read in bounded memory.

The trace is one JSON object (pytorch/kineto, libkineto/src/output_json.cpp, ChromeTraceLogger):
`{"schemaVersion": 1, "deviceProperties": [...], <metadata such as "distributedInfo">, "displayTimeUnit": "ms",
"baseTimeNanoseconds": N, "traceEvents": [ ... ], <more metadata>, "traceName": "..."}`, written plain or gzipped
(`export_chrome_trace("x.json.gz")`, PyTorch's tensorboard_trace_handler(use_gzip=True)). The split does not rely on
that layout: keys may come in any order and the JSON may be compact or indented.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..base.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 22                 # bytes per read and write while copying the events
_HEAD_LIMIT = 256 << 20          # the keys before traceEvents are small (device properties, metadata)
_TAIL_WINDOW = 16 << 20          # what follows the events: metadata lists, traceName
_SNIFF_BYTES = 1 << 16
PART_BYTES = 64 << 20            # events per part of a large trace, which DuckDB parses side by side
_WS = " \t\r\n"

# Event categories Kineto writes (libkineto/src/ActivityType.cpp, toString), the old capitalised ones of PyTorch
# 1.8-1.9 included: a Chrome trace none of whose events has one was written by another tool.
KINETO_CATEGORIES = frozenset({
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel", "cuda_runtime",
    "cuda_driver", "cuda_sync", "python_function", "external_correlation", "cpu_instant_event", "overhead",
    "cuda_profiler_range", "Kernel", "Memcpy", "Memset", "Runtime", "Operator", "Python",
})
# Top-level keys only Kineto writes beside traceEvents.
KINETO_KEYS = ("schemaVersion", "deviceProperties", "baseTimeNanoseconds", "distributedInfo")


def _gzip_hint(path: Path) -> str:
    return "gzip-compressed " if is_gzip(path) else ""


def is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == GZIP_MAGIC
    except OSError:
        return False


def _open_stream(path: Path, fd: int | None = None) -> BinaryIO:
    """The decompressed bytes of the trace; from the descriptor `fd` when given (the file that was checked)."""
    raw: BinaryIO
    if fd is not None:
        raw = os.fdopen(os.dup(fd), "rb")
        raw.seek(0)
    else:
        raw = open(path, "rb")
    head = raw.read(2)
    raw.seek(0)
    if head == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def sniff(path: Path) -> str | None:
    """'trace' when `path` holds a JSON object (plain or gzipped): a Chrome trace, perhaps Kineto's, which
    split_trace then checks; 'json-array' for a Chrome trace in array form (no Kineto writes that); None otherwise."""
    try:
        with _open_stream(path) as stream:
            head = stream.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return "trace" if is_gzip(path) else None  # a damaged gzip: split_trace says what is wrong with it
    text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if text.startswith(b"{"):
        return "trace"
    if text.startswith(b"[") and b'"ph"' in text:
        return "json-array"
    return None


@dataclass
class SplitTrace:
    header: dict[str, Any] = field(default_factory=dict)
    # The events as JSON arrays, in order, each of whole events (_Parts): one file, or several for a large trace
    # with one event per line group, which DuckDB then parses side by side. Empty when the trace has no traceEvents.
    parts: list[Path] = field(default_factory=list)
    event_bytes: int = 0
    separators: list[bytes] = field(default_factory=list)  # what was cut out between two parts

    def merged(self) -> Path:
        """The parts joined back into the first one, the separators put back, as it was copied: the events and what
        follows them, for _finish_events to close; for a trace cut among the keys that follow its events."""
        first = self.parts[0]
        with open(first, "r+b") as sink:
            sink.seek(-1, os.SEEK_END)
            sink.truncate()  # the `]` that closed the first part
            last = len(self.parts) - 1
            for number, (part, separator) in enumerate(zip(self.parts[1:], self.separators), 1):
                sink.write(separator)
                with open(part, "rb") as source:
                    source.read(1)  # its `[`
                    while chunk := source.read(_CHUNK):
                        sink.write(chunk)
                if number < last:  # the `]` that closed it (the last part is not closed yet)
                    sink.seek(-1, os.SEEK_END)
                    sink.truncate()
                part.unlink()
        self.parts, self.separators = [first], []
        return first

    def remove(self) -> None:
        for part in self.parts:
            part.unlink(missing_ok=True)


class _Reader:
    """The decompressed trace read in chunks, with the byte offset of what has been consumed."""

    def __init__(self, path: Path, stream: BinaryIO):
        self.path = path
        self.stream = stream
        self.eof = False

    def read(self) -> bytes:
        if self.eof:
            return b""
        try:
            chunk = self.stream.read(_CHUNK)
        except EOFError:
            raise InputError(f"{self.path} is a {_gzip_hint(self.path)}file that ends too early: it was cut short "
                             f"while being written or copied; export the trace again.") from None
        except (OSError, zlib.error) as exc:
            if isinstance(exc, OSError) and exc.errno is not None:
                raise
            raise InputError(f"{self.path} is not a valid gzip file ({exc}); give the trace as the profiler wrote "
                             f"it (.json or .json.gz).") from None
        if not chunk:
            self.eof = True
        return chunk


def _utf8_error(path: Path) -> InputError:
    return InputError(f"{path} is not valid UTF-8 text, so it is not JSON as the PyTorch profiler writes it; export "
                      f"the trace again.")


def _malformed(path: Path, what: str) -> InputError:
    return InputError(f"{path} is not a well-formed Chrome trace ({what}); export the trace again with the "
                      f"PyTorch profiler (`prof.export_chrome_trace(\"run.pt.trace.json.gz\")`).")


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


class NeedMore(Exception):
    pass


def parse_head(text: str, final: bool) -> tuple[dict[str, Any], int | None]:
    """The top-level keys before `traceEvents` and the character index just after its `[`; (keys, None) when the
    object ends without it. Raises NeedMore when `text` stops inside the head, ValueError when it is not JSON."""
    decoder = json.JSONDecoder()
    header: dict[str, Any] = {}
    i = _skip_ws(text, 0)
    if text[i:i + 1] == "\ufeff":
        i = _skip_ws(text, i + 1)
    if i >= len(text):
        raise NeedMore if not final else ValueError("the file is empty")
    if text[i] != "{":
        raise ValueError("it is not a JSON object")
    i += 1
    while True:
        i = _skip_ws(text, i)
        if i >= len(text):
            raise NeedMore if not final else ValueError("the object is not closed")
        if text[i] == "}":
            return header, None
        try:
            key, i = decoder.raw_decode(text, i)
            i = _skip_ws(text, i)
            if text[i:i + 1] != ":":
                raise ValueError("a key without a value")
            i = _skip_ws(text, i + 1)
            if key == "traceEvents" and text[i:i + 1] == "[":
                return header, i + 1
            value, i = decoder.raw_decode(text, i)
        except RecursionError:
            raise ValueError(f"its {key!r} key nests deeper than JSON readers allow") from None
        except (json.JSONDecodeError, IndexError) as exc:
            if not final:
                raise NeedMore from None
            raise ValueError(str(exc)) from None
        if not isinstance(key, str):
            raise ValueError("a key that is not a string")
        header[key] = value
        i = _skip_ws(text, i)
        if i >= len(text):
            raise NeedMore if not final else ValueError("the object is not closed")
        if text[i] == ",":
            i += 1
        elif text[i] != "}":
            raise ValueError(f"unexpected {text[i]!r} between two keys")


_NON_WS = re.compile(r"[^ \t\r\n]")


def _next(text: str, i: int) -> int:
    """The index of the first character from `i` on that is no JSON whitespace; len(text) when there is none."""
    found = _NON_WS.search(text, i)
    return found.start() if found else len(text)


def _rest_of_object(text: str, i: int) -> dict[str, Any] | None:
    """The keys of `text[i:]` when it is the rest of the top-level object after a value: `}` alone, or
    `, "k": v ... }`, then nothing; None when it is not (the value before `i` was not the events array)."""
    decoder = json.JSONDecoder()
    keys: dict[str, Any] = {}
    i = _next(text, i)
    try:
        while i < len(text) and text[i] == ",":
            i = _next(text, i + 1)
            if text[i:i + 1] != '"':
                return None
            key, i = decoder.raw_decode(text, i)
            i = _next(text, i)
            if text[i:i + 1] != ":":
                return None
            value, i = decoder.raw_decode(text, _next(text, i + 1))
            keys[key] = value
            i = _next(text, i)
    except (json.JSONDecodeError, RecursionError):
        return None
    if text[i:i + 1] != "}" or _next(text, i + 1) != len(text):
        return None
    return keys


def array_end(tail: bytes) -> tuple[int, dict[str, Any]] | None:
    """Where the events array ends in `tail` (the last bytes of the trace, starting on a character) and the keys
    after it: the first `]` that follows the end of an event (`}`) or the opening `[` and after which the rest of
    the file is the rest of the top-level object. A `]` inside an event is followed by more of that event, which
    is no such rest, and is told apart within that event's length."""
    text = tail.decode("utf-8", "surrogateescape")  # one character per byte that is no UTF-8: offsets stay exact
    start = 0
    while (pos := text.find("]", start)) >= 0:
        start = pos + 1
        prev = pos - 1
        while prev >= 0 and text[prev] in _WS:
            prev -= 1
        if prev >= 0 and text[prev] not in "}[":
            continue
        keys = _rest_of_object(text, pos + 1)
        if keys is not None:
            return len(text[:pos].encode("utf-8", "surrogateescape")), keys
    return None


def split_trace(path: Path, directory: Path, fd: int | None = None,
                part_bytes: int | None = PART_BYTES) -> SplitTrace:
    """Read the trace once: its header keys, and its events copied into `directory` as JSON arrays (private to
    this user; SplitTrace.parts), in parts of about `part_bytes` (None: one part). InputError, in one sentence,
    when it is not a complete Chrome trace in object form."""
    out = SplitTrace()
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        stream = _open_stream(path, fd)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc}).") from None
    with stream:
        reader = _Reader(path, stream)
        head = b""
        text = ""
        start: int | None = None
        while True:
            chunk = reader.read()
            head += chunk
            try:
                text += decoder.decode(chunk, final=reader.eof)
            except UnicodeDecodeError:
                raise _utf8_error(path) from None
            try:
                out.header, start = parse_head(text, final=reader.eof)
                break
            except NeedMore:
                if len(head) > _HEAD_LIMIT:
                    raise _malformed(path, f"no traceEvents list within its first {_HEAD_LIMIT >> 20} MB") from None
            except ValueError as exc:
                raise _malformed(path, str(exc)) from None
        if start is None:
            return out
        offset = len(text[:start].encode("utf-8"))
        try:
            _copy_events(reader, head[offset:], directory, out, part_bytes)
            try:
                tail = _finish_events(path, out.parts[-1])
            except InputError:
                if len(out.parts) == 1:
                    raise
                tail = _finish_events(path, out.merged())  # a cut after the events, among the keys that follow
        except OSError as exc:
            out.remove()
            full = exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
            why = "is full" if full else f"cannot hold it ({exc.strerror})"
            raise InputError(f"the events of {path} are copied into a private temporary directory to be read, "
                             f"but {directory.parent} {why}; free some space or point TMPDIR at a larger "
                             f"disk.") from None
        except BaseException:
            out.remove()
            raise
        out.header.update(tail)
    return out


# Where one event ends and the next begins on a new line, as Kineto (and any indented JSON) writes them: a raw
# line break is never inside a JSON string, so a cut there falls between two values of some list. That it is the
# events list, and not one inside an event, DuckDB checks: a part cut inside an event is no array of objects.
_BETWEEN_EVENTS = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")


def _new_part(directory: Path, number: int) -> tuple[Path, BinaryIO]:
    path = directory / f"events-{number:04d}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    sink = os.fdopen(fd, "wb")
    sink.write(b"[")
    return path, sink


def _copy_events(reader: _Reader, first: bytes, directory: Path, out: SplitTrace, part_bytes: int | None) -> None:
    """Copy everything after the `[` of traceEvents into `directory`, in parts of about `part_bytes` cut between
    two events, each opened with a `[` and all but the last closed with a `]`. Where the array ends is found
    afterwards, in the last bytes of the last part (_finish_events)."""
    path, sink = _new_part(directory, 0)
    out.parts.append(path)
    size = 0
    try:
        chunk = first or reader.read()
        while chunk:
            out.event_bytes += len(chunk)
            while part_bytes is not None and size + len(chunk) > part_bytes:
                cut = _BETWEEN_EVENTS.search(chunk, max(0, part_bytes - size))
                if cut is None:
                    break
                end = cut.start() + 1  # after the `}` that ends the event
                sink.write(chunk[:end])
                sink.write(b"]")
                sink.close()
                out.separators.append(chunk[end:cut.end() - 1])
                path, sink = _new_part(directory, len(out.parts))
                out.parts.append(path)
                chunk = chunk[cut.end() - 1:]
                size = 0
            sink.write(chunk)
            size += len(chunk)
            chunk = reader.read()
    finally:
        sink.close()


def _finish_events(path: Path, target: Path) -> dict[str, Any]:
    """Cut `target` just after the last event and close the array; returns the top-level keys after it."""
    size = target.stat().st_size
    window = min(size - 1, _TAIL_WINDOW)
    with open(target, "r+b") as fh:
        fh.seek(size - window)
        tail = fh.read(window)
        skip = 0
        while skip < min(len(tail), 3) and tail[skip] & 0xC0 == 0x80:  # start on a character, not inside one
            skip += 1
        window -= skip
        tail = tail[skip:]
        found = array_end(tail)
        if found is None:
            raise InputError(f"{path} ends before its traceEvents list and its top-level object are closed: the "
                             f"file was cut short (was the profiler still writing it, or the copy interrupted?); "
                             f"export the trace again.")
        end, keys = found
        fh.seek(size - window + end)
        fh.truncate()
        fh.write(b"]")
    return keys
