"""The conditions of rules (`when`, `when_any`, a remediation step's `when`): `COLUMN OP VALUE` parsed into
operands, never evaluated as Python."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal


_OPS = (">=", "<=", "==", "!=", ">", "<")
_COND = re.compile(r"^\s*(\S+)\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


@dataclass(frozen=True)
class Operand:
    # "fact": FACT.COLUMN, a column of the first row of another (whole-run) fact; only in remediation steps.
    kind: Literal["column", "fact", "param", "number", "bool", "string"]
    value: Any

    def text(self) -> str:
        return f"${self.value}" if self.kind == "param" else str(self.value)


@dataclass(frozen=True)
class Condition:
    left: Operand
    op: str
    right: Operand
    source: str


def _operand(token: str) -> Operand:
    if token.startswith("$"):
        return Operand("param", token[1:])
    if _NUMBER.match(token):
        return Operand("number", float(token))
    if token in ("true", "false"):
        return Operand("bool", token == "true")
    if token.startswith(("'", '"')) and token.endswith(token[0]) and len(token) >= 2:
        return Operand("string", token[1:-1])
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*", token):
        return Operand("fact", tuple(token.split(".", 1)))
    return Operand("column", token)


def parse_condition(text: str) -> Condition:
    m = _COND.match(text)
    if not m:
        raise ValueError(f"cannot parse condition {text!r}; write 'COLUMN OP VALUE' with OP one of "
                         f"{' '.join(_OPS)}, e.g. 'overhead_ratio > $max_overhead_ratio'")
    return Condition(_operand(m.group(1)), m.group(2), _operand(m.group(3)), text)
