"""The GitHub Action (action.yml + tools/github_action.py) end to end, with a fake `gh` first on PATH that
records every call and answers `gh api` from a state file as GitHub's REST API would: one comment per use,
updated on later pushes; the job summary and the step outputs; the gate's exit code after the comment; bad
profiles as ::error::, gh failures as ::warning::; comments cut to GitHub's limit.

One real diagnosis (three formats of one small bundled export) is shared by the module; the publish step
runs in a fraction of a second each time."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "github_action.py"
EXAMPLES = REPO / "fixtures" / "examples"
EAGER = EXAMPLES / "eager_decode.sqlite"
GRAPHS = EXAMPLES / "graph_decode_node.sqlite"
REPOSITORY, PR_NUMBER, RUN_ID, HEAD_SHA = "acme/llm-serve", 7, "4242", "0123456789abcdef0123456789abcdef01234567"
ARTIFACT_URL = f"https://github.com/{REPOSITORY}/actions/runs/{RUN_ID}/artifacts/99"

FAKE_GH = r'''
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
stdin = sys.stdin.read() if "--input" in args else ""
with open(os.environ["FAKE_GH_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({"argv": args, "stdin": stdin, "token": os.environ.get("GH_TOKEN")}) + "\n")
state_file = Path(os.environ["FAKE_GH_STATE"])
state = json.loads(state_file.read_text(encoding="utf-8"))
if state.get("fail"):
    sys.stderr.write(state["fail"] + "\n")
    sys.exit(1)
method = args[args.index("--method") + 1] if "--method" in args else "GET"
endpoint = next(a for a in args if a.startswith("repos/")).split("?")[0]
comments = state["comments"]
if method == "GET" and endpoint.endswith("/comments") and "--paginate" in args:
    per_page = state.get("per_page", 2)
    pages = [comments[i:i + per_page] for i in range(0, len(comments), per_page)] or [[]]
    sys.stdout.write("".join(json.dumps(page) for page in pages))  # as `gh api --paginate` writes them
elif method == "POST" and endpoint.endswith("/comments"):
    state["next_id"] += 1
    comment = {"id": state["next_id"], "body": json.loads(stdin)["body"], "user": {"login": "github-actions[bot]"},
               "html_url": f"https://github.com/{endpoint.split('/')[1]}/{endpoint.split('/')[2]}/pull/"
                           f"{endpoint.split('/')[4]}#issuecomment-{state['next_id']}"}
    comments.append(comment)
    print(json.dumps(comment))
elif method == "PATCH" and "/issues/comments/" in endpoint:
    comment = next(c for c in comments if c["id"] == int(endpoint.rsplit("/", 1)[1]))
    comment["body"] = json.loads(stdin)["body"]
    print(json.dumps(comment))
else:
    sys.stderr.write(f"fake gh: unexpected call {args}\n")
    sys.exit(2)
state_file.write_text(json.dumps(state), encoding="utf-8")
'''


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("github_action", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


action = _load_script()


def read_outputs(path: Path) -> dict[str, str]:
    """$GITHUB_OUTPUT as the runner reads it: name<<DELIMITER, the value's lines, DELIMITER."""
    lines, outputs, i = path.read_text(encoding="utf-8").splitlines(), {}, 0
    while i < len(lines):
        name, delimiter = lines[i].split("<<", 1)
        end = lines.index(delimiter, i + 1)
        outputs[name] = "\n".join(lines[i + 1:end])
        i = end + 1
    return outputs


@dataclass
class Job:
    """A job's environment: event payload, output and summary files, and a fake gh with its state and log."""
    root: Path
    env: dict[str, str]

    @classmethod
    def make(cls, root: Path, *, event: str = "pull_request", fork: bool = False) -> Job:
        root.mkdir(parents=True, exist_ok=True)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        gh = bin_dir / "gh"
        gh.write_text(f"#!{sys.executable}\n{FAKE_GH}", encoding="utf-8")
        gh.chmod(0o755)
        head_repo = "someone/llm-serve" if fork else REPOSITORY
        (root / "event.json").write_text(json.dumps({"pull_request": {
            "number": PR_NUMBER, "head": {"sha": HEAD_SHA, "repo": {"full_name": head_repo}},
            "base": {"repo": {"full_name": REPOSITORY}}}}), encoding="utf-8")
        (root / "runner").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_", "GH_"))}
        env.update({
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_GH_LOG": str(root / "gh.jsonl"), "FAKE_GH_STATE": str(root / "gh-state.json"),
            "GITHUB_EVENT_NAME": event, "GITHUB_EVENT_PATH": str(root / "event.json"),
            "GITHUB_REPOSITORY": REPOSITORY, "GITHUB_RUN_ID": RUN_ID, "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_WORKFLOW": "perf", "GITHUB_JOB": "profile",
            "GITHUB_OUTPUT": str(root / "output"), "GITHUB_STEP_SUMMARY": str(root / "summary.md"),
            "RUNNER_TEMP": str(root / "runner"), "GH_TOKEN": "token-of-the-job",
            "INPUT_UPLOAD_HTML": "nsys-diagnose", action.ARTIFACT_URL_ENV: ARTIFACT_URL,
        })
        job = cls(root, env)
        job.set_state(comments=[])
        return job

    def set_state(self, *, comments: list[dict], fail: str = "") -> None:
        (self.root / "gh-state.json").write_text(json.dumps(
            {"comments": comments, "next_id": 1000, "per_page": 2, "fail": fail}), encoding="utf-8")

    def run(self, *args: str, **inputs: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **{action.input_env_name(k.replace("_", "-")): v for k, v in inputs.items()}}
        return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, cwd=REPO, capture_output=True,
                              text=True, timeout=120, check=False)

    def gh_calls(self) -> list[dict]:
        log = self.root / "gh.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def methods(self) -> list[str]:
        return [c["argv"][c["argv"].index("--method") + 1] if "--method" in c["argv"] else "GET"
                for c in self.gh_calls()]

    def comments(self) -> list[dict]:
        return json.loads((self.root / "gh-state.json").read_text())["comments"]

    def outputs(self) -> dict[str, str]:
        return read_outputs(self.root / "output")

    def summary(self) -> str:
        return (self.root / "summary.md").read_text(encoding="utf-8")


@dataclass
class Diagnosed:
    job: Job
    done: subprocess.CompletedProcess[str]
    outputs: dict[str, str]
    report_dir: Path
    examples_before: list[str]


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory: pytest.TempPathFactory) -> Diagnosed:
    """The report step, once for the module: one bundled export with a launch-bound warning, gated on warnings."""
    job = Job.make(tmp_path_factory.mktemp("report-job"))
    examples_before = sorted(p.name for p in EXAMPLES.iterdir())
    done = job.run("report", profiles=str(EAGER.relative_to(REPO)), fail_on="warning")
    outputs = job.outputs()
    return Diagnosed(job, done, outputs, Path(outputs.get("report-dir", job.root / "missing")), examples_before)


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return Job.make(tmp_path / "job")


def marker_of(body: str) -> str:
    return body.splitlines()[0]


# -------------------------------------------------------------------------------------------------- report step

@pytest.mark.slow
def test_report_writes_every_format_under_runner_temp_and_sets_the_outputs(diagnosed: Diagnosed):
    assert diagnosed.done.returncode == 0, diagnosed.done.stdout + diagnosed.done.stderr
    out = diagnosed.outputs
    assert out["verdict"] == "launch-bound"
    assert out["exit-code"] == "1"  # the gate is crossed, and applied only at the end of the publish step
    runner_temp = Path(diagnosed.job.env["RUNNER_TEMP"])
    assert runner_temp in diagnosed.report_dir.parents
    for fmt in ("markdown", "html", "json"):
        assert Path(out[fmt]).is_file() and Path(out[fmt]).parent == diagnosed.report_dir
    assert Path(out["markdown"]).read_text(encoding="utf-8").startswith("## nsys-diagnose: launch-bound")
    assert Path(out["html"]).read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert json.loads(Path(out["json"]).read_text(encoding="utf-8"))["verdict"]["primary"] == "launch-bound"
    assert sorted(p.name for p in EXAMPLES.iterdir()) == diagnosed.examples_before  # nothing beside the profile
    assert diagnosed.job.gh_calls() == []


def test_a_bad_profile_fails_the_step_with_the_sentence_as_an_error(job: Job, tmp_path: Path):
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not an export\n")
    done = job.run("report", profiles=str(bad))
    assert done.returncode == 2
    errors = [line for line in done.stdout.splitlines() if line.startswith("::error title=nsys-diagnose::")]
    assert len(errors) == 1 and "bad.sqlite" in errors[0] and "error:" in errors[0], done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert job.outputs()["exit-code"] == "2"
    assert job.gh_calls() == []


@pytest.mark.parametrize("inputs, says", [
    ({}, "nothing to diagnose"),
    ({"before": "a.sqlite"}, "before and after go together"),
    ({"profiles": "runs/*.nothing-matches"}, "no file matches"),
    ({"profiles": "a.sqlite", "fail_on_regression": "gpu_utilization:-5%"}, "gates a comparison"),
    ({"before": "a.sqlite", "after": "b.sqlite", "fail_on": "warning"}, "fail-on-regression"),
    ({"profiles": "a.sqlite", "extra_args": "--tokens 64 -o x.md"}, "-o is set by the action"),
    ({"profiles": "a.sqlite", "extra_args": "--config 'unclosed"}, "close every quote"),
])
def test_inputs_that_cannot_work_are_one_sentence(inputs: dict[str, str], says: str):
    env = {action.input_env_name(k.replace("_", "-")): v for k, v in inputs.items()}
    with pytest.raises(action.StepError, match=re.escape(says)):
        action.read_settings(env)


def test_an_input_error_is_an_error_annotation_and_exit_2(job: Job):
    done = job.run("report", before="a.sqlite")
    assert done.returncode == 2
    assert done.stdout.startswith("::error title=nsys-diagnose::inputs before and after go together")


def test_profiles_and_gates_split_on_spaces_and_new_lines_and_globs_expand(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    for name in ("b.sqlite", "a.sqlite", "c.txt"):
        (tmp_path / name).touch()
    monkeypatch.chdir(tmp_path)
    settings = action.read_settings({"INPUT_PROFILES": "*.sqlite\n'with space.sqlite'", "INPUT_BEFORE": "-x.sqlite",
                                     "INPUT_AFTER": "b.sqlite",
                                     "INPUT_FAIL_ON_REGRESSION": "gpu_utilization:-5%\noverhead_ratio:+0.05"})
    compare, *profiles = action.targets(settings)
    assert compare.inputs == ("compare", "./-x.sqlite", "b.sqlite")  # never read as an option
    assert compare.options == ("--fail-on-regression=gpu_utilization:-5%", "--fail-on-regression=overhead_ratio:+0.05")
    assert [p.label for p in profiles] == ["a.sqlite", "b.sqlite", "with space.sqlite"]
    assert len({t.stem for t in (compare, *profiles)}) == 4


# ------------------------------------------------------------------------------------------------- publish step

def test_first_run_posts_one_comment_with_the_marker_and_then_applies_the_gate(diagnosed: Diagnosed, job: Job):
    done = job.run("publish", str(diagnosed.report_dir), comment="true")
    assert done.returncode == 1, done.stdout + done.stderr  # the gate, after the comment and the summary
    assert job.methods() == ["GET", "POST"]
    assert all(call["token"] == "token-of-the-job" for call in job.gh_calls())
    listing = job.gh_calls()[0]["argv"]
    assert "--paginate" in listing and f"repos/{REPOSITORY}/issues/{PR_NUMBER}/comments?per_page=100" in listing
    [comment] = job.comments()
    body = comment["body"]
    assert marker_of(body) == "<!-- nsys-diagnose key=perf/profile -->"
    report_md = Path(diagnosed.outputs["markdown"]).read_text(encoding="utf-8").strip()
    assert report_md in body
    assert f"[HTML reports (artifact `nsys-diagnose`)]({ARTIFACT_URL})" in body
    assert f"https://github.com/{REPOSITORY}/actions/runs/{RUN_ID}" in body and HEAD_SHA[:7] in body
    assert len(body) <= action.COMMENT_LIMIT
    assert report_md in job.summary() and "<!-- nsys-diagnose" not in job.summary()
    assert job.outputs()["comment-url"] == comment["html_url"]


def test_a_later_push_updates_the_comment_instead_of_adding_one(diagnosed: Diagnosed, job: Job):
    first = job.run("publish", str(diagnosed.report_dir))
    [posted] = job.comments()
    job.set_state(comments=[  # the comment among others, on the second page of the listing
        {"id": 1, "body": "LGTM", "html_url": "u1"},
        {"id": 2, "body": "<!-- nsys-diagnose key=perf/other-job -->\nanother use of the action", "html_url": "u2"},
        {**posted, "body": posted["body"].replace("launch-bound", "stale verdict").replace("\n", "\r\n")},
        {"id": 3, "body": "quoting: <!-- nsys-diagnose key=perf/profile -->", "html_url": "u3"},
    ])
    second = job.run("publish", str(diagnosed.report_dir))
    assert (first.returncode, second.returncode) == (1, 1)
    assert job.methods() == ["GET", "POST", "GET", "PATCH"]
    assert job.gh_calls()[-1]["argv"][-3] == f"repos/{REPOSITORY}/issues/comments/{posted['id']}"
    comments = {c["id"]: c["body"] for c in job.comments()}
    assert len(comments) == 4 and comments[posted["id"]] == posted["body"]
    assert comments[2].endswith("another use of the action")


@pytest.mark.parametrize("event, comment", [("push", "true"), ("pull_request", "false")])
def test_no_gh_call_outside_pull_requests_or_when_comment_is_false(diagnosed: Diagnosed, tmp_path: Path,
                                                                   event: str, comment: str):
    job = Job.make(tmp_path / "job", event=event)
    done = job.run("publish", str(diagnosed.report_dir), comment=comment)
    assert done.returncode == 1 and job.gh_calls() == []
    assert "## nsys-diagnose: launch-bound" in job.summary()
    assert job.outputs()["comment-url"] == ""
    assert "::warning" not in done.stdout and "::error" not in done.stdout


def test_a_refused_comment_on_a_fork_is_a_warning_and_the_gate_still_decides(diagnosed: Diagnosed, tmp_path: Path):
    job = Job.make(tmp_path / "job", fork=True)
    job.set_state(comments=[], fail="HTTP 403: Resource not accessible by integration "
                                    f"(https://api.github.com/repos/{REPOSITORY}/issues/{PR_NUMBER}/comments)")
    done = job.run("publish", str(diagnosed.report_dir))
    assert done.returncode == 1  # the gate's code, as with a working gh: not a failure of its own
    [warning] = [line for line in done.stdout.splitlines() if line.startswith("::warning")]
    assert "HTTP 403" in warning and "forks get a read-only token" in warning
    assert "::error" not in done.stdout and "Traceback" not in done.stderr
    assert "## nsys-diagnose: launch-bound" in job.summary()


def test_no_gh_on_the_runner_is_a_warning(diagnosed: Diagnosed, job: Job):
    (job.root / "bin" / "gh").unlink()
    job.env["PATH"] = str(job.root / "bin")  # neither the fake gh nor any other
    done = job.run("publish", str(diagnosed.report_dir))
    assert done.returncode == 1
    assert "::warning title=nsys-diagnose::could not comment on pull request #7: the gh CLI is not installed" \
        in done.stdout


def test_a_long_comment_is_cut_to_githubs_limit_and_says_where_the_rest_is(diagnosed: Diagnosed):
    report_md = Path(diagnosed.outputs["markdown"]).read_text(encoding="utf-8")
    sections = [action.Section(f"runs/rank{i}.sqlite", report_md) for i in range(12)]  # > 65,536 characters
    head = "<!-- nsys-diagnose key=perf/profile -->\n"
    foot = action._links({"GITHUB_REPOSITORY": REPOSITORY, "GITHUB_RUN_ID": RUN_ID}, ARTIFACT_URL, "nsys-diagnose")
    body = action.compose(sections, head=head, foot=foot, limit=action.COMMENT_LIMIT)
    assert len(report_md) * 12 > action.COMMENT_LIMIT >= len(body.encode("utf-8"))
    assert body.startswith(head) and body.endswith(foot)
    assert body.count("## nsys-diagnose: launch-bound") < 12
    assert "Cut to fit GitHub's limit of 65,536 characters" in body and "`runs/rank11.sqlite`" in body
    assert body.count("<details") == body.count("</details>")
    assert sum(1 for line in body.splitlines() if line.lstrip().startswith("```")) % 2 == 0
    kept = body.count("## nsys-diagnose: launch-bound")
    assert body.count(report_md.strip()) >= kept - 1  # whole reports, at most the last one shortened


def test_a_report_that_fits_is_left_whole():
    sections = [action.Section("a.sqlite", "## one"), action.Section("b.sqlite", "## two")]
    assert action.compose(sections, head="H\n", foot="F", limit=1000) == "H\n## one\n\n---\n\n## two\n\nF"


# ------------------------------------------------------------------------------------------------- action.yml

@pytest.fixture(scope="module")
def action_yml() -> dict:
    return yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))


def _script_steps(action_yml: dict) -> Iterator[dict]:
    return (s for s in action_yml["runs"]["steps"] if "tools/github_action.py" in s.get("run", ""))


def test_action_yml_runs_the_script_by_its_repo_path_with_the_inputs_it_reads(action_yml: dict):
    assert action_yml["runs"]["using"] == "composite"
    steps = {s["id"]: s for s in _script_steps(action_yml)}
    assert set(steps) == {"report", "publish"}
    for command, step in steps.items():
        assert f'"$GITHUB_ACTION_PATH/tools/{SCRIPT.name}" {command}' in step["run"]
        assert "${{" not in step["run"]  # inputs reach the script through env, never spliced into the shell
    for step_id, names in (("report", action.REPORT_INPUTS), ("publish", action.PUBLISH_INPUTS)):
        given = {k: v for k, v in steps[step_id]["env"].items() if k.startswith("INPUT_")}
        assert given == {action.input_env_name(n): f"${{{{ inputs.{n} }}}}" for n in names}
    assert steps["publish"]["env"][action.ARTIFACT_URL_ENV] == "${{ steps.upload.outputs.artifact-url }}"


def test_action_yml_declares_only_inputs_that_are_used_and_pins_actions(action_yml: dict):
    inputs = set(action_yml["inputs"])
    assert set(action.REPORT_INPUTS) | set(action.PUBLISH_INPUTS) <= inputs
    text = (REPO / "action.yml").read_text(encoding="utf-8")
    for name in inputs:
        assert f"inputs.{name} " in text or f"inputs.{name}}}" in text, f"input {name} is declared but unused"
    uses = [s["uses"] for s in action_yml["runs"]["steps"] if "uses" in s]
    assert uses and all(re.fullmatch(r"actions/[a-z-]+@v\d+", u) for u in uses)
    step_ids = {s.get("id") for s in action_yml["runs"]["steps"]}
    for name, output in action_yml["outputs"].items():
        assert re.fullmatch(r"\$\{\{ steps\.([a-z-]+)\.outputs\.[a-z-]+ \}\}", output["value"]).group(1) in step_ids
    steps = action_yml["runs"]["steps"]
    order = [s.get("id") for s in steps]
    assert order.index("report") < order.index("upload") < order.index("publish") == len(steps) - 1


# ---------------------------------------------------------------------------------------------------- slow tier

@pytest.mark.slow(reason="a comparison in three formats (six diagnoses); the fast tier walks the same steps")
def test_compare_before_after_gates_a_regression_and_posts_it(job: Job):
    done = job.run("report", before=str(GRAPHS), after=str(EAGER),
                   fail_on_regression="gpu_utilization:-5%\noverhead_ratio:+0.05", comment_key="compare")
    assert done.returncode == 0, done.stdout + done.stderr
    out = job.outputs()
    assert (out["verdict"], out["exit-code"]) == ("regressed", "1")
    assert Path(out["markdown"]).name == "compare.md" and Path(out["html"]).is_file()
    assert "gpu_utilization" in done.stdout  # the crossed gates are named in the log
    published = job.run("publish", out["report-dir"])
    assert published.returncode == 1
    [comment] = job.comments()
    assert marker_of(comment["body"]) == "<!-- nsys-diagnose key=compare -->"
    assert "## nsys-diagnose compare: regressed" in comment["body"]
