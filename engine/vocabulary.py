"""The words every layer shares: finding severities and kinds. This is the only Python module that spells them;
bundled and team categories are data (rules/categories.yaml, engine/diagnosis/categories.py)."""

from __future__ import annotations

from enum import StrEnum


class Severity(StrEnum):
    """How much a finding matters, weakest first. `--fail-on`, `rules.<id>.severity` and the rule files use the
    values."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def at_least(self, other: Severity | str) -> bool:
        return self.rank >= Severity(other).rank

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(s.value for s in cls)

    @classmethod
    def described(cls) -> str:
        """'info, warning or error', for messages."""
        *head, last = cls.names()
        return f"{', '.join(head)} or {last}"


_RANK = {s: i for i, s in enumerate(Severity)}


class Kind(StrEnum):
    """What a finding is: a cause to fix, a symptom whose cause another finding names, or a capture problem that
    limits what the export can show. Verdicts prefer causes, then symptoms; capture problems come first when
    they make the rest meaningless (`blocking: true`)."""

    CAUSE = "cause"
    SYMPTOM = "symptom"
    CAPTURE = "capture"

    @property
    def rank(self) -> int:
        return _KIND_RANK[self]


# Findings are listed causes first, then capture problems, then symptoms (within one severity).
_KIND_RANK = {k: i for i, k in enumerate((Kind.CAUSE, Kind.CAPTURE, Kind.SYMPTOM))}
