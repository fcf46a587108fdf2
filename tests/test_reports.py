"""Reports: what each renderer must show and must never let through, checked on every fixture scenario, plus one
layout sample per renderer.

Layout samples: tests/golden/reports/eager_decode.{txt,md,html,json}. The JSON file is the frozen report model
the other three are rendered from, so a new rule, fact or key metric leaves them alone; they change only when a
template or the model changes. Refresh them after such a change and review the diff:

    make regen
    git diff tests/golden/reports

(engine/authoring/regen.py writes them: it diagnoses eager_decode afresh; the profile path is replaced by
`eager_decode.sqlite`, tool_version by `0.0.0+golden`, floats rounded to 6 significant digits. It also refreshes
the findings of multi_gpu_straggler and pageable_copies that tests/test_team_templates.py compares messages
with.)

The Chromium test needs `chromium` (Debian package; CHROMIUM=/path/to/binary overrides): without it the test is
skipped, or fails when CI is set. It saves tests/artifacts/eager_decode_report.png (the whole page) and
tests/artifacts/eager_decode_report_first_screen.png (1280x800, what a laptop shows first); both git-ignored.
"""

from __future__ import annotations

import ast
import base64
import difflib
import html.parser
import functools
import io
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chromium import Browser, page_problems, require_chromium
from conftest import analysis, scenario_analysis, slow_but
from nsys_diagnose.runs.api import diagnose
from nsys_diagnose.cli import main as cli
from nsys_diagnose.diagnosis.config import resolve_config
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.fixtures.generator import SCENARIOS, generate
from nsys_diagnose.reports.charts import bucket_label
from nsys_diagnose.reports.metrics import METRICS
from nsys_diagnose.model.report import REPORT_SCHEMA_VERSION, Report
from nsys_diagnose.reports.render import FORMATS, GITHUB_COMMENT_LIMIT, TERMINAL_LINES, TERMINAL_WIDTH, render
from nsys_diagnose.reports.schema import SCHEMAS, report_schema, schema_text, shipped_schema
from nsys_diagnose.authoring.regen import EXTENSIONS, GOLDEN_SCENARIO, TEAM_TEMPLATE_SCENARIOS, fixed

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "reports"
TEMPLATES = REPO / "reports" / "templates"
ARTIFACTS = REPO / "tests" / "artifacts"
REGEN = "run `make regen` and review `git diff tests/golden`"
NAMES = sorted(SCENARIOS)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def frozen_report() -> Report:
    """The layout samples' input: the report model frozen in the JSON golden."""
    return Report.model_validate_json((GOLDEN / f"{GOLDEN_SCENARIO}.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------------------
# Layout samples (one golden per renderer)
# ------------------------------------------------------------------------------------------------------------
def test_every_format_is_offered_by_the_cli():
    assert set(FORMATS) == set(EXTENSIONS)


@pytest.mark.parametrize("fmt", list(EXTENSIONS))
def test_golden_layout(fmt):
    path = GOLDEN / f"{GOLDEN_SCENARIO}.{EXTENSIONS[fmt]}"
    assert path.is_file(), f"{path} is missing: {REGEN}"
    expected = path.read_text(encoding="utf-8")
    text = render(frozen_report(), fmt)
    if text != expected:
        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                                 str(path), "rendered", n=1))[:80])
        pytest.fail(f"the {fmt} layout changed ({REGEN}):\n{diff}")


def _shape(value, path="") -> set[str]:
    """Every key path of a JSON document (list items merged)."""
    if isinstance(value, dict):
        return {f"{path}.{k}" for k in value} | {p for k, v in value.items() for p in _shape(v, f"{path}.{k}")}
    if isinstance(value, list):
        return {p for v in value for p in _shape(v, f"{path}[]")}
    return set()


def test_golden_model_has_the_shape_of_a_fresh_report():
    """A model change (a field added, renamed or dropped) needs the golden refreshed; a new rule or metric not."""
    fresh = json.loads(render(scenario_analysis(GOLDEN_SCENARIO)[1], "json"))
    golden = json.loads((GOLDEN / f"{GOLDEN_SCENARIO}.json").read_text(encoding="utf-8"))
    ignore = re.compile(r"^\.(facts|metrics|findings\[\]\.row)\.")  # fact columns: the schema checks those
    keys = {p for p in _shape(fresh) ^ _shape(golden) if not ignore.match(p)}
    assert not keys, f"the report model changed ({REGEN}): {keys}"


def test_only_layout_goldens_are_kept():
    expected = {f"{GOLDEN_SCENARIO}.{ext}" for ext in EXTENSIONS.values()}
    expected |= {f"{name}.json" for name in TEAM_TEMPLATE_SCENARIOS}
    assert {p.name for p in GOLDEN.iterdir()} == expected


# ------------------------------------------------------------------------------------------------------------
# Key metrics: one definition, thresholds from the evaluated rules
# ------------------------------------------------------------------------------------------------------------
def test_every_metric_names_a_documented_source_and_a_real_rule_param():
    from nsys_diagnose.diagnosis.rules import load_rules

    facts = load_facts()
    rules = load_rules(facts)
    keys = [m.key for m in METRICS]
    assert len(keys) == len(set(keys))
    for m in METRICS:
        for source in m.sources:
            where, _, column = source.partition(".")
            if where == "throughput":
                from nsys_diagnose.model.measures import Throughput
                assert column in Throughput.model_fields, m
            elif where == "profile":
                from nsys_diagnose.model.report import ProfileSummary
                assert column in ProfileSummary.model_fields, m
            else:
                assert column in facts[where].column_names, m
        if m.threshold:
            rule, _, param = m.threshold.rpartition(".")
            assert param in rules[rule].spec.params, m
        if m.versus:
            assert m.versus in keys, m
    groups = [m.group for m in METRICS if m.group]
    for group in set(groups):  # a group's members are adjacent
        positions = [i for i, m in enumerate(METRICS) if m.group == group]
        assert positions == list(range(positions[0], positions[0] + len(positions)))


def test_no_template_lists_a_metric_or_a_rule_threshold():
    from nsys_diagnose.diagnosis.rules import load_rules

    rules = load_rules(load_facts())
    defaults = {rules[m.threshold.rpartition(".")[0]].spec.params[m.threshold.rpartition(".")[2]].default
                for m in METRICS if m.threshold}
    for path in TEMPLATES.glob("*.j2"):
        text = path.read_text(encoding="utf-8")
        keys = "|".join(m.key for m in METRICS)
        assert not re.search(rf"\b(m|metrics)\.({keys})\b|set \w+ = r\.metrics\b", text), \
            f"{path.name} reads metrics by hand: use r.key_metrics (engine/reports/metrics.py)"
        for value in defaults:
            assert not re.search(rf"[<>]=?\s*{re.escape(str(value))}\b", text), \
                f"{path.name} compares with the literal rule threshold {value}: read it from the metric row"


def test_key_metrics_follow_the_definition_and_the_rules():
    report = scenario_analysis("prefill_decode_nvtx")[1]  # has NVTX decode ranges, so throughput rows too
    rows = {row.key: row for row in report.key_metrics}
    # every metric in its place; the GPU-metrics rows only where the capture sampled GPU metrics
    assert list(rows) == [m.key for m in METRICS if m.report and not m.optional]
    sampled = {row.key: row for row in scenario_analysis("memory_bound_metrics")[1].key_metrics}
    assert list(sampled) == [m.key for m in METRICS if m.report and not m.is_throughput]
    assert sampled["dram_pct"].display == "88.3 %" and sampled["sm_active_pct"].doc.endswith("not throughput")
    overhead = rows["overhead_ratio"]
    assert (overhead.threshold, overhead.op, overhead.param) == (0.3, ">", "launch-bound.max_overhead_ratio")
    assert overhead.past is (overhead.value > 0.3)
    util = rows["gpu_utilization"]
    assert (util.threshold, util.op, util.param) == (0.5, "<", "low-utilization.min_utilization")
    assert rows["median_gap_ns"].threshold == rows["mean_kernel_ns"].value and rows["median_gap_ns"].param is None
    assert rows["kernel_count"].threshold is None and rows["kernel_count"].past is None
    assert rows["tokens_per_s"].display == "n/a (--tokens N)" and rows["decode_steps"].value == 40
    assert report.metrics == report.facts["summary"][0]  # the JSON `metrics` dict stays the summary row
    assert scenario_analysis("empty_capture")[1].key_metrics == []


def test_set_moves_the_threshold_every_renderer_shows():
    path = Path(scenario_analysis(GOLDEN_SCENARIO)[1].profile.path)
    report = diagnose(path, resolve_config(None, [], ["launch-bound.max_overhead_ratio=0.9",
                                                      "low-utilization.enabled=false"]))
    rows = {row.key: row for row in report.key_metrics}
    assert (rows["overhead_ratio"].threshold, rows["overhead_ratio"].past) == (0.9, False)
    assert rows["gpu_utilization"].threshold is None  # a disabled rule judges nothing
    md = render(report, "md")
    assert "&gt; 0.90 (`launch-bound.max_overhead_ratio`)" in md and "**0.63**" not in md
    assert "min_utilization" not in md.split("### Findings")[0]
    page = render(report, "html")
    card = re.search(r'<div class="metric( bad)?"><div class="v">0\.63</div>', page)
    assert card and card.group(1) is None
    assert re.search(r'class="metric bad"><div class="v">0\.63</div>', render(scenario_analysis(GOLDEN_SCENARIO)[1],
                                                                              "html"))


# ------------------------------------------------------------------------------------------------------------
# JSON and its Schemas
# ------------------------------------------------------------------------------------------------------------
@functools.cache
def _validator(kind: str = "report"):
    import jsonschema

    schema = shipped_schema(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("kind", SCHEMAS)
def test_shipped_schemas_are_generated_from_the_models(kind):
    shipped = (TEMPLATES / f"{kind}.schema.json").read_text(encoding="utf-8")
    assert shipped == schema_text(kind), \
        f"{kind}.schema.json is stale; regenerate: .venv/bin/python -m nsys_diagnose.reports.schema --write"
    schema = json.loads(shipped)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "const" in schema["properties"]["schema_version"]
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"nsys_diagnose\.templates" = \[[^\]]*"\*\.json"', pyproject)  # shipped in the wheel


def test_report_schema_describes_every_fact_column_from_its_header():
    schema = report_schema()
    assert schema["properties"]["schema_version"]["const"] == REPORT_SCHEMA_VERSION
    facts = load_facts()
    row = schema["$defs"]["fact_gap_histogram"]
    assert set(row["properties"]) == set(facts["gap_histogram"].column_names)
    doc = next(c.doc for c in facts["gap_histogram"].columns if c.name == "lower_ns")
    assert row["properties"]["lower_ns"]["description"].startswith(doc)
    assert set(schema["$defs"]["summary_metrics"]["properties"]) == set(facts["summary"].column_names)


@pytest.mark.parametrize("name", slow_but(NAMES, "eager_decode", "memory_bound_metrics"))
def test_json_report_validates_against_the_schema(name):
    data = json.loads(render(scenario_analysis(name)[1], "json"))
    errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in _validator().iter_errors(data)]
    assert not errors, errors[:5]
    assert list(data["metrics"]) == list(data["facts"].get("summary", [{}])[0])


def test_schema_rejects_a_report_that_drifts():
    data = json.loads(render(scenario_analysis(GOLDEN_SCENARIO)[1], "json"))
    v = _validator()
    data["findings"][0]["severity"] = "fatal"
    data["facts"]["kernel_summary"][0]["surprise"] = 1
    del data["verdict"]["headline"]
    assert len(list(v.iter_errors(data))) == 3


# ------------------------------------------------------------------------------------------------------------
# One renderer
# ------------------------------------------------------------------------------------------------------------
def test_render_dispatches_on_the_model_and_refuses_the_rest():
    report = scenario_analysis(GOLDEN_SCENARIO)[1]
    with pytest.raises(ValueError, match="unknown format"):
        render(report, "pdf")
    with pytest.raises(TypeError, match="cannot render"):
        render(report.verdict, "md")


def test_report_modules_import_no_private_names():
    for path in (REPO / "engine" / "reports").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from .{node.module}"


# ------------------------------------------------------------------------------------------------------------
# Terminal: one screen, colour only on a terminal
# ------------------------------------------------------------------------------------------------------------
def _fits_one_screen(text: str) -> None:
    lines = text.splitlines()
    assert len(lines) <= TERMINAL_LINES, f"{len(lines)} lines"
    assert max(len(ANSI.sub("", line)) for line in lines) <= TERMINAL_WIDTH


@pytest.mark.parametrize("name", slow_but(NAMES, "eager_decode", "multi_gpu_straggler"))
def test_terminal_summary_fits_one_screen(name):
    _fits_one_screen(render(scenario_analysis(name)[1], "terminal", colour=True))


def test_terminal_summary_sections():
    report = scenario_analysis("prefill_decode_nvtx")[1]
    text = render(report, "terminal")
    assert text.splitlines()[0].startswith(f"nsys-diagnose {report.tool_version} · ")
    assert f"VERDICT  {report.verdict.primary}" in text
    metrics = text.split("KEY METRICS\n")[1].split("\n\n")[0]
    for row in report.key_metrics:
        assert (row.group or row.short_label) in metrics and row.display in metrics, row.key
    assert f"FINDINGS ({len(report.findings)})" in text
    assert all(f"  {f.severity:<8} {f.rule}" in text for f in report.findings)
    assert re.search(r"RULES  \d+ fired · \d+ passed · \d+ skipped", text)
    coloured = render(report, "terminal", colour=True)
    assert "\x1b[31m0.45\x1b[0m" in coloured  # past its rule threshold


def test_terminal_summary_fits_one_screen_with_many_long_findings():
    report = scenario_analysis("cuda_api_only")[1]
    long = report.findings[0].model_copy(update={"message": "a long message " * 80,
                                                 "remediation": ["a long step " * 60] * 3})
    crowded = report.model_copy(update={"findings": [long] * 12, "skipped": report.skipped * 3,
                                        "verdict": report.verdict.model_copy(update={"headline": "x " * 400})})
    text = render(crowded, "terminal")
    _fits_one_screen(text)
    assert "more in the Markdown, HTML or JSON report" in text


class _Stdout(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty, args, env, coloured", [
    (True, [], {}, True),
    (False, [], {}, False),                      # piped
    (True, [], {"NO_COLOR": "1"}, False),
    (False, ["--color", "always"], {}, True),
    (True, ["--color", "never"], {}, False),
])
def test_terminal_colour_only_when_writing_to_a_terminal(monkeypatch, tty, args, env, coloured):
    report = scenario_analysis(GOLDEN_SCENARIO)[1]
    monkeypatch.setattr(cli, "diagnose", lambda *a, **k: report)  # the CLI's decision, not the analysis
    monkeypatch.delenv("NO_COLOR", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = _Stdout(tty)
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["profile.sqlite", "-q", *args]) == 0
    text = out.getvalue()
    assert ("\x1b[" in text) is coloured
    assert ANSI.sub("", text) == render(report, "terminal")


# ------------------------------------------------------------------------------------------------------------
# Markdown renders as a GitHub comment
# ------------------------------------------------------------------------------------------------------------
def _cells(row: str) -> list[str]:
    """GFM table cells: split on pipes not escaped with a backslash (code spans do not protect pipes)."""
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return re.split(r"(?<!\\)\|", row)


def markdown_tables(md: str) -> list[list[list[str]]]:
    tables, lines, i = [], md.splitlines(), 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and re.fullmatch(r"\s*\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*", lines[i + 1]):
            rows = [lines[i], lines[i + 1]]
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(lines[i])
                i += 1
            tables.append([_cells(r) for r in rows])
        else:
            i += 1
    return tables


def _github_html(md: str) -> str:
    import cmarkgfm
    from cmarkgfm.cmark import Options

    # Raw HTML passed through as GitHub does before its sanitiser, so anything that would become a tag shows up.
    return cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)


def check_markdown(md: str) -> str:
    assert len(md) <= GITHUB_COMMENT_LIMIT
    tables = markdown_tables(md)
    for table in tables:
        width = len(table[0])
        assert all(len(row) == width for row in table), [len(r) for r in table]
    rendered = _github_html(md)
    assert rendered.count("<table>") == len(tables)
    for body in re.findall(r"<table>(.*?)</table>", rendered, flags=re.S):
        counts = [len(re.findall(r"<t[hd][ >]", tr)) for tr in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)]
        assert len(set(counts)) == 1, counts
    tags = {t.lower() for t in re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", rendered)}
    assert tags <= {"h2", "h3", "h4", "blockquote", "p", "strong", "em", "code", "table", "thead", "tbody", "tr",
                    "th", "td", "ol", "ul", "li", "a", "details", "summary", "br", "pre"}, tags
    return rendered


@pytest.mark.parametrize("name", slow_but(NAMES, "eager_decode", "multi_gpu_straggler"))
def test_markdown_renders_as_a_github_comment(name):
    report = scenario_analysis(name)[1]
    md = render(report, "md")
    rendered = check_markdown(md)
    assert "<script" not in rendered
    assert md.startswith(f"## nsys-diagnose: {report.verdict.primary or 'no bottleneck found'}\n")
    assert f"### Findings ({len(report.findings)})" in md
    assert md.count("\n#### ") == len(report.findings)
    assert ("### Key metrics" in md) == bool(report.key_metrics)


def test_markdown_is_cut_to_the_github_limit_and_says_so():
    report = scenario_analysis(GOLDEN_SCENARIO)[1]
    long = report.findings[0].model_copy(update={"message": "a long message " * 400})
    crowded = report.model_copy(update={"findings": [long] * 40})
    md = render(crowded, "md")
    assert len(md) <= GITHUB_COMMENT_LIMIT
    assert md.endswith("see the JSON or HTML report for everything._\n")


def test_table_checker_catches_an_unescaped_pipe():
    bad = "| Kernel | Count |\n|---|---|\n| a|b | 1 |\n"
    assert [len(r) for r in markdown_tables(bad)[0]] == [2, 2, 3]
    assert [len(r) for r in markdown_tables(bad.replace("a|b", "a\\|b"))[0]] == [2, 2, 2]


# ------------------------------------------------------------------------------------------------------------
# HTML is self-contained
# ------------------------------------------------------------------------------------------------------------
ALLOWED_TAGS = {"html", "head", "meta", "link", "title", "style", "body", "main", "header", "section", "div", "span",
                "h1", "h2", "h3", "p", "figure", "figcaption", "code", "svg", "rect", "line", "text", "ul", "ol", "li",
                "strong", "table", "thead", "tbody", "tr", "th", "td", "article", "a", "footer", "polyline", "g"}


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.style += data


def check_html(doc: str) -> _Tags:
    parser = _Tags()
    parser.feed(doc)
    parser.close()
    names = {t for t, _ in parser.tags}
    assert names <= ALLOWED_TAGS, names - ALLOWED_TAGS
    csp = [a.get("content", "") for t, a in parser.tags if t == "meta" and a.get("http-equiv") ==
           "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0] and "script-src" not in csp[0]
    for tag, attrs in parser.tags:
        assert not any(k.startswith("on") or k in ("src", "srcset", "action", "formaction") for k in attrs), tag
        if "href" in attrs:  # links are navigation on click, never a load; the icon is inline
            assert (tag == "a" and re.match(r"https?://", attrs["href"])) or \
                   (tag == "link" and attrs["href"].startswith("data:")), (tag, attrs)
    assert "url(" not in parser.style and "@import" not in parser.style
    return parser


@pytest.mark.parametrize("name", slow_but(NAMES, "prefill_decode_nvtx"))
def test_html_is_self_contained_and_draws_its_charts(name):
    report = scenario_analysis(name)[1]
    parser = check_html(render(report, "html"))
    ids = {a.get("id") for _, a in parser.tags}
    assert {"verdict", "findings", "rules"} <= ids
    assert sum(1 for t, a in parser.tags if t == "article") == len(report.findings)
    if report.metrics.get("kernel_count"):
        assert {"metrics", "breakdown", "gaps", "timeline", "gpus"} <= ids
        # graph trace mode with no eager kernel: replays only, no kernel names to list
        assert ("kernels" in ids) == bool(report.facts.get("kernel_summary"))
        devices = len(report.facts["gpu_utilization"])
        svgs = sum(t == "svg" for t, _ in parser.tags)
        assert svgs >= 3 * devices  # breakdown, gap histogram, timeline per GPU (+ kernel share bars)
        cards = [a for t, a in parser.tags if t == "div" and a.get("class", "").startswith("metric")
                 and a.get("class") != "metrics"]
        assert len(cards) == len({r.group or r.key for r in report.key_metrics})


@pytest.mark.slow
def test_gap_histogram_is_numbers_and_the_page_names_the_buckets():
    facts = load_facts()
    assert "label" not in facts["gap_histogram"].column_names
    assert [bucket_label(lo, hi) for lo, hi in ((0, 1000), (5000, 10000), (100_000, 1_000_000), (10**7, None))] \
        == ["< 1 µs", "5-10 µs", "100 µs-1 ms", "> 10 ms"]
    for name in ("eager_decode", "multi_gpu_straggler", "graph_decode_graph"):
        report = scenario_analysis(name)[1]
        for dev in report.facts["kernel_gaps"]:
            if dev["stream_id"] is not None:
                continue
            buckets = [b for b in report.facts["gap_histogram"] if b["device_id"] == dev["device_id"]]
            assert len(buckets) == 10
            assert sum(b["total_gap_ns"] for b in buckets) == dev["total_gap_ns"]
            assert sum(b["gap_count"] for b in buckets) <= dev["gap_count"]  # back-to-back kernels leave no gap
            assert abs(sum(b["time_share"] for b in buckets) - 1) < 1e-9
        page = render(report, "html")
        assert all(f">{html.escape(bucket_label(b['lower_ns'], b['upper_ns']), quote=False)}</text>" in page
                   for b in report.facts["gap_histogram"])


def _gaps_between_kernels(path: Path) -> dict[int, list[tuple[int, int]]]:
    """Independent of the facts: per device, each gap between kernels (kernels of all streams merged) as
    (length, idle ns), idle being the part of the gap no copy or memset covers. Read from the export itself."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    ops: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for table, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "copy"),
                        ("CUPTI_ACTIVITY_KIND_MEMSET", "copy")):
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            for dev, start, end in con.execute(f"SELECT deviceId, start, end FROM {table}"):
                ops.setdefault(dev, {"kernel": [], "copy": []})[kind].append((start, end))
    con.close()
    out: dict[int, list[tuple[int, int]]] = {}
    for dev, kinds in ops.items():
        gaps, last_end = [], None
        for start, end in sorted(kinds["kernel"]):
            if last_end is not None and start > last_end:
                gaps.append((last_end, start))
            last_end = end if last_end is None else max(last_end, end)
        merged: list[list[int]] = []
        for start, end in sorted(kinds["copy"]):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out[dev] = [(g1 - g0, g1 - g0 - sum(max(min(e, g1) - max(s, g0), 0) for s, e in merged))
                    for g0, g1 in gaps]
    return out


@pytest.mark.parametrize("name", slow_but(["pageable_copies", "eager_decode", "hidden_copies", "multi_gpu_straggler"],
                                           "eager_decode", "multi_gpu_straggler"))
def test_the_gap_histogram_splits_the_time_between_kernels_into_idle_and_copies(name):
    """The idle time of each bucket is the part of its gaps between kernels that no copy or memset covers,
    computed here from the export's own rows; the rest of the gap is copy time, never idle."""
    report = scenario_analysis(name)[1]
    expected = _gaps_between_kernels(Path(report.profile.path))
    rows = report.facts["gap_histogram"]
    assert {r["device_id"] for r in rows} == set(expected)
    for dev, gaps in expected.items():
        buckets = [r for r in rows if r["device_id"] == dev]
        for b in buckets:
            inside = [g for g in gaps if g[0] >= b["lower_ns"] and (b["upper_ns"] is None or g[0] < b["upper_ns"])]
            assert (b["gap_count"], b["total_gap_ns"], b["idle_ns"]) == \
                   (len(inside), sum(g for g, _ in inside), sum(i for _, i in inside)), (dev, b["bucket"])
            assert b["idle_ns"] + b["copy_ns"] == b["total_gap_ns"]
    if name == "pageable_copies":  # 256 MiB pageable copies between the kernels: the time between them is copies
        (dev,) = expected
        assert sum(r["copy_ns"] for r in rows) > 0.99 * sum(r["total_gap_ns"] for r in rows)


def _svg_rects(doc: str, section: str) -> list[tuple[dict, str]]:
    """(attributes, tooltip) of each rect of one section of the HTML report."""
    body = re.search(rf'<section id="{section}">(.*?)</section>', doc, re.S).group(1)
    return [(dict(re.findall(r'([\w-]+)="([^"]*)"', attrs)), html.unescape(tip))
            for attrs, tip in re.findall(r"<rect ([^>]*)>(?:<title>(.*?)</title>)?", body, re.S)]


def test_a_pcie_bound_report_draws_copy_time_as_copies_not_as_idle():
    """pageable_copies: 99 % of the GPU's window is pageable copies between kernels. The gap histogram and the
    typical-stretch strip draw that time in the copies colour with a legend entry of its own; what they draw as
    idle is the idle time only."""
    from nsys_diagnose.reports.charts import IDLE_COLOUR, PART_COLOURS
    from nsys_diagnose.base.units import fmt_duration

    report = scenario_analysis("pageable_copies")[1]
    doc = render(report, "html")
    rows = report.facts["gap_histogram"]
    idle, copy = sum(r["idle_ns"] for r in rows), sum(r["copy_ns"] for r in rows)
    assert copy > 100 * idle
    # The histogram: per bucket, the idle rect's share of the bar is the bucket's idle share, no more.
    gaps = _svg_rects(doc, "gaps")
    idle_rects = [a for a, _ in gaps if a.get("class") == "idle"]
    copy_rects = [a for a, _ in gaps if a.get("class") == "copies"]
    assert {a["fill"] for a in idle_rects} == {IDLE_COLOUR}
    assert {a["fill"] for a in copy_rects} == {PART_COLOURS["copies"]}
    tallest = max(copy_rects, key=lambda a: float(a["height"]))
    assert float(tallest["height"]) > 100                       # the > 10 ms bucket: its 19 gaps are copies
    assert max(float(a["height"]) for a in idle_rects) < 1     # the idle in them is a sliver
    body = re.search(r'<section id="gaps">(.*?)</section>', doc, re.S).group(1)
    assert f"<strong>{fmt_duration(idle)} idle</strong>, <strong>{fmt_duration(copy)} copies only</strong>" in body
    assert "copies or memsets only, no kernel</li>" in body and "GPU idle, nothing running</li>" in body
    # The typical stretch: the mean gap is drawn as copies, not as waiting for the next kernel.
    strip = re.search(r'<figure>\s*<figcaption><strong>GPU 0, a typical stretch</strong>(.*?)</figure>', doc,
                      re.S).group(1)
    assert "between kernels the GPU mostly runs copies" in strip and "waits longer" not in strip
    rhythm = [(dict(re.findall(r'([\w-]+)="([^"]*)"', a))) for a in re.findall(r"<rect ([^>]*)>", strip)]
    drawn = sum(float(a["width"]) for a in rhythm if a["fill"] == PART_COLOURS["copies"])
    background = next(float(a["width"]) for a in rhythm if a["fill"] == "#fee2e2")
    kernels = sum(float(a["width"]) for a in rhythm if a["fill"] == "#2563eb")
    assert drawn > 0.95 * (background - kernels)                 # the gaps between the kernels are copies
    assert "copies or memsets only, no kernel</li>" in strip


def test_eager_decode_html_shows_the_gpu_idle_between_short_kernels():
    doc = render(scenario_analysis(GOLDEN_SCENARIO)[1], "html")
    assert "the GPU waits longer between kernels than the kernels run" in doc
    assert "Idle: launch cost" in doc
    assert re.search(r"mean kernel 5\.\d µs", doc)


# ------------------------------------------------------------------------------------------------------------
# Hostile kernel and NVTX names in every format
# ------------------------------------------------------------------------------------------------------------
MEGA = "void huge_kernel<" + "A" * (1 << 20) + ">(int)"
HOSTILE = [
    MEGA,
    "<script>alert('k')</script><img src=x onerror=alert(1)><a href=http://evil.example/>x</a>",
    "pipe|kernel`tick`[link](http://evil.example/a) ![i](http://evil.example/i.png) **b** <details>_u_",
    "\x1b[31mred\x1b[0m\x1b]8;;http://evil.example\x07osc\x1b]8;;\x07\x1b[2J\x9b31m",
    "nul\x00byte\x00kernel",
    "rtl\u202etxt.exe\u2066iso\u2069\u200f",
    "multi\nline\r\nname\t|tab",
    "&amp; &lt;b&gt; \\| \\` entity --> <!-- x",
]
FORBIDDEN = ("\x00", "\x1b", "\x9b", "\u202e", "\u2066", "\u200f")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, Report]:
    """eager_decode with its kernel names, NVTX texts and GPU name replaced by hostile strings."""
    path = tmp_path_factory.mktemp("hostile") / "hostile.sqlite"
    generate("eager_decode", path)
    con = sqlite3.connect(path)
    with con:
        # Rarest kernels first: the megabyte name on 25 rows, not 800 (it is copied into every row it names).
        kernels = con.execute("SELECT demangledName, shortName, mangledName FROM CUPTI_ACTIVITY_KIND_KERNEL "
                              "GROUP BY 1, 2, 3 ORDER BY count(*), 1").fetchall()
        for i, ids in enumerate(kernels):
            name = MEGA if i == 0 else HOSTILE[1 + (i - 1) % (len(HOSTILE) - 1)]
            con.executemany("UPDATE StringIds SET value = ? WHERE id = ?", [(name, x) for x in set(ids)])
        rows = con.execute("SELECT rowid FROM NVTX_EVENTS").fetchall()
        con.executemany("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?",
                        [(HOSTILE[1 + i % (len(HOSTILE) - 1)], r) for i, (r,) in enumerate(rows)])
        con.execute("UPDATE TARGET_INFO_GPU SET name = ?", (HOSTILE[2],))
    con.close()
    return path, analysis(path)[1]


def _no_controls(text: str) -> None:
    found = [c for c in FORBIDDEN if c in text]
    assert not found, [hex(ord(c)) for c in found]


def test_hostile_export_reaches_the_report(hostile):
    _, report = hostile
    names = [k["name"] for k in report.facts["kernel_summary"]]
    assert any(len(n) > 1 << 20 for n in names)
    assert any("<script>" in n for n in names) and any("\x1b" in n for n in names) and any("\x00" in n for n in names)


def test_hostile_names_are_inert_in_the_terminal(hostile):
    _, report = hostile
    plain = render(report, "terminal")
    _no_controls(plain)
    _fits_one_screen(plain)
    coloured = render(report, "terminal", colour=True)
    _no_controls(ANSI.sub("", coloured))
    assert ANSI.sub("", coloured) == plain


def test_hostile_names_are_inert_in_markdown(hostile):
    _, report = hostile
    md = render(report, "md")
    _no_controls(md)
    rendered = check_markdown(md)
    assert "evil.example" not in "".join(re.findall(r"<a [^>]*>", rendered))  # no link formed
    assert "&lt;script&gt;" in rendered and "<img" not in rendered
    assert len(md) < 40_000


def test_hostile_names_are_inert_in_html(hostile):
    _, report = hostile
    doc = render(report, "html")
    _no_controls(doc)
    parser = check_html(doc)
    assert "&lt;script&gt;alert" in doc and "<script" not in doc
    titles = [a["title"] for t, a in parser.tags if t == "td" and "title" in a]
    assert any("<script>alert('k')</script>" in t for t in titles)  # the full name, unescaped by the parser
    assert len(doc) < 200_000  # the megabyte name is shortened, its title attribute capped


def test_hostile_names_survive_json_exactly_and_inertly(hostile):
    _, report = hostile
    text = render(report, "json")
    _no_controls(text)
    data = json.loads(text)
    assert [k["name"] for k in data["facts"]["kernel_summary"]] == [k["name"] for k in report.facts["kernel_summary"]]
    assert not list(_validator().iter_errors(data))


@pytest.mark.slow
def test_cli_writes_the_html_report(hostile, tmp_path):
    path, report = hostile
    target = tmp_path / "report.html"
    p = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", str(path), "--format", "html",
                        "-o", str(target), "-q"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    assert target.read_text(encoding="utf-8") == render(report, "html")


# ------------------------------------------------------------------------------------------------------------
# Headless Chromium: renders the charts, no console error, no network request, a screenshot
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_html_in_headless_chromium(tmp_path, hostile):
    binary = require_chromium()
    pages = {"eager": tmp_path / "eager_decode_report.html", "hostile": tmp_path / "hostile_report.html"}
    pages["eager"].write_text(render(fixed(scenario_analysis(GOLDEN_SCENARIO)[1], GOLDEN_SCENARIO), "html"),
                              encoding="utf-8")
    pages["hostile"].write_text(render(hostile[1], "html"), encoding="utf-8")
    browser = Browser(binary, tmp_path / "chromium-profile", tmp_path / "chromium.log")
    try:
        s = browser.new_page(1280, 800)
        results = {}
        for key, page in pages.items():
            browser.send("Page.navigate", {"url": page.as_uri()}, session=s)
            browser.wait_for("Page.loadEventFired", s)
            probe = ("JSON.stringify({svg: document.querySelectorAll('svg').length, "
                     "rect: document.querySelectorAll('svg rect').length, "
                     "charts: ['breakdown', 'gaps', 'timeline'].filter(id => document.getElementById(id) && "
                     "document.getElementById(id).querySelector('svg').getBoundingClientRect().width > 600), "
                     "active: document.querySelectorAll('script, img, iframe, object, embed').length, "
                     "title: document.title, width: document.documentElement.scrollWidth})")
            results[key] = json.loads(browser.send("Runtime.evaluate", {"expression": probe, "returnByValue": True},
                                                   session=s)["result"]["value"])
            if key == "eager":
                ARTIFACTS.mkdir(exist_ok=True)
                first = browser.send("Page.captureScreenshot", {"format": "png"}, session=s)["data"]
                (ARTIFACTS / "eager_decode_report_first_screen.png").write_bytes(base64.b64decode(first))
                size = browser.send("Page.getLayoutMetrics", session=s)["cssContentSize"]
                full = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                               "clip": {"x": 0, "y": 0, "width": 1280,
                                                                        "height": size["height"], "scale": 1}},
                                    session=s)["data"]
                (ARTIFACTS / "eager_decode_report.png").write_bytes(base64.b64decode(full))
                pdf = browser.send("Page.printToPDF", {"printBackground": True}, session=s, timeout=60)["data"]
                assert base64.b64decode(pdf).startswith(b"%PDF")
        problems = page_problems(browser.events, {p.as_uri() for p in pages.values()})
    finally:
        browser.close()
    assert not problems, problems
    eager, bad = results["eager"], results["hostile"]
    assert eager["charts"] == ["breakdown", "gaps", "timeline"], eager
    assert eager["rect"] > 100 and eager["active"] == 0 and eager["title"].startswith("nsys-diagnose: launch-bound")
    assert eager["width"] <= 1280  # no horizontal scrolling on a laptop screen
    assert bad["active"] == 0 and bad["width"] <= 1280, bad
    assert (ARTIFACTS / "eager_decode_report.png").stat().st_size > 10_000


def test_html_shows_commands_in_skip_reasons_as_code_not_backticks():
    report = scenario_analysis("eager_decode")[1]  # no GPU metrics, no OS-runtime trace: skip reasons name commands
    html = render(report, "html")
    assert "<code>diagnose profile --gpu-metrics</code>" in html
    assert "<code>--gpu-metrics-devices=all</code>" in html
    assert "`" not in html
    hostile = report.model_copy(update={"skipped": [report.skipped[0].model_copy(
        update={"reason": "see `<script>alert(1)</script>` and `nsys`"})]})
    page = render(hostile, "html")
    assert "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in page and "<script>alert" not in page


def test_tokens_give_the_decode_steps_and_tpot_the_steps_block_and_verdict_show():
    """`--tokens 4096` on a run whose alike steps have no phase: the key metrics count the steps the STEPS block
    shows as decode steps, and the time per output token is per request, the median step, as the STEPS block's
    "TPOT ≥" and the batch what-if's "TPOT stays as measured" read it (docs/measures.md "Steps and phases")."""
    report = diagnose(REPO / "fixtures" / "examples" / "eager_decode.sqlite", tokens=4096)
    steps = report.facts["steps"]
    assert [s["phase"] for s in steps] == ["all"]
    t = report.throughput
    assert t is not None and t.decode_steps == steps[0]["step_count"] == 25
    assert t.time_per_token_ns == t.step_time_ns == steps[0]["median_step_ns"]
    assert t.tokens_per_s == pytest.approx(4096 / t.duration_ns * 1e9)
    text = render(report, "terminal")
    assert "no decode steps" not in text
    rows = {m.key: m for m in report.key_metrics}
    tpot = rows["time_per_token_ns"].display
    assert tpot == rows["step_time_ns"].display and f"TPOT ≥ {tpot}" in text
    assert "TPOT stays as measured" in text  # the verdict's what-if speaks of the same step
    # without --tokens nothing says the steps are decode steps: no token numbers
    assert diagnose(REPO / "fixtures" / "examples" / "eager_decode.sqlite").throughput is None


def test_mentions_in_names_notify_no_one_in_markdown():
    """A kernel or NVTX name holding '@user' or '@org/team' would ping them when the Markdown report is posted to
    a pull request: every name the Markdown shows keeps its text but mentions no one."""
    from nsys_diagnose.base.text import md_inline

    assert md_inline("k@host @alice (@org/team)") == "k@host @\u200dalice (@\u200dorg/team)"
    report = scenario_analysis("eager_decode")[1].model_copy(deep=True)
    for row in report.facts["kernel_summary"]:
        row["name"] = "@alice_" + str(row["name"])
    for f in report.findings:
        f.subject = "@org/team " + (f.subject or "")
        f.message = "@bob says " + f.message
    md = render(report, "md")
    assert "@\u200dalice" in md and "@\u200dorg/team" in md and "@\u200dbob" in md
    assert not re.search(r"(?<![\w@])@[A-Za-z0-9]", md), re.search(r".{20}(?<![\w@])@[A-Za-z0-9].{20}", md)


@pytest.mark.slow
def test_the_golden_reports_are_what_make_regen_writes():
    """A new rule or fact changes the layout goldens (every report lists each rule's outcome): the committed
    goldens must be the ones a fresh diagnosis renders, so a change that forgot `make regen` fails here."""
    from nsys_diagnose.authoring.regen import golden_files, scenario_analyses, stale_files

    analyses = scenario_analyses([GOLDEN_SCENARIO, *TEAM_TEMPLATE_SCENARIOS], workers=2)
    stale = stale_files(Path(__file__).resolve().parents[1], golden_files(lambda name: analyses[name][1]))
    assert stale == [], f"stale golden reports {', '.join(map(str, stale))}: {REGEN}"
