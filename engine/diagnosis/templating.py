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

Every failure surfaces as TemplateFailure, whose `reason` says in plain words what went wrong. This module
compiles, checks and renders; the limits are engine/diagnosis/template_limits.py, the environment (the sandbox,
its filters and allowlists) engine/diagnosis/template_sandbox.py.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jinja2 import TemplateRuntimeError, TemplateSyntaxError, UndefinedError, nodes
from jinja2.environment import Template
from jinja2.sandbox import SecurityError

from ..base.text import did_you_mean
from .template_limits import (MAX_MESSAGE_CHARS, RENDER_SECONDS, RenderBudget, RenderTimeout, TemplateLimitError,
                              bounded_render)
from .template_sandbox import (ATTRIBUTE_FILTERS, DICT_METHODS, ENVIRONMENT, LOOP_ATTRIBUTES, STR_METHODS,
                               UnknownNameError, private_attribute)


_NEWLINES = re.compile(r"\r\n|\r|\n")  # Jinja's own normalisation of the newlines of template data


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


# Filters that loop in Python over what they are given; with `for`, macros and call blocks they are what can
# make a render long without building anything large.
_ITERATING_FILTERS = frozenset({"dictsort", "join", "list", "map", "max", "min", "reject", "rejectattr", "select",
                                "selectattr", "sort", "sum", "unique"})


@functools.lru_cache(maxsize=1024)
def _compile(source: str) -> tuple[Template, bool]:
    """The compiled template, and whether its renders need the trace function (see _needs_trace)."""
    ast = ENVIRONMENT.parse(source)
    refused = _refused_construct(ast)
    if refused is not None:
        raise SecurityError(refused)
    traced = _needs_trace(ast)
    return ENVIRONMENT.from_string(ast), traced


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
        ast = ENVIRONMENT.parse(source)
    except TemplateSyntaxError as exc:
        return f"has a syntax error: {_syntax_message(exc, source)}"
    found = _checked_nodes(ast)
    for kind, table, node_type in (("filter", ENVIRONMENT.filters, nodes.Filter),
                                   ("test", ENVIRONMENT.tests, nodes.Test)):
        for node in found[node_type]:
            if node.name not in table:
                hint = did_you_mean(node.name, table, f"; the {kind}s are: {', '.join(sorted(table))}")
                return f"uses the unknown {kind} {node.name!r}{hint}"
    refused = _refused_construct(ast, found)
    return None if refused is None else f"{refused}; {_SANDBOX_ADVICE}"


def _checked_nodes(ast: nodes.Template) -> dict[type, list[Any]]:
    """The filters, tests and names of a template, each kind in the order they are written: one walk of the tree
    instead of one per kind (every start of the program checks every rule's templates)."""
    found: dict[type, list[Any]] = {nodes.Filter: [], nodes.Test: [], nodes.Name: []}
    for node in ast.find_all((nodes.Filter, nodes.Test, nodes.Name)):
        found[type(node)].append(node)
    return found


def _refused_construct(ast: nodes.Template, found: dict[type, list[Any]] | None = None) -> str | None:
    """What the sandbox refuses whatever the row: Jinja's `self` (the template's own reference object, which
    prints as an object and leads to its internals) and a private attribute given to a filter as a constant
    (`map(attribute='__class__')`), which Jinja would read silently as an undefined value. `found`: the template's
    _checked_nodes, when the caller has them."""
    found = found or _checked_nodes(ast)
    if any(node.name == "self" and node.ctx == "load" for node in found[nodes.Name]):
        return "uses the name 'self', which rule templates may not use"
    for f in found[nodes.Filter]:  # `x|map(...)` and `{% filter map(...) %}` alike
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
    for node in ENVIRONMENT.parse(source).find_all((nodes.Getattr, nodes.Getitem)):
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
    budget = RenderBudget(deadline=min(own, not_after) if not_after is not None else own,
                     whole_rule=not_after is not None and not_after < own)
    try:
        with bounded_render(budget, traced):
            return "".join(_limited(template.generate(**context))).strip()
    except RenderTimeout as exc:
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


_SIMPLIFY = "simplify the template"
_SANDBOX_ADVICE = ("a template may read row, params and impact, call get/items/keys/values on them, a few string "
                   "methods and the filters listed in docs/team-rules.md")


def forbidden_failure(attr: str) -> TemplateFailure:
    """What forbidden_attributes found, as the sandbox would report it at render time."""
    return TemplateFailure(f"uses attribute {attr!r}, which rule templates may not use", _SANDBOX_ADVICE, "sandbox")


def _timeout_failure(exc: RenderTimeout) -> TemplateFailure:
    if exc.whole_rule:
        return TemplateFailure(f"took longer than {exc.seconds:g} s in all to render for the rule's findings",
                               _SIMPLIFY, "limit")
    return TemplateFailure(f"took longer than {exc.seconds:g} s to render", _SIMPLIFY, "limit")


def describe(exc: BaseException) -> TemplateFailure:
    """A failure of a template, in plain words."""
    if isinstance(exc, RenderTimeout):
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
