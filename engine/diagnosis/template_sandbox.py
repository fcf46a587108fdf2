"""The Jinja environment of rule templates (engine/diagnosis/templating.py): Jinja's sandbox with an allowlist of
attributes, filters and globals (nothing a message does not need), every filter, operator and call routed
through the limits of engine/diagnosis/template_limits.py, and a code generator that routes `~` and list, tuple
and dict literals there too. It subclasses Jinja internals: the pinned jinja2 3.1 series only."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jinja2 import StrictUndefined, TemplateRuntimeError, UndefinedError, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.filters import FILTERS, make_attrgetter
from jinja2.runtime import LoopContext
from jinja2.sandbox import SandboxedEnvironment, SecurityError
from jinja2.utils import _PassArg, missing

from ..base.text import plural
from ..base.units import fmt_bytes, fmt_duration, fmt_number, fmt_ratio
from .template_limits import (TemplateLimitError, bounded_range, built, check_binop, check_printf, check_replace,
                              check_size, check_width, to_text)


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


class UnknownNameError(UndefinedError):
    """A name, dict key or column a template reads does not exist (as opposed to a missing attribute of a
    value, which depends on the value)."""


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
        check_size(size, "a string")
        parts.append(text)
    return sep.join(parts)


_join.jinja_pass_arg = _PassArg.environment  # type: ignore[attr-defined]  # as jinja2.pass_environment does


def _replace(s: Any, old: Any, new: Any, count: int | None = None) -> str:
    s, old, new = to_text(s), to_text(old), to_text(new)
    count = -1 if count is None else count
    check_replace(s, old, new, count)
    return s.replace(old, new, count)


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    if args and kwargs:
        raise TemplateRuntimeError("can't handle positional and keyword arguments at the same time")
    fmt, values = to_text(value), kwargs or args
    check_printf(fmt, values)
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
                check_width(arg, f"a width of {name}()")
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
    """Jinja's sandbox with the limits of template_limits.py. See the sandbox documentation for the hooks:
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
            check_size(size, "a string")
            parts.append(piece)
        return built("".join(parts))

    @staticmethod
    def join_text(values: tuple[Any, ...]) -> str:
        texts = [to_text(v) for v in values]
        check_size(sum(map(len, texts)), "a string")
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
        check_binop(operator, left, right)
        return built(self.binop_table[operator](left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (as Jinja's)
        if getattr(__obj, "__name__", None) == "replace" and isinstance(getattr(__obj, "__self__", None), str):
            check_replace(__obj.__self__, *args[:3])
        return built(super().call(__context, __obj, *args, **kwargs))


def _kind_of(obj: Any) -> str:
    name = type(obj).__name__
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


ENVIRONMENT = BoundedEnvironment()
