"""End-to-end: the `diagnose` command as a user and a CI pipeline run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_in_process import run_cli

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "fixtures" / "examples"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`diagnose ARGS` in the test process (cli_in_process.py); run_subprocess is the command line end to end."""
    return run_cli(*args, cwd=cwd, drop_env=("NO_COLOR",))


def run_subprocess(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    return subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_terminal_summary_names_the_bottleneck_and_the_headline_metrics():
    p = run_subprocess(str(EXAMPLES / "eager_decode.sqlite"))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "VERDICT  launch-bound" in out
    for metric in ("GPU utilisation", "Kernels", "Gap mean / median", "Overhead ratio", "Launch calls",
                   "Launch latency", "GPU active time", "CPU time in CUDA", "Host-device copy time"):
        assert metric in out
    assert "\x1b[" not in out  # piped: no colour
    assert len(out.splitlines()) <= 60  # one screen


def test_json_carries_verdict_findings_and_facts(tmp_path):
    target = tmp_path / "report.json"
    p = run(str(EXAMPLES / "eager_decode.sqlite"), "--format", "json", "-o", str(target))
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    data = json.loads(target.read_text())
    assert data["verdict"]["primary"] == "launch-bound"
    f = next(f for f in data["findings"] if f["rule"] == "launch-bound")
    assert {"rule", "category", "severity", "message", "evidence", "impact", "remediation"} <= set(f)
    assert any(e["column"] == "overhead_ratio" and e["value"] > 0.3 for e in f["evidence"])
    assert data["facts"]["summary"][0]["kernel_count"] > 1000
    assert list(data["metrics"]) == list(data["facts"]["summary"][0])


def test_markdown_report(tmp_path):
    p = run(str(EXAMPLES / "eager_decode.sqlite"), "--format", "md")
    assert p.returncode == 0, p.stderr
    md = p.stdout
    assert md.startswith("## nsys-diagnose: launch-bound")
    assert "| Evidence | Observed | Threshold |" in md
    assert "<details><summary>Skipped rules" in md
    assert len(md) < 65_536


def test_fail_on_gates_ci():
    bad = run(str(EXAMPLES / "eager_decode.sqlite"), "--fail-on", "warning")
    assert bad.returncode == 1
    good = run(str(EXAMPLES / "healthy_prefill.sqlite"), "--fail-on", "warning")
    assert good.returncode == 0, good.stdout + good.stderr


def test_set_overrides_a_threshold_and_the_report_says_so():
    p = run(str(EXAMPLES / "eager_decode.sqlite"), "--set", "launch-bound.max_overhead_ratio=0.9", "-f", "md")
    assert p.returncode == 0, p.stderr
    assert "`launch-bound.max_overhead_ratio` | 0.9 | 0.3 | command line" in p.stdout
    assert "Warning: GPU starved by kernel-launch overhead" not in p.stdout


@pytest.mark.parametrize("args, message", [
    pytest.param(["/nonexistent/profile.sqlite"], "no such file", marks=pytest.mark.slow),
    (["{examples}/eager_decode.sqlite", "--set", "launch-bound.max_overhead=0.2"], "did you mean 'max_overhead_ratio'"),
    pytest.param(["{examples}/eager_decode.sqlite", "--set", "lauch-bound.max_overhead_ratio=0.2"],
                 "did you mean 'launch-bound'", marks=pytest.mark.slow),
    pytest.param(["{examples}/eager_decode.sqlite", "--set", "launch-bound.max_overhead_ratio=lots"],
                 "expected a number", marks=pytest.mark.slow),
])
def test_bad_input_gets_one_sentence_and_exit_2(args, message):
    p = run(*[a.format(examples=EXAMPLES) for a in args])
    assert p.returncode == 2
    assert message in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_not_a_sqlite_file(tmp_path):
    bogus = tmp_path / "report.sqlite"
    bogus.write_text("not a database")
    p = run(str(bogus))
    assert p.returncode == 2 and "neither an nsys SQLite export nor a PyTorch-profiler trace" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_config_file_in_working_directory_is_used(tmp_path):
    (tmp_path / "diagnose.yaml").write_text("rules:\n  launch-bound:\n    min_kernels: 100000\n")
    p = run(str(EXAMPLES / "eager_decode.sqlite"), "-f", "json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert not [f for f in data["findings"] if f["rule"] == "launch-bound"]
    assert data["overrides"][0]["target"] == "launch-bound.min_kernels"


@pytest.mark.slow
def test_tokens_turn_time_into_throughput():
    p = run(str(EXAMPLES / "eager_decode.sqlite"), "--tokens", "2000", "-f", "json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    t = data["throughput"]
    duration = data["profile"]["duration_ns"]
    assert t["tokens"] == 2000 and abs(t["tokens_per_s"] - 2000 / duration * 1e9) < 1e-6
    # per request, as TPOT is: the median of the decode steps the STEPS block shows (docs/measures.md)
    steps = data["facts"]["steps"][0]
    assert t["time_per_token_ns"] == steps["median_step_ns"] and t["decode_steps"] == steps["step_count"]
    text = run(str(EXAMPLES / "eager_decode.sqlite"), "--tokens", "2000").stdout
    assert "tokens/s" in text and "per output token" in text
    bad = run(str(EXAMPLES / "eager_decode.sqlite"), "--tokens", "-5")
    assert bad.returncode == 2 and "positive whole number" in bad.stderr


def test_fewer_tokens_than_decode_steps_is_refused_in_one_sentence():
    # 25 decode steps emit at least 25 tokens: --tokens 10 would print tokens/s beside a time per output token
    # that contradicts it, so it is a usage error (exit 2), not a report
    p = run(str(EXAMPLES / "eager_decode.sqlite"), "--tokens", "10")
    assert p.returncode == 2, p.stdout
    assert p.stderr.count("\n") == 1 and "fewer than the 25 decode steps" in p.stderr
    assert "tokens/s" not in p.stdout


CLI = REPO / "engine" / "cli"


def _cli_imports() -> dict[str, set[str]]:
    """engine/cli module -> the engine/cli modules it imports (anywhere in its body)."""
    import ast

    names = {p.stem for p in CLI.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in CLI.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= {node.module} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nsys_diagnose.cli"):
                found.add((node.module or "").rpartition(".")[2])
        graph[path.stem] = {m.split(".")[0] for m in found} & names - {path.stem}
    return graph


def test_main_dispatches_to_the_commands_and_no_command_imports_it():
    graph = _cli_imports()
    # Only the entry points (console.py, the console script's; __main__.py, python -m's) import the command line.
    assert not [m for m, deps in graph.items() if "main" in deps and m not in ("__main__", "console")]
    assert graph["main"] >= {"capture", "compare", "batch", "rules", "facts"}
    sources = {p.stem: p.read_text(encoding="utf-8") for p in CLI.glob("*.py")}
    # Every parser is the shared one of options.py, whose usage errors exit 2 with the usage line.
    assert [m for m, text in sources.items() if "ArgumentParser(" in text] == []
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:  # depth first: a module met again while still on the path closes a cycle
        assert module not in visiting, f"import cycle: {' -> '.join(visiting + [module])}"
        if module in done:
            return
        visiting.append(module)
        for dep in sorted(graph[module]):
            visit(dep)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


@pytest.mark.slow
@pytest.mark.parametrize("module", ["nsys_diagnose.cli", "nsys_diagnose.cli.main"])
def test_both_module_entry_points_run_every_command(module):
    for args in (["--help"], ["compare", "--help"], ["rules", "--help"], ["facts", "show", "--help"]):
        done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.startswith("usage: diagnose"), (args, done.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("word", ["compare", "rules", "facts"])
def test_a_file_named_like_a_command_is_a_profile(tmp_path, word):
    (tmp_path / word).write_bytes((EXAMPLES / "eager_decode.sqlite").read_bytes())
    p = run(word, "-q", "--no-cache", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "VERDICT  launch-bound" in p.stdout


@pytest.mark.slow
def test_rule_options_go_before_or_after_the_subcommand():
    pack = REPO / "examples" / "team-rules"
    before = run("rules", "--rule-dir", str(pack), "list")
    after = run("rules", "list", "--rule-dir", str(pack))
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert before.stdout == after.stdout and "acme/decode-step-budget" in after.stdout
    both = run("rules", "--rule-dir", str(pack), "explain", "acme/decode-step-budget", "--rule-dir", str(pack))
    assert both.returncode == 2 and "is already defined" in both.stderr  # the two lists add up
