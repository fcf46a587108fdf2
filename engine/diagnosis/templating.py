"""Bounded Jinja for the `message`, `label` and `remediation` templates of rules (bundled and team).

Team rule packs are semi-trusted, so a template must not be able to exhaust memory, run forever or crash the
program. Jinja's sandbox (https://jinja.palletsprojects.com/en/stable/sandbox/) stops attribute escapes; its
documentation warns that a small template can still render a huge output or use much CPU and memory, and that
templates can raise errors while rendering, and leaves both to the application. This module adds them:

- time: RENDER_SECONDS per render, checked by a trace function of the rendering thread only (multi-rank runs
  render in worker threads, where signals cannot be used), installed for the render and removed after it;
- memory: every value a template builds (operators, filters, calls, `~`, list/dict literals, block
  buffers) is sized *before* it is allocated where the size is known in advance, and checked after
  otherwise; no single value may exceed MAX_VALUE_SIZE, all of them together MAX_BUILT_TOTAL, and the
  rendered text MAX_MESSAGE_CHARS;
- surface: an allowlist of attributes, filters and globals: nothing a message does not need.

Every failure surfaces as TemplateFailure, whose `reason` says in plain words what went wrong.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from jinja2 import StrictUndefined, TemplateRuntimeError, TemplateSyntaxError, UndefinedError, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.environment import Template
from jinja2.filters import FILTERS, make_attrgetter
from jinja2.runtime import LoopContext
from jinja2.sandbox import SandboxedEnvironment, SecurityError
from jinja2.utils import _PassArg, missing

from ..base.text import did_you_mean, plural
from ..base.units import fmt_bytes, fmt_duration, fmt_number, fmt_ratio

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

# The only attributes a template may read besides the keys of a dict: what a message needs.
DICT_METHODS = frozenset({"get", "items", "keys", "values"})
STR_METHODS = frozenset({"upper", "lower", "title", "capitalize", "strip", "lstrip", "rstrip",
                         "startswith", "endswith", "split", "replace"})
LOOP_ATTRIBUTES = frozenset({"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth",
                             "depth0", "previtem", "nextitem", "cycle", "changed"})

# Jinja's built-in filters kept for templates; all others (tojson, pprint, wordwrap, indent, urlize, random,
# batch, slice, ...) are unknown filters. Every filter is wrapped by _bounded_filter.
JINJA_FILTERS = ("abs", "capitalize", "center", "count", "d", "default", "dictsort", "first", "float",
                 "format", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
                 "reject", "rejectattr", "replace", "reverse", "round", "select", "selectattr", "sort",
                 "string", "sum", "title", "trim", "truncate", "unique", "upper")
# Filters whose numeric arguments are widths, lengths or digits, bounded by MAX_WIDTH.
_WIDTH_FILTERS = frozenset({"center", "round", "truncate", "pct"})

_TEMPLATE_FILE = "<template>"  # the file name Jinja gives the code of a template compiled from a string
_NEWLINES = re.compile(r"\r\n|\r|\n")  # Jinja's own normalisation of the newlines of template data
_DICT_VIEWS: tuple[type[Collection[Any]], ...] = (type({}.keys()), type({}.values()), type({}.items()))
_CONTAINERS: tuple[type[Collection[Any]], ...] = (list, tuple, set, frozenset, dict, *_DICT_VIEWS)


class TemplateLimitError(Exception):
    """A template went past one of the limits above; the message says which, in plain words."""


class UnknownNameError(UndefinedError):
    """A name, dict key or column a template reads does not exist (as opposed to a missing attribute of a
    value, which depends on the value)."""


class _Timeout(BaseException):
    """Raised by the trace function. A BaseException, so that no `except Exception` in the code a template
    calls can swallow it (after raising, the trace function is no longer installed)."""

    def __init__(self, seconds: float, whole_rule: bool):
        super().__init__(seconds)
        self.seconds = seconds
        self.whole_rule = whole_rule


class TemplateFailure(Exception):
    """Rendering a template failed. `reason` completes "its message template ...", `advice` says what to do.
    `kind`: "limit", "sandbox", "undefined", "syntax" and "error" fail whatever the row; "zero-division" and
    "overflow" fail on some values; "value" is a failure that depends on the types of the values (None + 1),
    which sample rows cannot judge."""

    def __init__(self, reason: str, advice: str, kind: str = "error"):
        super().__init__(reason)
        self.reason = reason
        self.advice = advice
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.reason}; {self.advice}"


# ---------------------------------------------------------------------------------------------------------
# Budgets of the render in progress on this thread


@dataclass
class _Budget:
    deadline: float
    whole_rule: bool  # the deadline is the rule's (RULE_RENDER_SECONDS), not this render's
    built: int = 0
    ranged: int = 0

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise _Timeout(RULE_RENDER_SECONDS if self.whole_rule else RENDER_SECONDS, self.whole_rule)

    def trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        # Called for every Python call during the render, and for every line of template code: the loops of
        # a template are lines of its compiled code, calls cover macros and the filters Jinja writes in Python.
        self.check_time()
        return self.trace if frame.f_code.co_filename == _TEMPLATE_FILE else None


_local = threading.local()


def _budget() -> _Budget | None:
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


def _check_size(size: int, what: str = "a value") -> None:
    if size > MAX_VALUE_SIZE:
        unit = "characters" if what == "a string" else "characters or items"
        raise TemplateLimitError(f"would build {what} of {size:,} {unit} "
                                 f"(a template may build at most {MAX_VALUE_SIZE:,})")


def built(value: Any) -> Any:
    """Check a value a template has just built and count it against the render's total; returns it."""
    size = size_of(value)
    _check_size(size, _kind(value))
    budget = _budget()
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
    _check_size(size_of(value), _kind(value))
    return built(conversion(value))


# ---------------------------------------------------------------------------------------------------------
# Operators, %-formatting and string methods, sized before they run

_PRINTF = re.compile(r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?(?P<conv>.)",
                     re.S)


def _check_width(value: Any, what: str) -> int:
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
            width = _check_width(positional.pop(0) if m["width"] == "*" else int(m["width"] or 0),
                                 "a format width")
            precision = m["prec"]
            precision = _check_width(positional.pop(0) if precision == "*" else int(precision or 0),
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


def _check_printf(fmt: str, args: Any) -> None:
    _check_size(_printf_size(fmt, args), "a string")


def _check_replace(s: Any, old: Any, new: Any, count: Any = -1) -> None:
    if not (isinstance(s, str) and isinstance(old, str) and isinstance(new, str) and isinstance(count, int)):
        return
    hits = len(s) + 1 if old == "" else s.count(old)
    if count >= 0:
        hits = min(hits, count)
    _check_size(len(s) + hits * (len(new) - len(old)), "a string")


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (str, list, tuple))


def _check_binop(op: str, left: Any, right: Any) -> None:
    if op == "*":
        for seq, times in ((left, right), (right, left)):
            if _is_sequence(seq) and isinstance(times, int):
                _check_size(size_of(seq) * max(times, 0), _kind(seq))
        if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise TemplateLimitError(f"would compute a number of more than {MAX_INT_BITS:,} bits")
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            bits = (abs(left).bit_length() - 1) * right + 1
            if bits > MAX_INT_BITS:
                raise TemplateLimitError(f"would compute a number of about {bits:,} bits (at most {MAX_INT_BITS:,})")
    elif op == "+":
        if _is_sequence(left) and _is_sequence(right):
            _check_size(size_of(left) + size_of(right), _kind(left))
    elif op == "%" and isinstance(left, str):
        _check_printf(left, right)


def bounded_range(*args: Any) -> range:
    numbers = range(*args)
    count = _range_len(numbers)
    if count > MAX_RANGE:
        raise TemplateLimitError(f"calls range() for {count:,} numbers (at most {MAX_RANGE:,} per call)")
    budget = _budget()
    if budget is not None:
        budget.ranged += count
        if budget.ranged > MAX_RANGE_TOTAL:
            raise TemplateLimitError(f"calls range() for more than {MAX_RANGE_TOTAL:,} numbers in all")
    return numbers


# ---------------------------------------------------------------------------------------------------------
# Filters


def _join(environment: BoundedEnvironment, value: Iterable[Any], d: Any = "", attribute: Any = None) -> str:
    """Jinja's `join`, sizing the result as it goes instead of after."""
    if attribute is not None:
        value = map(make_attrgetter(environment, attribute), value)
    sep = to_text(d)
    parts: list[str] = []
    size = 0
    for item in value:
        text = to_text(item)
        size += len(text) + (len(sep) if parts else 0)
        _check_size(size, "a string")
        parts.append(text)
    return sep.join(parts)


_join.jinja_pass_arg = _PassArg.environment  # type: ignore[attr-defined]  # as jinja2.pass_environment does


def _replace(s: Any, old: Any, new: Any, count: int | None = None) -> str:
    s, old, new = to_text(s), to_text(old), to_text(new)
    count = -1 if count is None else count
    _check_replace(s, old, new, count)
    return s.replace(old, new, count)


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    if args and kwargs:
        raise TemplateRuntimeError("can't handle positional and keyword arguments at the same time")
    fmt, values = to_text(value), kwargs or args
    _check_printf(fmt, values)
    return fmt % values


def _check_sum(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    start = kwargs.get("start", args[1] if len(args) > 1 else 0)
    if not isinstance(start, (int, float)):  # sum() of lists or tuples from [] is quadratic in C
        raise TemplateLimitError("calls sum() with a start that is not a number; only numbers can be summed")


_PRECHECKS: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], None]] = {"sum": _check_sum}

# The filters that read an attribute of each item (`map(attribute='x')`, `selectattr('x')`, `sum('x')` ...), with
# the position of that argument after the value (Jinja's signatures, https://jinja.palletsprojects.com/en/stable/
# templates/#list-of-builtin-filters): Jinja reads it through the sandbox's getattr, whose refusal is an undefined
# value the filter passes on silently, so the attribute is checked here, as `x.attr` is.
ATTRIBUTE_FILTERS: dict[str, int | None] = {"map": None, "selectattr": 0, "rejectattr": 0, "sort": 2, "unique": 1,
                                            "min": 1, "max": 1, "sum": 0, "join": 1}


def private_attribute(path: Any) -> str | None:
    """The first private part (`__class__`) of a filter's dotted attribute path ('a.__class__'), or None."""
    if not isinstance(path, str):
        return None
    return next((part for part in path.split(".") if part.startswith("_")), None)


def _check_filter_attribute(name: str, rest: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    position = ATTRIBUTE_FILTERS[name]
    path = kwargs.get("attribute", rest[position] if position is not None and len(rest) > position else None)
    if name == "map" and not kwargs.get("attribute"):
        return  # map('upper') applies a filter, not an attribute
    part = private_attribute(path)
    if part is not None:
        raise SecurityError(f"uses attribute {part!r} in {name}(), which rule templates may not use")


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    skip = 0 if _PassArg.from_obj(func) is None else 1  # the environment or context Jinja passes first
    precheck = _PRECHECKS.get(name)

    @functools.wraps(func)  # keeps jinja_pass_arg
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rest = args[skip + 1:]
        if name in _WIDTH_FILTERS:
            for arg in (*rest, *kwargs.values()):
                _check_width(arg, f"a width of {name}()")
        if precheck is not None:
            precheck(rest, kwargs)
        if name in ATTRIBUTE_FILTERS:
            _check_filter_attribute(name, rest, kwargs)
        return built(func(*args, **kwargs))

    return wrapper


def _filters() -> dict[str, Callable[..., Any]]:
    table: dict[str, Callable[..., Any]] = {name: FILTERS[name] for name in JINJA_FILTERS}
    table.update(join=_join, replace=_replace, format=_format, string=lambda value: to_text(value),
                 dur=fmt_duration, pct=fmt_ratio, bytes=fmt_bytes, num=fmt_number,
                 gbps=lambda v: "n/a" if v is None else f"{float(v):.1f} GB/s",
                 percent=lambda v: "n/a" if v is None else f"{float(v):.1f} %", plural=plural)
    return {name: _bounded_filter(name, func) for name, func in table.items()}


# ---------------------------------------------------------------------------------------------------------
# The environment


class _Undefined(StrictUndefined):
    """Undefined values fail when used. A missing name or dict key raises UnknownNameError, which does not
    depend on the row's values (so `rules check` reports it); a missing attribute of a value raises
    UndefinedError."""

    __slots__ = ()

    def __init__(self, hint: str | None = None, obj: Any = missing, name: str | None = None,
                 exc: type[TemplateRuntimeError] = UndefinedError) -> None:
        if exc is UndefinedError and hint is None and (obj is missing or isinstance(obj, Mapping)):
            exc = UnknownNameError
        super().__init__(hint, obj, name, exc)


class _CodeGenerator(CodeGenerator):
    """Routes what Jinja compiles to plain Python through BoundedEnvironment: `~` and list, tuple and dict
    literals (which the sandbox's operator interception does not cover)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.join_text((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def _built(self, visit: Callable[[Any, Frame], None], node: nodes.Expr, frame: Frame) -> None:
        self.write("environment.built(")
        visit(node, frame)
        self.write(")")

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self._built(super().visit_List, node, frame)

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self._built(super().visit_Dict, node, frame)

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        if node.ctx == "load":  # not the targets of `for a, b in ...` or `set a, b = ...`
            self._built(super().visit_Tuple, node, frame)
        else:
            super().visit_Tuple(node, frame)


def _finalize(eval_ctx: Any, value: Any) -> str:
    return to_text(value)


# Needing the evaluation context keeps Jinja from evaluating {{ ... }} at compile time (see
# CodeGenerator._make_finalize), so no filter ever runs outside a bounded render.
_finalize.jinja_pass_arg = _PassArg.eval_context  # type: ignore[attr-defined]


class BoundedEnvironment(SandboxedEnvironment):
    """Jinja's sandbox with the limits of this module. See the sandbox documentation for the hooks:
    https://jinja.palletsprojects.com/en/stable/sandbox/#operator-intercepting"""

    code_generator_class = _CodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self) -> None:
        # optimized=False: the optimizer would evaluate constant expressions (filters included) at compile time
        super().__init__(autoescape=False, undefined=_Undefined, finalize=_finalize, optimized=False)
        self.globals.clear()  # no lipsum, cycler, joiner or namespace
        self.globals.update(range=bounded_range, dict=dict)
        self.filters = _filters()

    # The buffers of macros, `{% set %}` blocks and `{% filter %}` blocks are joined here.
    @staticmethod
    def concat(pieces: Iterable[str]) -> str:
        parts: list[str] = []
        size = 0
        for piece in pieces:
            size += len(piece)
            _check_size(size, "a string")
            parts.append(piece)
        return built("".join(parts))

    @staticmethod
    def join_text(values: tuple[Any, ...]) -> str:
        texts = [to_text(v) for v in values]
        _check_size(sum(map(len, texts)), "a string")
        return built("".join(texts))

    built = staticmethod(built)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if attr.startswith("_"):
            return False
        if isinstance(obj, str):
            return attr in STR_METHODS
        if isinstance(obj, Mapping):
            return attr in DICT_METHODS
        if isinstance(obj, LoopContext):
            return attr in LOOP_ATTRIBUTES
        return False

    def wrap_str_format(self, value: Any) -> None:
        return None  # str.format is not allowed at all (is_safe_attribute refuses it)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        return self.undefined(f"uses attribute {attribute!r} of {_kind_of(obj)}, which rule templates may not use",
                              name=attribute, obj=obj, exc=SecurityError)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return built(self.binop_table[operator](left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (as Jinja's)
        if getattr(__obj, "__name__", None) == "replace" and isinstance(getattr(__obj, "__self__", None), str):
            _check_replace(__obj.__self__, *args[:3])
        return built(super().call(__context, __obj, *args, **kwargs))


def _kind_of(obj: Any) -> str:
    name = type(obj).__name__
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


_ENV = BoundedEnvironment()


# Filters that loop in Python over what they are given; with `for`, macros and call blocks they are what can
# make a render long without building anything large.
_ITERATING_FILTERS = frozenset({"dictsort", "join", "list", "map", "max", "min", "reject", "rejectattr", "select",
                                "selectattr", "sort", "sum", "unique"})


@functools.lru_cache(maxsize=1024)
def _compile(source: str) -> tuple[Template, bool]:
    """The compiled template, and whether its renders need the trace function (see _needs_trace)."""
    ast = _ENV.parse(source)
    refused = _refused_construct(ast)
    if refused is not None:
        raise SecurityError(refused)
    traced = _needs_trace(ast)
    return _ENV.from_string(ast), traced


def _needs_trace(ast: nodes.Template) -> bool:
    """Tracing costs about 70 us per render. A template without loops, macros or looping filters runs each of
    its expressions once over values of bounded size, so its time is bounded by its length; built() still
    checks the deadline at each operation."""
    if any(True for _ in ast.find_all((nodes.For, nodes.Macro, nodes.CallBlock))):
        return True
    return any(node.name in _ITERATING_FILTERS for node in ast.find_all(nodes.Filter))


def _is_plain(source: str) -> bool:
    return "{" not in source  # no {{ }}, {% %} or {# #}: the text renders as itself


# ---------------------------------------------------------------------------------------------------------
# Compiling and checking


@functools.lru_cache(maxsize=1024)
def compile_problem(source: str) -> str | None:
    """Why a template does not compile (completing "its message template ..."), or None. Only parses: the
    rules load with every start of the program, and Python code is generated at a template's first render."""
    if _is_plain(source):
        return None
    try:
        ast = _ENV.parse(source)
    except TemplateSyntaxError as exc:
        return f"has a syntax error: {_syntax_message(exc, source)}"
    for kind, table, node_type in (("filter", _ENV.filters, nodes.Filter), ("test", _ENV.tests, nodes.Test)):
        for node in ast.find_all(node_type):
            if node.name not in table:
                hint = did_you_mean(node.name, table, f"; the {kind}s are: {', '.join(sorted(table))}")
                return f"uses the unknown {kind} {node.name!r}{hint}"
    refused = _refused_construct(ast)
    return None if refused is None else f"{refused}; {_SANDBOX_ADVICE}"


def _refused_construct(ast: nodes.Template) -> str | None:
    """What the sandbox refuses whatever the row: Jinja's `self` (the template's own reference object, which
    prints as an object and leads to its internals) and a private attribute given to a filter as a constant
    (`map(attribute='__class__')`), which Jinja would read silently as an undefined value."""
    if any(node.name == "self" and node.ctx == "load" for node in ast.find_all(nodes.Name)):
        return "uses the name 'self', which rule templates may not use"
    for f in ast.find_all(nodes.Filter):  # `x|map(...)` and `{% filter map(...) %}` alike
        if f.name not in ATTRIBUTE_FILTERS:
            continue
        position = ATTRIBUTE_FILTERS[f.name]
        given = [kw.value for kw in f.kwargs if kw.key == "attribute"]
        if not given and position is not None and len(f.args) > position:
            given = [f.args[position]]
        for value in given:
            part = private_attribute(value.value) if isinstance(value, nodes.Const) else None
            if part is not None:
                return f"uses attribute {part!r} in {f.name}(), which rule templates may not use"
    return None


def _syntax_message(exc: TemplateSyntaxError, source: str) -> str:
    where = f" (line {exc.lineno} of the template)" if "\n" in source.strip() else ""
    return f"{(exc.message or 'invalid syntax').rstrip('.')}{where}"


# Attribute names of the values a template sees that are methods, not data: reading one is refused at render
# time, so `rules check` reports it even when the sample rows do not reach it.
_METHOD_NAMES = frozenset(n for t in (str, dict, list, tuple, int, float) for n in dir(t))


def forbidden_attributes(source: str, data_names: Iterable[str]) -> list[str]:
    """Attributes the template reads that the sandbox refuses: private ones (`__class__`) and methods that are
    not allowed (`ljust`, `format`), unless the name is one of `data_names` (columns, params)."""
    if _is_plain(source):
        return []
    allowed = set(data_names) | DICT_METHODS | STR_METHODS | LOOP_ATTRIBUTES
    found: list[str] = []
    for node in _ENV.parse(source).find_all((nodes.Getattr, nodes.Getitem)):
        attr: Any
        if isinstance(node, nodes.Getattr):
            attr = node.attr
            refused = attr not in allowed and (attr.startswith("_") or attr in _METHOD_NAMES)
        else:  # x['key'] reads a key, and falls back to an attribute only when there is no such key
            attr = getattr(getattr(node, "arg", None), "value", None)
            refused = isinstance(attr, str) and attr.startswith("_")
        if refused and attr not in found:
            found.append(attr)
    return found


_EXPRESSION = re.compile(r"\{\{-?(.*?)-?\}\}", re.S)
_STATEMENT = re.compile(r"\{%.*?%\}|\{#.*?#\}", re.S)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def readable(source: str) -> str:
    """A template as plain text for a reader, when there is no row to render it on: each `{{ row.x | pct }}`
    becomes `<x>` (the last name before any filter), `{% ... %}` tags and `{# ... #}` comments are dropped, so
    the text of every branch is shown; whitespace collapsed."""
    def placeholder(m: re.Match[str]) -> str:
        names = _NAME.findall(m.group(1).split("|")[0])
        return f"<{names[-1] if names else 'value'}>"

    return " ".join(_STATEMENT.sub(" ", _EXPRESSION.sub(placeholder, source)).split())


# ---------------------------------------------------------------------------------------------------------
# Rendering


def render(source: str, context: Mapping[str, Any], *, not_after: float | None = None) -> str:
    """Render a rule template, stripped. `not_after`: a time.monotonic() by which all the renders of the rule
    must be done. Every failure raises TemplateFailure (KeyboardInterrupt excepted)."""
    if _is_plain(source):
        return _NEWLINES.sub("\n", source).strip()
    try:
        template, traced = _compile(source)
    except TemplateSyntaxError as exc:  # load_rule_file reports these first, with the file's position
        raise TemplateFailure(f"has a syntax error: {_syntax_message(exc, source)}", "fix the template",
                              "syntax") from None
    except SecurityError as exc:  # `self`, a private filter attribute: load_rule_file reports these first too
        raise describe(exc) from None
    now = time.monotonic()
    own = now + RENDER_SECONDS
    budget = _Budget(deadline=min(own, not_after) if not_after is not None else own,
                     whole_rule=not_after is not None and not_after < own)
    try:
        with _bounded(budget, traced):
            return "".join(_limited(template.generate(**context))).strip()
    except _Timeout as exc:
        raise _timeout_failure(exc) from None
    except Exception as exc:  # noqa: BLE001 - any failure of a template becomes one sentence for the user
        raise describe(exc) from None


def _limited(pieces: Iterator[str]) -> Iterator[str]:
    size = 0
    try:
        for piece in pieces:
            size += len(piece)
            if size > MAX_MESSAGE_CHARS:
                raise TemplateLimitError(f"renders more than {MAX_MESSAGE_CHARS:,} characters")
            yield piece
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()


class _bounded:  # noqa: N801 - used as a context manager
    """Install the budget (and the trace function when needed) on this thread for one render, then restore
    what was there: a debugger's or coverage's trace function comes back after the render."""

    def __init__(self, budget: _Budget, traced: bool):
        self.budget = budget
        self.traced = traced

    def __enter__(self) -> None:
        self.previous_budget = _budget()
        _local.budget = self.budget
        if self.traced:
            self.previous_trace = sys.gettrace()
            sys.settrace(self.budget.trace)

    def __exit__(self, *exc: object) -> None:
        if self.traced:
            sys.settrace(self.previous_trace)
        _local.budget = self.previous_budget


_SIMPLIFY = "simplify the template"
_SANDBOX_ADVICE = ("a template may read row, params and impact, call get/items/keys/values on them, a few string "
                   "methods and the filters listed in docs/team-rules.md")


def forbidden_failure(attr: str) -> TemplateFailure:
    """What forbidden_attributes found, as the sandbox would report it at render time."""
    return TemplateFailure(f"uses attribute {attr!r}, which rule templates may not use", _SANDBOX_ADVICE, "sandbox")


def _timeout_failure(exc: _Timeout) -> TemplateFailure:
    if exc.whole_rule:
        return TemplateFailure(f"took longer than {exc.seconds:g} s in all to render for the rule's findings",
                               _SIMPLIFY, "limit")
    return TemplateFailure(f"took longer than {exc.seconds:g} s to render", _SIMPLIFY, "limit")


def describe(exc: BaseException) -> TemplateFailure:
    """A failure of a template, in plain words."""
    if isinstance(exc, _Timeout):
        return _timeout_failure(exc)
    if isinstance(exc, TemplateLimitError):
        return TemplateFailure(str(exc), _SIMPLIFY, "limit")
    if isinstance(exc, SecurityError):
        return TemplateFailure(str(exc).rstrip("."), _SANDBOX_ADVICE, "sandbox")
    if isinstance(exc, ZeroDivisionError):
        return TemplateFailure("divides by zero", "guard the division, e.g. {% if row.x %}...{% endif %}",
                               "zero-division")
    if isinstance(exc, UnknownNameError):
        return TemplateFailure(f"reads something undefined: {(exc.message or '').rstrip('.')}",
                               "use the fact's columns (row.NAME), the rule's params (params.NAME) and impact",
                               "undefined")
    if isinstance(exc, UndefinedError):
        return TemplateFailure(f"reads something undefined: {(exc.message or '').rstrip('.')}", "fix the template",
                               "value")
    if isinstance(exc, RecursionError):
        return TemplateFailure("calls itself too deeply (endless recursion)", _SIMPLIFY, "limit")
    if isinstance(exc, MemoryError):
        return TemplateFailure("ran out of memory", _SIMPLIFY, "limit")
    if isinstance(exc, OverflowError):
        return TemplateFailure(f"computes a number too large ({exc})", _SIMPLIFY, "overflow")
    if isinstance(exc, TemplateSyntaxError):
        return TemplateFailure(f"has a syntax error: {exc.message}", "fix the template", "syntax")
    if isinstance(exc, TemplateRuntimeError):
        return TemplateFailure(f"failed: {str(exc).rstrip('.')}", "fix the template")
    text = str(exc).strip() or type(exc).__name__
    return TemplateFailure(f"failed: {text}", "fix the template (it fails on this row)", "value")
