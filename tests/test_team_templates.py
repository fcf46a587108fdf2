"""Team rule templates cannot exhaust memory, run forever or crash the program (engine/diagnosis/templating.py).

Each attack is a team rule whose template misbehaves; `diagnose` must stop it with exit code 2 and one sentence
naming the rule, its file and the field, quickly and without large memory. The subprocesses run under an
address-space limit, so that on code without the limits an attack fails with MemoryError instead of taking
the machine's memory.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli_in_process import run_cli
from conftest import scenario_analysis, slow_but

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "examples" / "eager_decode.sqlite"
GOLDEN = REPO / "tests" / "golden" / "reports"

ADDRESS_SPACE_LIMIT = 3 * 1024 ** 3  # DuckDB needs about 1 GiB of address space to start
MAX_PEAK_RSS_KB = 1024 * 1024  # 1 GiB
MAX_WALL_S = 30  # a render stops after 2 s; the rest is starting Python and reading the export
KILL_AFTER_S = 90

# A rule on the bundled `summary` fact that fires on every export with GPU work.
RULE = """\
id: acme/x
title: Template attack
category: low-utilization
severity: warning
fact: summary
when:
  - gpu_utilization >= 0
label: {label}
message: {message}
why: A test.
remediation: [{remediation}]
"""


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_kb: int


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


def run(*args: str) -> Result:
    """The CLI in a subprocess, with its own peak RSS (os.wait4 reports it for this child alone)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "nsys_diagnose.cli.main", *args], stdout=out, stderr=err,
                                preexec_fn=_limit_address_space)
        killer = threading.Timer(KILL_AFTER_S, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return Result(proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                      wall, usage.ru_maxrss)


def team_dir(tmp_path: Path, *, message: str = "Fine.", label: str = "GPUs", remediation: str = "Nothing.") -> Path:
    d = tmp_path / "team"
    d.mkdir(exist_ok=True)
    (d / "x.yaml").write_text(RULE.format(message=json.dumps(message), label=json.dumps(label),
                                          remediation=json.dumps(remediation)))
    return d


# (template, what the sentence must say)
ATTACKS = {
    "string repeated 10**10 times": ("{{ 'x' * 10**10 }}", "would build a string of 10,000,000,000 characters"),
    "10 ** (10 ** 10)": ("{{ 10 ** (10 ** 10) }}", "would compute a number of about 30,000,000,001 bits"),
    "center(10**10)": ("{{ 'a'|center(10**10) }}", "uses a width of center() of 10,000,000,000"),
    "format with a * width": ("{{ '%0*d'|format(10**9, 1) }}", "uses a format width of 1,000,000,000"),
    "% with a huge width": ("{{ '%01000000000d' % 1 }}", "uses a format width of 1,000,000,000"),
    "replace on a big string": ("{% set s = 'x' * 60000 %}{{ s|replace('x', s) }}",
                                "would build a string of 3,600,000,000 characters"),
    "str.ljust": ("{{ 'x'.ljust(10**10) }}", "uses attribute 'ljust' of a str, which rule templates may not use"),
    "str.zfill": ("{{ 'x'.zfill(10**10) }}", "uses attribute 'zfill' of a str"),
    "join of a big list": ("{{ (['x' * 60000] * 100000)|join }}", "would build a list of 6,000,100,000"),
    "~ doubling": ("{% set s = 'x' * 60000 %}{% set s = s ~ s %}{% set s = s ~ s %}{{ s|length }}",
                   "would build a string of 120,000 characters"),
    "huge output": ("{% for i in range(10000) %}{{ 'x' * 60000 }}{% endfor %}", "renders more than 16,384 characters"),
    "lipsum": ("{{ lipsum(10**8) }}", "'lipsum' is undefined"),
    "nested range loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                           "calls range() for 100,000 numbers (at most 10,000 per call)"),
    "nested loops over a long string": (
        "{% set s = 'x' * 50000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
        "took longer than 2 s to render; simplify the template"),
    "recursive macro": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
                        "calls itself too deeply (endless recursion)"),
    "division by zero": ("{{ 1 / (row.used_devices - row.used_devices) }}", "divides by zero"),
    "undefined column": ("{{ row.nope }}", "'dict object' has no attribute 'nope'"),
    "attribute of an undefined column": ("{{ row.nope.x }}", "'dict object' has no attribute 'nope'"),
    "__class__": ("{{ row.__class__ }}", "uses attribute '__class__' of a dict, which rule templates may not use"),
    "''.__class__.__mro__": ("{{ ''.__class__.__mro__ }}", "uses attribute '__class__' of a str"),
    "str.format": ("{{ '{0.__class__}'.format(row) }}", "uses attribute 'format' of a str"),
    "type error": ("{{ row.kernel_count + 'a' }}", "failed: unsupported operand type(s) for +: 'int' and 'str'"),
    "map of a computed private attribute": ("{{ [row] | map(attribute='_' ~ '_class__') | list }}",
                                            "uses attribute '__class__' in map(), which rule templates may not use"),
}


def assert_one_sentence(result: Result, field: str, words: str) -> None:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("diagnose: error: "), lines[0]
    assert f'x.yaml: rule "acme/x": its {field} template ' in lines[0] and words in lines[0], lines[0]
    assert result.wall_s < MAX_WALL_S, f"took {result.wall_s:.1f} s"
    assert result.peak_rss_kb < MAX_PEAK_RSS_KB, f"peak RSS {result.peak_rss_kb // 1024} MiB"


@pytest.mark.parametrize("attack", slow_but(sorted(ATTACKS), "''.__class__.__mro__"))
def test_a_misbehaving_message_template_is_one_sentence_naming_the_rule(tmp_path, attack):
    template, words = ATTACKS[attack]
    result = run(str(EXAMPLE), "--rule-dir", str(team_dir(tmp_path, message=template)))
    assert_one_sentence(result, "message", words)


@pytest.mark.slow
def test_label_and_remediation_templates_are_named_too(tmp_path):
    label = run(str(EXAMPLE), "--rule-dir", str(team_dir(tmp_path, label="{{ 'x' * 10**10 }}")))
    assert_one_sentence(label, "label", "would build a string of 10,000,000,000 characters")
    step = run(str(EXAMPLE), "--rule-dir", str(team_dir(tmp_path, remediation="{{ 1 // 0 }}")))
    assert_one_sentence(step, "remediation 1", "divides by zero")


@pytest.mark.slow
def test_a_template_that_does_not_compile_stops_diagnose_before_the_profile_is_read(tmp_path):
    # Nothing here renders a template: the CLI runs in this process (the attacks above need a process of their own).
    syntax = run_cli(str(EXAMPLE), "--rule-dir", str(team_dir(tmp_path, message="GPU {{ row.used_devices }")))
    assert syntax.returncode == 2 and len(syntax.stderr.strip().splitlines()) == 1
    assert 'x.yaml:9:1: rule "acme/x": its message template has a syntax error: unexpected' in syntax.stderr
    # Jinja itself only notices an unknown filter in a branch when the branch runs
    hidden = "{% if row.kernel_count > 10**15 %}{{ row.kernel_count | nmu }}{% endif %}"
    unknown = run_cli(str(EXAMPLE), "--rule-dir", str(team_dir(tmp_path, remediation=hidden)))
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert ('x.yaml:11:15: rule "acme/x": its remediation 1 template uses the unknown filter \'nmu\'; '
            "did you mean 'num'?") in unknown.stderr


# Refused whatever the row, when the rule loads: by `rules check`, and by `diagnose` before the profile is read.
REFUSED = {
    "{{ self }}": "uses the name 'self', which rule templates may not use",
    "{{ x | map(attribute='__class__') }}": "uses attribute '__class__' in map(), which rule templates may not use",
    "{{ [row] | selectattr('__class__') | list }}": "uses attribute '__class__' in selectattr()",
    "{{ [row] | sum('__class__.__name__') }}": "uses attribute '__class__' in sum()",
    "{% filter map(attribute='__init__') %}x{% endfilter %}": "uses attribute '__init__' in map()",
}


@pytest.mark.parametrize("template", sorted(REFUSED))
def test_self_and_private_filter_attributes_are_refused_by_rules_check_and_diagnose(tmp_path, template):
    d = team_dir(tmp_path, message=template)
    f = d / "x.yaml"
    expected = f'{f}:9:1: rule "acme/x": its message template {REFUSED[template]}'
    check = run_cli("rules", "check", str(d))
    assert check.returncode == 2 and check.stdout.splitlines()[0].startswith(expected), check.stdout
    done = run_cli(str(EXAMPLE), "--rule-dir", str(d), "--no-cache", "-q")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stdout[-500:]
    assert done.stderr.startswith(f"diagnose: error: {expected}"), done.stderr
    assert "TemplateReference" not in done.stdout + done.stderr and "Undefined" not in done.stdout


CHECKED = """\
id: acme/x
title: Template errors
category: low-utilization
severity: warning
fact: summary
label: "GPU {{ row.used_devices }"
when:
  - gpu_utilization >= 0
message: "Busy {{ row.gpu_utilization | percentage }}"
why: A test.
remediation:
  - "Fine: {{ row.kernel_count | num }} kernels, {{ row.gpu_utilization | pct }} busy."
  - "Per kernel {{ row.gpu_active_ns / row.kernel_count }}"
  - "Class {{ row.__class__ }}"
  - "Padded {{ row.name.ljust(10) }}"
  - "Typo {{ row.kernel_cout }}"
  - "Big {{ 'x' * 10**10 }}"
"""


@pytest.mark.slow
def test_rules_check_lists_every_template_error_of_a_file(tmp_path):
    d = tmp_path / "team"
    d.mkdir()
    (d / "x.yaml").write_text(CHECKED)
    result = run("rules", "check", str(d))
    assert result.returncode == 2, result.stdout + result.stderr
    f = d / "x.yaml"
    assert result.stdout.splitlines() == [
        f"{f}:6:1: rule \"acme/x\": its label template has a syntax error: unexpected '}}'",
        f"{f}:9:1: rule \"acme/x\": its message template uses the unknown filter 'percentage'; "
        f"did you mean 'percent'?",
        f"{f}:13:5: rule \"acme/x\": its remediation 2 template divides by zero (with every column 0); "
        f"guard the division, e.g. {{% if row.x %}}...{{% endif %}}",
        f"{f}:14:5: rule \"acme/x\": its remediation 3 template uses attribute '__class__', which rule templates "
        f"may not use; a template may read row, params and impact, call get/items/keys/values on them, a few "
        f"string methods and the filters listed in docs/team-rules.md",
        f"{f}:15:5: rule \"acme/x\": its remediation 4 template uses attribute 'ljust', which rule templates "
        f"may not use; a template may read row, params and impact, call get/items/keys/values on them, a few "
        f"string methods and the filters listed in docs/team-rules.md",
        f"{f}:16:5: rule \"acme/x\": its remediation 5 template reads something undefined: 'dict object' has no "
        f"attribute 'kernel_cout'; use the fact's columns (row.NAME), the rule's params (params.NAME) and impact",
        f"{f}:17:5: rule \"acme/x\": its remediation 6 template would build a string of 10,000,000,000 characters "
        f"(a template may build at most 65,536); simplify the template",
        "checked 1 rule file: 7 errors",
    ]
    assert result.wall_s < MAX_WALL_S and result.peak_rss_kb < MAX_PEAK_RSS_KB


@pytest.mark.slow
def test_rules_check_lists_template_errors_beside_another_error(tmp_path):
    d = team_dir(tmp_path, message="{{ row.gpu_utilization | pcent }}")
    f = d / "x.yaml"
    f.write_text(f.read_text().replace("gpu_utilization >= 0", "gpu_utilisation >= 0"))
    result = run_cli("rules", "check", str(d))
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        f"{f}:7:5: rule \"acme/x\": fact 'summary' has no column 'gpu_utilisation'; did you mean 'gpu_utilization'?",
        f"{f}:9:1: rule \"acme/x\": its message template uses the unknown filter 'pcent'; did you mean 'percent'?",
        "checked 1 rule file: 2 errors",
    ]


@pytest.mark.slow
def test_renders_in_threads_are_bounded_each_and_restore_the_trace_function():
    """Multi-rank runs render in worker threads: a slow template stops on its own thread only."""
    from nsys_diagnose.diagnosis.templating import TemplateFailure, render

    slow = "{% set s = 'x' * 50000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"
    quick = "{% for i in range(3) %}{{ row.x | num }} {% endfor %}"
    results: dict[str, object] = {}

    def work(name: str, template: str) -> None:
        start = time.monotonic()
        try:
            results[name] = render(template, {"row": {"x": 1234}, "params": {}, "impact": None})
        except TemplateFailure as exc:
            results[name] = exc
        results[name + " s"] = time.monotonic() - start

    before = sys.gettrace()
    threads = [threading.Thread(target=work, args=("slow", slow))]
    threads += [threading.Thread(target=work, args=(f"quick {i}", quick)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert isinstance(results["slow"], TemplateFailure)
    assert str(results["slow"]) == "took longer than 2 s to render; simplify the template"
    assert 1.9 < results["slow s"] < 10
    assert all(results[f"quick {i}"] == "1,234 1,234 1,234" for i in range(4))
    assert sys.gettrace() is before


@pytest.mark.parametrize("scenario", ["eager_decode", "multi_gpu_straggler", "pageable_copies"])
def test_bundled_rules_render_the_golden_messages(scenario):
    _, report = scenario_analysis(scenario)
    golden = json.loads((GOLDEN / f"{scenario}.json").read_text())["findings"]
    got = [(f.rule, f.subject, f.message, f.remediation) for f in report.findings]
    assert got == [(f["rule"], f["subject"], f["message"], f["remediation"]) for f in golden]
    assert got
