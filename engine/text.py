"""Making untrusted text (kernel names, NVTX labels, API names) inert in each output format."""

from __future__ import annotations

import re

# C0/C1 control characters (ANSI escapes start with ESC), DEL, and Unicode bidi overrides/isolates.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
# GitHub turns bare http://, https:// and www. text into links (the autolink extension); an escaped ':' or '.'
# stops it and still displays the same text.
_MD_AUTOLINK = re.compile(r"(?i)\b(https?)(:)|\b(www)(\.)")


def strip_controls(text: object) -> str:
    return _CONTROL.sub("\ufffd", str(text)).replace("\n", " ").replace("\r", " ").replace("\t", " ")


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
    return _MD_AUTOLINK.sub(lambda m: f"{m.group(1) or m.group(3)}\\{m.group(2) or m.group(4)}", s)


def term(text: object, limit: int | None = None) -> str:
    s = strip_controls(text)
    return shorten(s, limit) if limit else s
