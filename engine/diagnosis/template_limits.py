"""The limits of a rule-template render (engine/diagnosis/templating.py): the time budget of the render in
progress on this thread, checked by a trace function, and the sizes of what a template builds (operators,
%-formatting, string methods, range()), checked before they are allocated where the size is known in advance.
Every limit passed raises TemplateLimitError, or RenderTimeout for the time."""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from types import FrameType
from typing import Any


# Wall-clock time one render may take. Bundled messages render in well under a millisecond.
RENDER_SECONDS = 2.0
# Wall-clock time all the renders of one rule may take together (a rule fires once per matching row).
RULE_RENDER_SECONDS = 10.0
# Characters of a rendered message, label or remediation step: a paragraph, not a document.
MAX_MESSAGE_CHARS = 16 * 1024
# Characters of a string, or items of a list/tuple/dict (counted through nesting), a template may build.
MAX_VALUE_SIZE = 64 * 1024
# Characters and items of all the values one render builds together (bounds memory at tens of MB).
MAX_BUILT_TOTAL = 1024 * 1024
# Numbers one range() call may yield, and all the range() calls of one render together.
MAX_RANGE = 10_000
MAX_RANGE_TOTAL = 100_000
# Bits of an integer an operator may compute (4096 bits: 1,234 decimal digits).
MAX_INT_BITS = 4096
# Widths, precisions and lengths given to filters or %-formatting: none is wider than a whole message.
MAX_WIDTH = MAX_MESSAGE_CHARS

_TEMPLATE_FILE = "<template>"  # the file name Jinja gives the code of a template compiled from a string
_DICT_VIEWS: tuple[type[Collection[Any]], ...] = (type({}.keys()), type({}.values()), type({}.items()))
_CONTAINERS: tuple[type[Collection[Any]], ...] = (list, tuple, set, frozenset, dict, *_DICT_VIEWS)


class TemplateLimitError(Exception):
    """A template went past one of the limits above; the message says which, in plain words."""


class RenderTimeout(BaseException):
    """Raised by the trace function. A BaseException, so that no `except Exception` in the code a template
    calls can swallow it (after raising, the trace function is no longer installed)."""

    def __init__(self, seconds: float, whole_rule: bool):
        super().__init__(seconds)
        self.seconds = seconds
        self.whole_rule = whole_rule


@dataclass
class RenderBudget:
    deadline: float
    whole_rule: bool  # the deadline is the rule's (RULE_RENDER_SECONDS), not this render's
    built: int = 0
    ranged: int = 0

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise RenderTimeout(RULE_RENDER_SECONDS if self.whole_rule else RENDER_SECONDS, self.whole_rule)

    def trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        # Called for every Python call during the render, and for every line of template code: the loops of
        # a template are lines of its compiled code, calls cover macros and the filters Jinja writes in Python.
        self.check_time()
        return self.trace if frame.f_code.co_filename == _TEMPLATE_FILE else None


_local = threading.local()


def current_budget() -> RenderBudget | None:
    return getattr(_local, "budget", None)


def size_of(value: Any, limit: int = MAX_VALUE_SIZE) -> int:
    """Characters of a string, items of a container plus the sizes of its items (a list holding the same
    string twice counts it twice, as printing it would); 0 for other values. Stops counting past `limit`."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, range):
            total += _range_len(item)
        elif isinstance(item, _CONTAINERS):
            total += len(item)
            if total <= limit:
                stack.extend(item.items() if isinstance(item, dict) else item)
    return total


def _range_len(r: range) -> int:
    try:
        return len(r)
    except OverflowError:  # more than sys.maxsize numbers
        return sys.maxsize


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {str: "a string", list: "a list", tuple: "a list", dict: "a dict"}
    return kinds.get(type(value), "a value")


def check_size(size: int, what: str = "a value") -> None:
    if size > MAX_VALUE_SIZE:
        unit = "characters" if what == "a string" else "characters or items"
        raise TemplateLimitError(f"would build {what} of {size:,} {unit} "
                                 f"(a template may build at most {MAX_VALUE_SIZE:,})")


def built(value: Any) -> Any:
    """Check a value a template has just built and count it against the render's total; returns it."""
    size = size_of(value)
    check_size(size, _kind(value))
    budget = current_budget()
    if budget is None:
        return value
    budget.check_time()  # renders without a trace function (see _needs_trace) are timed here, per operation
    if size:
        budget.built += size
        if budget.built > MAX_BUILT_TOTAL:
            raise TemplateLimitError(f"builds more than {MAX_BUILT_TOTAL:,} characters or items in all")
    return value


def to_text(value: Any, conversion: Callable[[Any], str] = str) -> str:
    """str() of a value, refused when the value is too large to print."""
    if isinstance(value, str) and conversion is str:
        return value
    check_size(size_of(value), _kind(value))
    return built(conversion(value))


_PRINTF = re.compile(r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?(?P<conv>.)",
                     re.S)


def check_width(value: Any, what: str) -> int:
    if isinstance(value, (int, float)) and abs(value) > MAX_WIDTH:
        raise TemplateLimitError(f"uses {what} of {value:,} (at most {MAX_WIDTH:,})")
    return int(value) if isinstance(value, (int, float)) else 0


def _printf_size(fmt: str, args: Any) -> int:
    """An upper bound of the length of `fmt % args`; -1 when Python will refuse the arguments anyway."""
    positional = list(args) if isinstance(args, tuple) else [args]
    total = len(fmt)
    try:
        for m in _PRINTF.finditer(fmt):
            if m["conv"] == "%":
                continue
            width = check_width(positional.pop(0) if m["width"] == "*" else int(m["width"] or 0),
                                 "a format width")
            precision = m["prec"]
            precision = check_width(positional.pop(0) if precision == "*" else int(precision or 0),
                                     "a format precision")
            arg = args[m["key"]] if m["key"] is not None else positional.pop(0)
            if m["conv"] in "sra":
                convert: dict[str, Callable[[Any], str]] = {"s": str, "r": repr, "a": ascii}
                text = to_text(arg, convert[m["conv"]])
                size = min(len(text), precision) if m["prec"] is not None else len(text)
            elif isinstance(arg, int) and not isinstance(arg, bool):
                size = arg.bit_length() // 3 + 2 + precision  # decimal digits, sign, and any precision
            else:
                size = 330 + precision  # the longest float (1.8e308 with %f is 309 digits)
            total += max(abs(width), size)
    except (IndexError, KeyError, TypeError, ValueError):
        return -1
    return total


def check_printf(fmt: str, args: Any) -> None:
    check_size(_printf_size(fmt, args), "a string")


def check_replace(s: Any, old: Any, new: Any, count: Any = -1) -> None:
    if not (isinstance(s, str) and isinstance(old, str) and isinstance(new, str) and isinstance(count, int)):
        return
    hits = len(s) + 1 if old == "" else s.count(old)
    if count >= 0:
        hits = min(hits, count)
    check_size(len(s) + hits * (len(new) - len(old)), "a string")


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (str, list, tuple))


def check_binop(op: str, left: Any, right: Any) -> None:
    if op == "*":
        for seq, times in ((left, right), (right, left)):
            if _is_sequence(seq) and isinstance(times, int):
                check_size(size_of(seq) * max(times, 0), _kind(seq))
        if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise TemplateLimitError(f"would compute a number of more than {MAX_INT_BITS:,} bits")
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            bits = (abs(left).bit_length() - 1) * right + 1
            if bits > MAX_INT_BITS:
                raise TemplateLimitError(f"would compute a number of about {bits:,} bits (at most {MAX_INT_BITS:,})")
    elif op == "+":
        if _is_sequence(left) and _is_sequence(right):
            check_size(size_of(left) + size_of(right), _kind(left))
    elif op == "%" and isinstance(left, str):
        check_printf(left, right)


def bounded_range(*args: Any) -> range:
    numbers = range(*args)
    count = _range_len(numbers)
    if count > MAX_RANGE:
        raise TemplateLimitError(f"calls range() for {count:,} numbers (at most {MAX_RANGE:,} per call)")
    budget = current_budget()
    if budget is not None:
        budget.ranged += count
        if budget.ranged > MAX_RANGE_TOTAL:
            raise TemplateLimitError(f"calls range() for more than {MAX_RANGE_TOTAL:,} numbers in all")
    return numbers


class bounded_render:  # noqa: N801 - used as a context manager
    """Install the budget (and the trace function when needed) on this thread for one render, then restore
    what was there: a debugger's or coverage's trace function comes back after the render."""

    def __init__(self, budget: RenderBudget, traced: bool):
        self.budget = budget
        self.traced = traced

    def __enter__(self) -> None:
        self.previous_budget = current_budget()
        _local.budget = self.budget
        if self.traced:
            self.previous_trace = sys.gettrace()
            sys.settrace(self.budget.trace)

    def __exit__(self, *exc: object) -> None:
        if self.traced:
            sys.settrace(self.previous_trace)
        _local.budget = self.previous_budget
