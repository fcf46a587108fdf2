"""The views step: what every format of a report shows, decided once here (report_view, run_view,
comparison_view) and in the modules beside it (textviews.py: the terminal's composed lines; svgviews.py: where the
HTML charts put their text and axes), so that the templates of reports/templates/ only loop over these sections and
print them. A view holds values, not formatting: each format formats a number its own way.

Nothing here decides wording a user reads that the templates did not already hold; it moves the decisions (which
finding leads, which cell is missing, how a severity looks, which phase a cost is of) out of the templates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from ..base.text import distinct_short_names
from ..base.vocabulary import Kind, Severity
from ..model.comparemodel import Comparison
from ..model.findings import Finding
from ..model.measures import GpuWindow, OperationBreakdown
from ..model.metrics import MetricRow
from ..model.report import Device, Report
from ..model.runmodel import RunReport
from ..model.verdict import Verdict


# ---------------------------------------------------------------------------------------------------------------
# Severities: one table for how each format shows a finding's severity
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SeverityStyle:
    """How a severity looks: `label` (HTML badge, Markdown heading), `icon` (Markdown), `colour` (terminal)."""

    label: str
    icon: str
    colour: str


SEVERITIES: dict[str, SeverityStyle] = {
    Severity.ERROR: SeverityStyle("Error", "🛑", "red"),
    Severity.WARNING: SeverityStyle("Warning", "⚠️", "yellow"),
    Severity.INFO: SeverityStyle("Info", "ℹ️", "cyan"),
}


# ---------------------------------------------------------------------------------------------------------------
# A comparison: its outcome, its gates, each metric's assessment
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OutcomeStyle:
    """How a comparison's outcome looks: `icon` (Markdown), `colour` (terminal), `css` (the HTML verdict box; a
    regression keeps the box's default, red)."""

    icon: str
    colour: str
    css: str


OUTCOMES: dict[str, OutcomeStyle] = {"improved": OutcomeStyle("✅", "green", "improved"),
                                     "regressed": OutcomeStyle("❌", "red", ""),
                                     "unchanged": OutcomeStyle("➖", "bold", "unchanged")}
# The assessments a metric's row names; an unjudged change says nothing.
SHOWN_ASSESSMENTS = {"improved": "improved", "regressed": "regressed"}


@dataclass(frozen=True)
class GateStatus:
    """How a gate came out, in each format's words."""

    word: str
    icon: str
    terminal: str


GATE_CROSSED = GateStatus("crossed", "❌", "FAIL")
GATE_UNEVALUATED = GateStatus("not evaluated", "➖", "skip")
GATE_OK = GateStatus("ok", "✅", "ok")


def gate_status(gate: Any) -> GateStatus:
    """A gate is crossed, not evaluated (a side lacks the metric) or ok."""
    return GATE_CROSSED if gate.crossed else (GATE_UNEVALUATED if gate.observed is None else GATE_OK)


# ---------------------------------------------------------------------------------------------------------------
# Tables with explicit missing cells
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShareCell:
    """One cell of a share table: a share of a GPU's time and the time itself, or missing (`present` false):
    the column's phase or GPU has no such row."""

    share: float | None = None
    ns: int | None = None

    @property
    def present(self) -> bool:
        return self.share is not None


MISSING = ShareCell()


@dataclass(frozen=True)
class ShareRow:
    label: str
    cells: list[ShareCell]


@dataclass(frozen=True)
class ShareTable:
    """Rows by columns; `unclassified`: the kernels of the `other` class, heaviest first (operations only)."""

    columns: list[str]
    rows: list[ShareRow]
    unclassified: list[str] = field(default_factory=list)


def operations_pivot(breakdowns: Sequence[OperationBreakdown]) -> ShareTable:
    """The breakdowns as one table: a column per breakdown (phase and GPU), a row per class in the order they
    first appear, and a missing cell where a breakdown lacks the class (a phase or GPU that ran none of it)."""
    order = list(dict.fromkeys(c.op_class for b in breakdowns for c in b.classes))
    multi_gpu = len({b.device_id for b in breakdowns}) > 1
    columns = [" · ".join([b.phase or "Run", *([f"GPU {b.device_id}"] if multi_gpu else [])]) for b in breakdowns]
    by_class = [{c.op_class: ShareCell(c.share, c.total_ns) for c in b.classes} for b in breakdowns]
    rows = [ShareRow(name, [cells.get(name, MISSING) for cells in by_class]) for name in order]
    unclassified = list(dict.fromkeys(str(k["name"]) for b in breakdowns for c in b.classes if c.op_class == "other"
                                      for k in c.top_kernels))
    return ShareTable(columns, rows, unclassified)


def window_table(windows: Sequence[GpuWindow]) -> ShareTable:
    """Where each GPU's window went: a row per part (the first GPU's parts, in WINDOW_PARTS order), a column per
    GPU, a missing cell where a GPU's window lacks the part."""
    labels = list(dict.fromkeys(p.label for w in windows for p in w.parts))
    by_label = [{p.label: ShareCell(p.share, p.ns) for p in w.parts} for w in windows]
    return ShareTable([f"GPU {w.device_id}" for w in windows],
                      [ShareRow(label, [cells.get(label, MISSING) for cells in by_label]) for label in labels])


# ---------------------------------------------------------------------------------------------------------------
# Key metrics
# ---------------------------------------------------------------------------------------------------------------

class MetricCell:
    """Adjacent key-metric rows of one group shown together: 'Gap mean / median  8.9 µs / 9.6 µs'. A row whose
    value could not be measured shows why in its place (metrics.py writes the metric's `missing` text into its
    display); `unavailable` lists those reasons, and is empty when every value was measured."""

    def __init__(self, rows: Sequence[MetricRow]):
        first = rows[0]
        self.rows = list(rows)
        self.label = first.group or first.label
        self.short_label = first.group or first.short_label
        self.doc = "; ".join(r.doc for r in rows if r.doc)
        self.display = " / ".join(r.display for r in rows)
        self.past = any(r.past for r in rows)
        self.judged = [r for r in rows if r.threshold is not None]
        self.unavailable = [r.display for r in rows if r.value is None]


def metric_cells(rows: Sequence[MetricRow]) -> list[MetricCell]:
    return [MetricCell(list(members)) for _, members in groupby(rows, key=lambda r: r.group or f"\0{r.key}")]


# ---------------------------------------------------------------------------------------------------------------
# Findings and rules
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FindingOrder:
    """The findings of a list with the one the verdict names first (`lead`, empty when it names none listed) and
    the others (`rest`) after it, in their order: a PR comment shows the lead in full and folds the rest."""

    lead: list[Finding]
    rest: list[Finding]

    @property
    def all(self) -> list[Finding]:
        return [*self.lead, *self.rest]

    @property
    def rest_noun(self) -> str:
        return "finding" if len(self.rest) == 1 else "findings"


def lead_first(findings: Sequence[Finding], verdict: Verdict | None = None) -> FindingOrder:
    if verdict is not None and verdict.rule:
        for i, f in enumerate(findings):
            if f.rule == verdict.rule and f.subject == verdict.subject:
                return FindingOrder([f], [*findings[:i], *findings[i + 1:]])
    return FindingOrder([], list(findings))


def fired_rules(findings: Iterable[Finding], also_checked: Iterable[Any] = ()) -> list[str]:
    """Every rule that fired, once: the findings' rules, the rules that agreed with them, the negligible ones."""
    findings = list(findings)
    return list(dict.fromkeys([*(f.rule for f in findings), *(r for f in findings for r in f.agrees),
                               *(a.rule for a in also_checked)]))


@dataclass(frozen=True)
class VerdictCost:
    """What the verdict's cost is a share of: a primary in a phase judged alone is costed as the verdict ranked
    it, by its share of that phase."""

    impact: float | None
    cost_of: str
    css: str


def verdict_cost(verdict: Verdict) -> VerdictCost:
    lead = [p for p in verdict.phases
            if p.phase == verdict.phase and p.rule == verdict.rule and p.judged_alone]
    # The verdict box is green when nothing was found and amber when the capture itself is the problem.
    css = "none" if not verdict.primary else (Kind.CAPTURE.value if verdict.primary == Kind.CAPTURE else "")
    if lead:
        return VerdictCost(lead[0].impact, f"{verdict.phase}'s GPU time", css)
    return VerdictCost(verdict.impact, "GPU time", css)


# ---------------------------------------------------------------------------------------------------------------
# The profile's header and footer
# ---------------------------------------------------------------------------------------------------------------

def unique_names(names: Iterable[str]) -> list[str]:
    """In order, each name once, ignoring case (as Jinja's `unique`)."""
    seen: dict[str, str] = {}
    for n in names:
        seen.setdefault(n.lower(), n)
    return list(seen.values())


@dataclass(frozen=True)
class ProfileHeader:
    file_name: str
    rank: str
    """' (rank 2 of 8)' for one rank of a distributed run, else empty."""
    gpus_used: str
    """'1 GPU used', '2 GPUs used'."""
    gpu_names: str
    """The used GPUs' distinct names, empty when none was used."""
    missing_views: list[tuple[str, str]]
    """The canonical views this export lacks, with why."""


def profile_header(report: Report) -> ProfileHeader:
    p = report.profile
    used: list[Device] = [d for d in p.devices if d.get("used")]
    rank = (f" (rank {p.rank} of {p.world_size})" if p.world_size and p.world_size > 1 and p.rank is not None
            else "")
    return ProfileHeader(file_name=p.path.split("/")[-1], rank=rank,
                         gpus_used=f"{len(used)} GPU{'' if len(used) == 1 else 's'} used",
                         gpu_names=", ".join(unique_names(d.get("name") or "unnamed" for d in used)),
                         missing_views=[(name, str(v["reason"])) for name, v in p.views.items() if v.get("reason")])


# ---------------------------------------------------------------------------------------------------------------
# Registry sections (sections.yaml) and the phases' matched texts
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MatchedTexts:
    texts: list[Mapping[str, Any]]
    more: int
    """How many more texts the phase matched than `texts` lists (0: none)."""


def matched_texts(row: Mapping[str, Any]) -> MatchedTexts:
    """The NVTX texts a phase's pattern matched most, with their range counts (fact phases)."""
    texts = list(row.get("matched_texts") or [])
    return MatchedTexts(texts, max((row.get("text_count") or 0) - len(texts), 0))


@dataclass(frozen=True)
class SectionView:
    """A registry section's rows as shown, and the distinct short names of its short_name columns."""

    rows: list[Mapping[str, Any]]
    names: dict[object, str]


def section_view(section: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], limit: int | None = None
                 ) -> SectionView:
    """`limit`: the Markdown plan's row count, for an entry whose rows are `plan`."""
    count = section.get("rows")
    shown = list(rows[:limit] if count == "plan" else (rows[:count] if count else rows))
    names: dict[object, str] = {}
    for c in section["columns"]:
        if c["format"] == "short_name":
            names.update(distinct_short_names([r.get(c["value"]) for r in shown], c["width"]))
    return SectionView(shown, names)


# ---------------------------------------------------------------------------------------------------------------
# Each kind of document's view: its sections, made once and handed to every format
# ---------------------------------------------------------------------------------------------------------------

def report_view(report: Report) -> dict[str, Any]:
    """The format-neutral sections of one profile's report (the Markdown, HTML and terminal templates' values)."""
    return {"header": profile_header(report), "window_table": window_table(report.window),
            "operations_pivot": operations_pivot(report.operations),
            "finding_order": lead_first(report.findings, report.verdict),
            "fired_rules": fired_rules(report.findings, report.also_checked),
            "verdict_cost": verdict_cost(report.verdict),
            "what_if_findings": [f for f in report.findings if f.what_if]}


def run_view(run: RunReport) -> dict[str, Any]:
    """The format-neutral sections of a multi-rank run's report."""
    return {"finding_order": lead_first(run.findings), "fired_rules": fired_rules(run.findings),
            "cross_rank_fired": unique_names(f.rule for f in run.findings),
            "rank_finding_count": sum(len(k.findings) for k in run.ranks), "labels": run.rank_labels(),
            "versions": sorted({r.nsys_version for r in run.ranks if r.nsys_version})}


def comparison_view(comparison: Comparison) -> dict[str, Any]:
    """The format-neutral sections of a comparison."""
    return {"outcome": OUTCOMES[comparison.verdict],
            "gates": [(g, gate_status(g)) for g in comparison.gates]}
