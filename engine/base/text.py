"""Text for people: untrusted text (kernel names, NVTX labels, API names) made inert in each output format, names
shortened so that those shown together stay distinct, counts with the right noun form, and fact columns in
words."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Sequence

# C0/C1 control characters (ANSI escapes start with ESC), DEL, and Unicode bidi overrides/isolates.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
# GitHub turns bare http://, https:// and www. text into links (the autolink extension); an escaped ':' or '.'
# stops it and still displays the same text.
_MD_AUTOLINK = re.compile(r"(?i)\b(https?)(:)|\b(www)(\.)")
# GitHub turns @name and @org/team into a mention and notifies them when the report is posted; a zero-width joiner
# after the '@' shows the same text and mentions no one (GitHub Docs, "Basic writing and formatting syntax",
# Mentioning people and teams: a mention is '@' followed by a username, after a space or a line's start).
_MD_MENTION = re.compile(r"(?<![\w@])@(?=[A-Za-z0-9])")


def did_you_mean(name: str, options: Iterable[str], otherwise: str = "") -> str:
    """The end of an "unknown NAME" sentence: "; did you mean 'X'?" for the closest option (difflib's ratio of at
    least 0.6), else `otherwise` (e.g. "; the filters are: ...")."""
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean {close[0]!r}?" if close else otherwise


def printable(text: str) -> str:
    """`text` encodable as UTF-8: a byte of a file name that is not valid UTF-8, which Python keeps in a str as a
    surrogate escape (https://peps.python.org/pep-0383/), is shown as a backslash escape (`na\\xffme.sqlite`), the
    way Python's own `backslashreplace` error handler shows it; any other lone surrogate as `\\udXXX`."""
    if is_utf8(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that no file name decoded into
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown_path(path: str | bytes | os.PathLike) -> str:
    """A path as reports, messages and DuckDB take it: always valid UTF-8 text (printable)."""
    return printable(os.fsdecode(path))


def is_utf8(text: str) -> bool:
    """Whether `text` (a file name, say) encodes as UTF-8, as DuckDB needs of the names it opens."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def strip_controls(text: object) -> str:
    return _CONTROL.sub("\ufffd", printable(str(text))).replace("\n", " ").replace("\r", " ").replace("\t", " ")


def shorten(text: object, limit: int = 90) -> str:
    """Shorten long (templated C++) names in the middle so both the head and the tail stay readable."""
    s = str(text)
    if len(s) <= limit:
        return s
    head = (limit - 1) * 2 // 3
    tail = limit - 1 - head
    return s[:head] + "…" + s[-tail:]


def md_inline(text: object, limit: int | None = 90) -> str:
    """Text safe inside a Markdown paragraph or table cell: no markup, no HTML, no line breaks."""
    s = strip_controls(text)
    if limit:
        s = shorten(s, limit)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = _MD_MENTION.sub("@\u200d", s)
    return _MD_AUTOLINK.sub(lambda m: f"{m.group(1) or m.group(3)}\\{m.group(2) or m.group(4)}", s)


def term(text: object, limit: int | None = None) -> str:
    s = strip_controls(text)
    return shorten(s, limit) if limit else s


# ------------------------------------------------------------------------------------------------------------
# Names shown together stay distinct
# ------------------------------------------------------------------------------------------------------------
_OPENERS, _CLOSERS = "<([", ">)]"
_PART_WIDTH = 40  # a distinguishing template argument is widened to its enclosing argument up to this length


def _argument_span(name: str, i: int) -> tuple[int, int]:
    """The innermost template or function argument of `name` around index `i`: the text between the nearest
    ',', '<', '(' or '[' before it and the nearest ',', '>', ')' or ']' after it at the same nesting depth."""
    start, depth = i, 0
    while start > 0:
        ch = name[start - 1]
        if ch in _CLOSERS:
            depth += 1
        elif ch in _OPENERS:
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            break
        start -= 1
    end, depth = i, 0
    while end < len(name):
        ch = name[end]
        if ch in _OPENERS:
            depth += 1
        elif ch in _CLOSERS:
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            break
        end += 1
    return start, end


def _enclosing_opener(name: str, start: int) -> int | None:
    """Index of the unmatched '<', '(' or '[' left of `start` (the bracket the argument at `start` is inside)."""
    depth = 0
    for k in range(start - 1, -1, -1):
        if name[k] in _CLOSERS:
            depth += 1
        elif name[k] in _OPENERS:
            if depth == 0:
                return k
            depth -= 1
    return None


def _differing_argument(name: str, other: str) -> tuple[int, int]:
    """(start, end) of the argument of `name` that holds its first difference from `other`, widened to the
    enclosing template argument while that stays short ('at::native::FillFunctor<float>' rather than 'float'),
    or cut to the words around the difference when the argument is long."""
    i = next((k for k, (a, b) in enumerate(zip(name, other)) if a != b), min(len(name), len(other)))
    if i >= len(name):  # `other` merely goes on: the last argument of `name` is what it has alone
        i = len(name) - 1
    if name[i] in _CLOSERS:
        i = max(i - 1, 0)
    elif name[i] in _OPENERS or name[i] == ",":
        i = min(i + 1, len(name) - 1)
    start, end = _argument_span(name, i)
    while (opener := _enclosing_opener(name, start)) is not None and name[opener] == "<" and opener > 0:
        wider = _argument_span(name, opener - 1)
        if len(name[wider[0]:wider[1]].strip()) > _PART_WIDTH:
            break
        start, end = wider
    if end - start > _PART_WIDTH:  # one long identifier: the words around the difference
        lo, hi = max(start, i - _PART_WIDTH // 3), min(end, i + _PART_WIDTH * 2 // 3)
        while lo > start and name[lo - 1] not in "_:":
            lo -= 1
        while hi < end and name[hi] not in "_:":
            hi += 1
        start, end = lo, hi
    while start < end and name[start] in " _:":
        start += 1
    while end > start and name[end - 1] in " _:":
        end -= 1
    return (start, end) if end > start else (i, i + 1)


def _with_parts(name: str, spans: Iterable[tuple[int, int]], limit: int) -> str:
    """`name` shortened to about `limit` characters keeping the text of `spans` between its head and its tail
    (overlapping pieces merged): 'void at::native::vectorized_el…FillFunctor<c10::Half>…Array<char *, 1>)'."""
    kept = sorted(spans)
    room = max(limit - sum(e - s for s, e in kept) - len(kept) - 1, 12)
    head, tail = room * 2 // 3, room - room * 2 // 3
    pieces: list[list[int]] = []
    for start, end in [(0, head), *kept, (len(name) - tail, len(name))]:
        if pieces and start <= pieces[-1][1] + 1:
            pieces[-1][1] = max(pieces[-1][1], end)
        else:
            pieces.append([start, end])
    return "…".join(name[a:b] for a, b in pieces)


def distinct_short_names(names: Iterable[object], limit: int = 90) -> dict[object, str]:
    """Each distinct name -> its text as shown, shortened to about `limit` characters, such that different names
    never look the same: where several shorten to one text (templated C++ kernels that differ in a template
    argument the shortening cuts out), each keeps the argument that tells it apart; a '#2', '#3' suffix remains
    for names that still coincide. Keyed by the names as given (a missing name, None, reads 'None')."""
    given = list(dict.fromkeys(names))
    unique = list(dict.fromkeys(str(n) for n in given))
    shown = {n: shorten(n, limit) for n in unique}
    parts: dict[str, set[tuple[int, int]]] = {n: set() for n in unique}
    for _ in range(3):  # a kept argument can make a name look like one of another group: look again
        groups: dict[str, list[str]] = {}
        for n in unique:
            groups.setdefault(shown[n], []).append(n)
        alike = [members for members in groups.values() if len(members) > 1]
        if not alike:
            break
        for members in alike:
            for n in members:
                parts[n] |= {_differing_argument(n, o) for o in members if o != n}
        for members in alike:
            for n in members:
                shown[n] = _with_parts(n, parts[n], limit)
    counts: dict[str, int] = {}
    for n in unique:  # the last resort: number the names that still coincide, in the order given
        counts[shown[n]] = counts.get(shown[n], 0) + 1
        if counts[shown[n]] > 1:
            shown[n] = f"{shown[n]} #{counts[shown[n]]}"
    return {n: shown[str(n)] for n in given}


_SEPARATORS = "_-. "


def distinguishing_parts(names: Sequence[str]) -> list[str]:
    """The shortest part of each name that tells it apart from the others: the prefix and the suffix all names
    share are left out, cut at a separator (_ - . or space) so that no word is split: 'run_rank0.sqlite',
    'run_rank1.sqlite' -> 'rank0', 'rank1'. The names unchanged when that leaves any two alike or one empty."""
    if len(names) < 2:
        return list(names)
    prefix = os.path.commonprefix(list(names))
    cut = max((k + 1 for k, ch in enumerate(prefix) if ch in _SEPARATORS), default=0)
    rests = [n[cut:] for n in names]
    suffix = os.path.commonprefix([r[::-1] for r in rests])[::-1]
    keep = min((k for k, ch in enumerate(suffix) if ch in _SEPARATORS), default=len(suffix))
    drop = len(suffix) - keep
    parts = [r[: len(r) - drop] if drop else r for r in rests]
    if any(not p.strip(_SEPARATORS) for p in parts) or len(set(parts)) < len(parts):
        return list(names)
    return [p.strip(_SEPARATORS) for p in parts]


# ------------------------------------------------------------------------------------------------------------
# Counts with nouns, and fact columns in words
# ------------------------------------------------------------------------------------------------------------
def plural(count: object, noun: str, plural_form: str | None = None) -> str:
    """'1 gap', '2 gaps', '1,200 kernels', '1 copy' / '3 copies' (plural_form for irregular nouns). The count is
    formatted with thousands separators; a count that is not a number (None) reads 'n/a' with the plural."""
    many = plural_form or (noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou"
                           else noun + "es" if noun.endswith(("s", "sh", "ch", "x")) else noun + "s")
    if count is None or isinstance(count, bool):
        return f"n/a {many}"
    try:
        value = float(count)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"{count} {many}"
    shown = f"{int(value):,}" if value.is_integer() else f"{value:,.1f}"
    return f"{shown} {noun if value == 1 else many}"


# Words of column names as people write them.
_WORDS = {"gpu": "GPU", "gpus": "GPUs", "sm": "SM", "sms": "SMs", "pcie": "PCIe", "uvm": "unified memory",
          "nvtx": "NVTX", "api": "API", "dram": "DRAM", "nccl": "NCCL", "nvlink": "NVLink", "cpu": "CPU",
          "os": "OS", "p50": "median", "p90": "90th-percentile", "p99": "99th-percentile", "comm": "communication",
          "memcpy": "copy", "htod": "host-to-device", "dtoh": "device-to-host", "rx": "receive", "tx": "transmit",
          "avg": "mean", "imbalance": "compute imbalance", "pct": "", "ns": "", "us": "", "ms": ""}
# Column-name endings and how the label reads without them ({} the other words, {s} their plural).
_ENDINGS: tuple[tuple[str, str], ...] = (
    ("_fraction", "{} share"), ("_share", "{} share"), ("_ratio", "{} ratio"), ("_per_s", "{} per second"),
    ("_bytes", "{} volume"), ("_count", "number of {s}"), ("_calls", "{} calls"), ("_ns", "{} time"),
    ("_pct", "{}"),
)
_TIME_WORDS = ("time", "period", "window", "duration", "latency", "gap", "wait")
_UNIT_NOTE = re.compile(r"\s*\((?:ns|µs|us|ms|s|bytes|%|0-1|0–1|count|[\w.]*_\w*)\)")
_IDENTIFIER = re.compile(r"\b[a-z][a-z0-9]*_\w+\b")
_FORMULA = re.compile(r"\b[a-z][a-z0-9]*_\w+\b|\s/\s|^\(")
_VAGUE = re.compile(r"(?i)^(all of them|true (for|when|if)|the same)\b|\b(those|them|these)\b")
_LABEL_WIDTH = 60


def _top_level(text: str, stops: str) -> int:
    """Index of the first character of `stops` outside parentheses in `text` ('.' only where a sentence ends),
    or -1."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch in "([") - (ch in ")]")
        if ch in stops and depth <= 0 and (ch != "." or text[i + 1:i + 2] in ("", " ")):
            return i
    return -1


def _humanised(column: str) -> str:
    """A column name in words: 'host_idle_fraction' -> 'host idle share', 'is_straggler' -> 'straggler',
    'p50_ns' -> 'median time', 'long_copy_count' -> 'number of long copies'."""
    name = column.removeprefix("is_")
    pattern = "{}"
    for ending, form in _ENDINGS:
        if name.endswith(ending) and len(name) > len(ending):
            name, pattern = name[: -len(ending)], form
            break
    words = [w for w in (_WORDS.get(w, w) for w in name.split("_")) if w]
    if pattern == "{} time" and words and words[-1] in _TIME_WORDS:
        pattern = "{}"
    text = " ".join(words)
    many = " ".join(words[:-1] + [plural(2, words[-1]).split(" ", 1)[1]]) if words else text
    return pattern.format(text, s=many).strip()


def _formula_words(text: str) -> str:
    """'sample_period_ns / median_kernel_ns' -> 'sample period / median kernel time'."""
    return _IDENTIFIER.sub(lambda m: _humanised(m.group()), text)


def _label_candidates(doc: str) -> list[str]:
    text = doc.strip()
    for stops in (";", "."):
        cut = _top_level(text, stops)
        text = text[:cut] if cut >= 0 else text
    colon = _top_level(text, ":")
    if colon < 0:
        return [_formula_words(text) if _FORMULA.search(text) else text]
    head, tail = text[:colon].strip(), text[colon + 1:].strip()
    return [tail, _formula_words(head)] if _FORMULA.search(head) else [head]


def _fits(text: str, column: str) -> bool:
    return (bool(text) and len(text) <= _LABEL_WIDTH and not _VAGUE.search(text) and not _IDENTIFIER.search(text)
            and text.lower() != column.replace("_", " ").lower())


def column_label(column: str, doc: str | None = None) -> str:
    """A fact column in words, for evidence rows: its documentation (the `-- @column` line of the fact's SQL file)
    cut to its first clause, without unit notes such as '(ns)' or '(0-1)'; a formula in it reads in words
    ('sample_period_ns / median_kernel_ns' -> 'Sample period / median kernel time'), and the explanation after a
    formula is preferred ('compute_busy_ns / window_ns: share of the window ...'). Where the doc is missing,
    refers back to another column ('Bytes in those copies') or is too long, the column name in words."""
    for candidate in _label_candidates(doc or ""):
        text = _UNIT_NOTE.sub("", candidate).strip().rstrip(".,;")
        if len(text) > _LABEL_WIDTH and " / " not in text:  # a formula keeps its parentheses
            text = re.sub(r"\s*\([^()]*\)", "", text).strip()
        if _fits(text, column):
            return text[:1].upper() + text[1:]
    text = _humanised(column)
    return text[:1].upper() + text[1:]
