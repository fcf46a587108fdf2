"""Reports: golden files of every renderer on every fixture scenario, hostile names in every format, the HTML in
headless Chromium, GitHub table syntax of the Markdown, the JSON Schema, the one-screen terminal summary.

Golden files live in tests/golden/reports/<scenario>.{txt,md,html,json}. After an intended change to a template,
a fact or a rule, refresh them and review the diff:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_reports.py
    git diff tests/golden/reports

They are rendered with the profile path replaced by `<scenario>.sqlite` and tool_version by `0.0.0+golden`; the
JSON goldens round floats to 6 significant digits (DuckDB's parallel sums may differ in the last bits).

The Chromium test needs `chromium` (Debian package; CHROMIUM=/path/to/binary overrides): without it the test is
skipped, or fails when CI is set. It saves tests/artifacts/eager_decode_report.png (the whole page) and
tests/artifacts/eager_decode_report_first_screen.png (1280x800, what a laptop shows first); both git-ignored.
"""

from __future__ import annotations

import base64
import difflib
import html.parser
import io
import json
import os
import queue
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import analysis, scenario_analysis
from nsys_diagnose.cli import main as cli
from nsys_diagnose.fixtures.generator import SCENARIOS, generate
from nsys_diagnose.reports.model import REPORT_SCHEMA_VERSION, Report
from nsys_diagnose.reports.render import (FORMATS, GITHUB_COMMENT_LIMIT, TERMINAL_LINES, TERMINAL_WIDTH, render,
                                  render_html, render_json, render_markdown, render_terminal)
from nsys_diagnose.reports.schema import report_schema, schema_text, shipped_schema

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "reports"
ARTIFACTS = REPO / "tests" / "artifacts"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
EXTENSIONS = {"terminal": "txt", "md": "md", "html": "html", "json": "json"}
NAMES = sorted(SCENARIOS)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def golden_report(name: str) -> Report:
    """The scenario's report with what differs between machines fixed."""
    report = scenario_analysis(name)[1]
    return report.model_copy(update={"tool_version": "0.0.0+golden",
                                     "profile": report.profile.model_copy(update={"path": f"{name}.sqlite"})})


def _round(value):
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, list):
        return [_round(v) for v in value]
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def golden_text(report: Report, fmt: str) -> str:
    text = render(report, fmt)
    if fmt == "json":
        text = json.dumps(_round(json.loads(text)), indent=2, ensure_ascii=False) + "\n"
    return text


# ------------------------------------------------------------------------------------------------------------
# Golden files
# ------------------------------------------------------------------------------------------------------------
def test_every_format_is_offered_by_the_cli():
    assert set(FORMATS) == set(EXTENSIONS)


@pytest.mark.parametrize("fmt", list(EXTENSIONS))
@pytest.mark.parametrize("name", NAMES)
def test_golden(name, fmt):
    report = golden_report(name)
    text = golden_text(report, fmt)
    assert str(scenario_analysis(name)[1].profile.path) not in text  # nothing machine-specific is left
    path = GOLDEN / f"{name}.{EXTENSIONS[fmt]}"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"{path} is missing: run UPDATE_GOLDEN=1 pytest tests/test_reports.py"
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                                 str(path), "rendered", n=1))[:80])
        pytest.fail(f"{name} {fmt} report differs from its golden file (UPDATE_GOLDEN=1 refreshes it):\n{diff}")


def test_no_stale_golden_files():
    expected = {f"{n}.{ext}" for n in NAMES for ext in EXTENSIONS.values()}
    assert {p.name for p in GOLDEN.iterdir()} == expected


# ------------------------------------------------------------------------------------------------------------
# JSON Schema
# ------------------------------------------------------------------------------------------------------------
def _validator():
    import jsonschema

    schema = shipped_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_shipped_schema_is_current_and_versioned():
    assert (REPO / "reports" / "templates" / "report.schema.json").read_text(encoding="utf-8") == schema_text(), \
        "regenerate: python -m nsys_diagnose.reports.schema > reports/templates/report.schema.json"
    schema = report_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema_version"] == {"const": REPORT_SCHEMA_VERSION}
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"nsys_diagnose\.templates" = \[[^\]]*"\*\.json"', pyproject)  # shipped in the wheel


@pytest.mark.parametrize("name", NAMES)
def test_json_report_validates_against_the_schema(name):
    data = json.loads(render_json(scenario_analysis(name)[1]))
    errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in _validator().iter_errors(data)]
    assert not errors, errors[:5]


def test_schema_rejects_a_report_that_drifts():
    data = json.loads(render_json(scenario_analysis("eager_decode")[1]))
    v = _validator()
    data["findings"][0]["severity"] = "fatal"
    data["facts"]["kernel_summary"][0]["surprise"] = 1
    del data["verdict"]["headline"]
    assert len(list(v.iter_errors(data))) == 3


# ------------------------------------------------------------------------------------------------------------
# Terminal: one screen, colour only on a terminal
# ------------------------------------------------------------------------------------------------------------
def _fits_one_screen(text: str) -> None:
    lines = text.splitlines()
    assert len(lines) <= TERMINAL_LINES, f"{len(lines)} lines"
    assert max(len(ANSI.sub("", line)) for line in lines) <= TERMINAL_WIDTH


@pytest.mark.parametrize("name", NAMES)
def test_terminal_summary_fits_one_screen(name):
    _fits_one_screen(render_terminal(scenario_analysis(name)[1], colour=True))


def test_terminal_summary_fits_one_screen_with_many_long_findings():
    report = scenario_analysis("cuda_api_only")[1]
    long = report.findings[0].model_copy(update={"message": "a long message " * 80,
                                                 "remediation": ["a long step " * 60] * 3})
    crowded = report.model_copy(update={"findings": [long] * 12, "skipped": report.skipped * 3,
                                        "verdict": report.verdict.model_copy(update={"headline": "x " * 400})})
    text = render_terminal(crowded)
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
    report = scenario_analysis("eager_decode")[1]
    monkeypatch.setattr(cli, "diagnose", lambda *a, **k: report)  # the CLI's decision, not the analysis
    monkeypatch.delenv("NO_COLOR", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = _Stdout(tty)
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["profile.sqlite", "-q", *args]) == 0
    text = out.getvalue()
    assert ("\x1b[" in text) is coloured
    assert ANSI.sub("", text) == render_terminal(report)


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
                    "th", "td", "ol", "ul", "li", "a", "details", "summary", "br"}, tags
    return rendered


@pytest.mark.parametrize("name", NAMES)
def test_markdown_renders_as_a_github_comment(name):
    md = render_markdown(scenario_analysis(name)[1])
    rendered = check_markdown(md)
    assert md.count("\n|") > 0 or name in ("empty_capture", "nvtx_only", "cuda_api_only")
    assert "<script" not in rendered


def test_table_checker_catches_an_unescaped_pipe():
    bad = "| Kernel | Count |\n|---|---|\n| a|b | 1 |\n"
    assert [len(r) for r in markdown_tables(bad)[0]] == [2, 2, 3]
    assert [len(r) for r in markdown_tables(bad.replace("a|b", "a\\|b"))[0]] == [2, 2, 2]


# ------------------------------------------------------------------------------------------------------------
# HTML is self-contained
# ------------------------------------------------------------------------------------------------------------
ALLOWED_TAGS = {"html", "head", "meta", "link", "title", "style", "body", "main", "header", "section", "div", "span",
                "h1", "h2", "h3", "p", "figure", "figcaption", "svg", "rect", "line", "text", "ul", "ol", "li",
                "strong", "table", "thead", "tbody", "tr", "th", "td", "article", "a", "footer"}


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
    assert sum(t == "svg" for t, _ in parser.tags) >= 1 or "<h2>Where each GPU" not in doc
    return parser


@pytest.mark.parametrize("name", NAMES)
def test_html_is_self_contained_and_draws_its_charts(name):
    report = scenario_analysis(name)[1]
    parser = check_html(render_html(report))
    ids = {a.get("id") for _, a in parser.tags}
    assert {"verdict", "findings", "rules"} <= ids
    if report.metrics.get("kernel_count"):
        assert {"metrics", "breakdown", "gaps", "timeline", "kernels", "gpus"} <= ids
        devices = len(report.facts["gpu_utilization"])
        svgs = sum(t == "svg" for t, _ in parser.tags)
        assert svgs >= 3 * devices  # breakdown, gap histogram, timeline per GPU (+ kernel share bars)


def test_gap_histogram_adds_up_to_the_device_gaps():
    for name in ("eager_decode", "multi_gpu_straggler", "graph_decode_graph"):
        facts = scenario_analysis(name)[1].facts
        for dev in facts["kernel_gaps"]:
            if dev["stream_id"] is not None:
                continue
            buckets = [b for b in facts["gap_histogram"] if b["device_id"] == dev["device_id"]]
            assert len(buckets) == 10
            assert sum(b["total_gap_ns"] for b in buckets) == dev["total_gap_ns"]
            assert sum(b["gap_count"] for b in buckets) <= dev["gap_count"]  # back-to-back kernels leave no gap
            assert abs(sum(b["time_share"] for b in buckets) - 1) < 1e-9


def test_eager_decode_html_shows_the_gpu_idle_between_short_kernels():
    doc = render_html(golden_report("eager_decode"))
    assert "the GPU waits longer between kernels than the kernels run" in doc
    assert "Idle: next kernel launched too late" in doc
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
    plain = render_terminal(report)
    _no_controls(plain)
    _fits_one_screen(plain)
    coloured = render_terminal(report, colour=True)
    _no_controls(ANSI.sub("", coloured))
    assert ANSI.sub("", coloured) == plain


def test_hostile_names_are_inert_in_markdown(hostile):
    _, report = hostile
    md = render_markdown(report)
    _no_controls(md)
    rendered = check_markdown(md)
    assert "evil.example" not in "".join(re.findall(r"<a [^>]*>", rendered))  # no link formed
    assert "&lt;script&gt;" in rendered and "<img" not in rendered
    assert len(md) < 40_000


def test_hostile_names_are_inert_in_html(hostile):
    _, report = hostile
    doc = render_html(report)
    _no_controls(doc)
    parser = check_html(doc)
    assert "&lt;script&gt;alert" in doc and "<script" not in doc
    titles = [a["title"] for t, a in parser.tags if t == "td" and "title" in a]
    assert any("<script>alert('k')</script>" in t for t in titles)  # the full name, unescaped by the parser
    assert len(doc) < 200_000  # the megabyte name is shortened, its title attribute capped


def test_hostile_names_survive_json_exactly_and_inertly(hostile):
    _, report = hostile
    text = render_json(report)
    _no_controls(text)
    data = json.loads(text)
    assert [k["name"] for k in data["facts"]["kernel_summary"]] == [k["name"] for k in report.facts["kernel_summary"]]
    assert not list(_validator().iter_errors(data))


def test_cli_writes_the_html_report(hostile, tmp_path):
    path, report = hostile
    target = tmp_path / "report.html"
    p = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", str(path), "--format", "html", "-o", str(target),
                        "-q"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    assert target.read_text(encoding="utf-8") == render_html(report)


# ------------------------------------------------------------------------------------------------------------
# Headless Chromium: renders the charts, no console error, no network request, a screenshot
# ------------------------------------------------------------------------------------------------------------
def _chromium() -> str | None:
    override = os.environ.get("CHROMIUM")
    if override:
        return override
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Browser:
    """Chromium driven through the DevTools protocol over --remote-debugging-pipe (fd 3 in, fd 4 out)."""

    def __init__(self, binary: str, profile_dir: Path, log: Path):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
                 f"--user-data-dir={profile_dir}", "--remote-debugging-pipe", "about:blank"]
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}', binary, *flags],
            pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._messages: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                self._messages.put(None)
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for m in messages:
                self._messages.put(json.loads(m))

    def _next(self, deadline: float) -> dict:
        try:
            msg = self._messages.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise TimeoutError("Chromium did not answer in time") from None
        if msg is None:
            raise RuntimeError("Chromium exited")
        if "method" in msg:
            self.events.append(msg)
        return msg

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def wait_for(self, method: str, session: str, timeout: float = 30) -> dict:
        seen = len(self.events)
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events[seen:]:
                if e["method"] == method and e.get("sessionId") == session:
                    return e
            seen = len(self.events)
            self._next(deadline)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        self._log.close()


def _problems(events: list[dict], allowed_urls: set[str]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Network.requestWillBeSent" and p["request"]["url"] not in allowed_urls \
                and not p["request"]["url"].startswith("data:"):
            out.append(f"request: {p['request']['url'][:200]}")
        elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"log: {p['entry'].get('text', '')[:300]}")
        elif e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            out.append(f"console: {str(p.get('args'))[:300]}")
        elif e["method"] in ("Runtime.exceptionThrown", "Page.javascriptDialogOpening"):
            out.append(f"{e['method']}: {str(p)[:300]}")
    return out


def test_html_in_headless_chromium(tmp_path, hostile):
    binary = _chromium()
    if not binary:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is required in CI: apt-get install chromium (see .ci/run)")
        pytest.skip("chromium not installed (apt-get install chromium); CI=true makes this a failure")
    pages = {"eager": tmp_path / "eager_decode_report.html", "hostile": tmp_path / "hostile_report.html"}
    pages["eager"].write_text(render_html(golden_report("eager_decode")), encoding="utf-8")
    pages["hostile"].write_text(render_html(hostile[1]), encoding="utf-8")
    browser = Browser(binary, tmp_path / "chromium-profile", tmp_path / "chromium.log")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            browser.send(f"{domain}.enable", session=s)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}, session=s)
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
        problems = _problems(browser.events, {p.as_uri() for p in pages.values()})
    finally:
        browser.close()
    assert not problems, problems
    eager, bad = results["eager"], results["hostile"]
    assert eager["charts"] == ["breakdown", "gaps", "timeline"], eager
    assert eager["rect"] > 100 and eager["active"] == 0 and eager["title"].startswith("nsys-diagnose: launch-bound")
    assert eager["width"] <= 1280  # no horizontal scrolling on a laptop screen
    assert bad["active"] == 0 and bad["width"] <= 1280, bad
    assert (ARTIFACTS / "eager_decode_report.png").stat().st_size > 10_000
