#!/usr/bin/env python3
"""The engine of the repository's GitHub Action (action.yml): diagnose profiles, or compare a before and an
after export, and attach the reports to the pull request.

    github_action.py report              run `diagnose` / `diagnose compare` as the INPUT_* variables ask, writing
                                         Markdown, HTML and JSON into a directory under $RUNNER_TEMP; set the
                                         step outputs. Exit 0, or 2 (3 for an internal error) when a profile or
                                         an input is bad, with the reason as an ::error:: annotation.
    github_action.py publish REPORT_DIR  append the Markdown to the job summary, post one pull-request comment
                                         (or update the one posted before) and exit with the gate's code.

Two commands, so that the HTML upload (actions/upload-artifact) runs between them: the comment then links to
the artifact, and the gate fails the job only after the report is uploaded and posted. Standard library only;
it calls the nsys-diagnose installed in the Python that runs it, and `gh api` for the comment
(https://docs.github.com/en/rest/issues/comments).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

# The action inputs this script reads, each from the environment variable INPUT_<NAME> (upper case, '-' -> '_')
# that action.yml sets; the other inputs (python-version, github-token) configure the steps around it.
REPORT_INPUTS = ("profiles", "before", "after", "fail-on", "fail-on-regression", "extra-args", "comment-key")
PUBLISH_INPUTS = ("comment", "upload-html")
ARTIFACT_URL_ENV = "NSYS_DIAGNOSE_ARTIFACT_URL"

EXIT_OK, EXIT_GATE, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3  # as engine/cli/exits.py
FORMATS = ("json", "md", "html")  # json first: its exit code and verdict are the run's
MANIFEST = "nsys-diagnose-action.json"
MARKER = "<!-- nsys-diagnose"
COMMENT_LIMIT = 65_536  # GitHub refuses a longer comment body
SUMMARY_LIMIT = 1_048_576  # GitHub drops a job summary over 1 MiB per step
CUT_NOTE_RESERVE = 1_500  # room kept for the note that says what was cut
MIN_CUT_SECTION = 2_000  # a shortened report smaller than this says too little: leave it out instead
PR_EVENTS = ("pull_request", "pull_request_target")
OPTIONS_SET_BY_THE_ACTION = ("-o", "--output", "-f", "--format", "--fail-on", "--fail-on-regression")


class StepError(Exception):
    """What stops the step: an input that cannot work or a profile `diagnose` refused (exit 2, or the tool's
    own code), shown as an ::error:: annotation."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class GhError(Exception):
    """`gh` could not list, post or update the comment."""


# ------------------------------------------------------------------------------------------------ workflow commands

def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def one_line(text: str) -> str:
    """Text for the log: a file name with a line break must not start a workflow command of its own."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", text)


def annotate(kind: str, message: str) -> None:
    """An ::error:: or ::warning:: annotation on the run (workflow commands, on standard output)."""
    print(f"::{kind} title=nsys-diagnose::{_escape_data(message)}", flush=True)


def write_outputs(env: Mapping[str, str], outputs: Mapping[str, str]) -> None:
    """Step outputs, in the multi-line form so that lists of paths survive."""
    target = env.get("GITHUB_OUTPUT")
    if not target:
        return
    with open(target, "a", encoding="utf-8") as out:
        for name, value in outputs.items():
            delimiter = f"ghadelimiter_{uuid.uuid4()}"
            out.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


# ------------------------------------------------------------------------------------------------------- settings

@dataclass(frozen=True)
class Settings:
    profiles: tuple[str, ...]
    before: str
    after: str
    fail_on: str
    gates: tuple[str, ...]
    extra_args: tuple[str, ...]
    key: str


def input_env_name(name: str) -> str:
    return "INPUT_" + name.upper().replace("-", "_")


def _input(env: Mapping[str, str], name: str) -> str:
    return env.get(input_env_name(name), "").strip()


def _words(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """An input holding several values, separated by spaces or new lines; quotes keep a value with spaces."""
    try:
        return tuple(shlex.split(_input(env, name)))
    except ValueError as exc:
        raise StepError(f"input {name}: {exc} (quote values with spaces, and close every quote)") from None


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = _input(env, name).lower()
    if not value:
        return default
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise StepError(f"input {name} must be true or false, not {value!r}")


def marker_key(text: str) -> str:
    """The key that tells this use's comment from another use's: safe inside an HTML comment."""
    key = re.sub(r"[^A-Za-z0-9._/:@+=-]+", "_", text.strip())
    return re.sub(r"-{2,}", "-", key)[:100] or "default"


def read_settings(env: Mapping[str, str]) -> Settings:
    profiles = expand_profiles(_words(env, "profiles"))
    before, after = _input(env, "before"), _input(env, "after")
    if bool(before) != bool(after):
        raise StepError("inputs before and after go together: give both exports to compare, or neither")
    if not profiles and not before:
        raise StepError("nothing to diagnose: set the input profiles, or before and after")
    fail_on, gates = _input(env, "fail-on"), _words(env, "fail-on-regression")
    if fail_on and not profiles:
        raise StepError("input fail-on gates the diagnosis of profiles, and none are given; "
                         "to gate a comparison use fail-on-regression")
    if gates and not before:
        raise StepError("input fail-on-regression gates a comparison: set before and after too")
    extra_args = _words(env, "extra-args")
    for arg in extra_args:
        if arg.split("=", 1)[0] in OPTIONS_SET_BY_THE_ACTION or re.fullmatch(r"-[of]\S+", arg):
            raise StepError(f"input extra-args: {arg} is set by the action (its own inputs choose the "
                             f"formats, the files and the gates)")
    key = _input(env, "comment-key") or "/".join(filter(None, (env.get("GITHUB_WORKFLOW"), env.get("GITHUB_JOB"))))
    return Settings(profiles=profiles, before=before, after=after, fail_on=fail_on, gates=gates,
                    extra_args=extra_args, key=marker_key(key))


def expand_profiles(patterns: Sequence[str]) -> tuple[str, ...]:
    """Paths as given, globs expanded (sorted); a directory stays one multi-rank run."""
    paths: list[str] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern, recursive=True))
            if not matches:
                raise StepError(f"input profiles: no file matches {pattern!r} (relative to {os.getcwd()})")
            paths.extend(matches)
        else:
            paths.append(pattern)
    return tuple(dict.fromkeys(paths))


# ------------------------------------------------------------------------------------------------------- diagnose

@dataclass(frozen=True)
class Target:
    """One `diagnose` or `diagnose compare` invocation, writing every format from one diagnosis."""
    kind: str  # "compare" or "profile"
    label: str
    stem: str
    inputs: tuple[str, ...]  # the positional arguments, compare included
    options: tuple[str, ...]  # gates and extra arguments

    def command(self, python: str, outputs: Mapping[str, Path]) -> list[str]:
        """Each -o file's extension chooses its format (`diagnose --help`)."""
        files = [arg for fmt in FORMATS for arg in ("--output", str(outputs[fmt]))]
        return [python, "-m", "nsys_diagnose.cli", *self.inputs, *files, "--quiet", *self.options]


@dataclass(frozen=True)
class Result:
    label: str
    kind: str
    exit_code: int
    verdict: str
    markdown: str
    html: str
    json: str


def _positional(path: str) -> str:
    return f"./{path}" if path.startswith("-") else path  # never read as an option


def _stem(path: str) -> str:
    name = Path(path.rstrip("/\\")).name
    for suffix in (".sqlite", ".nsys-rep"):
        name = name.removesuffix(suffix)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "profile"


def targets(settings: Settings) -> list[Target]:
    found: list[Target] = []
    if settings.before:
        gates = tuple(f"--fail-on-regression={gate}" for gate in settings.gates)
        found.append(Target(kind="compare", label=f"{settings.before} → {settings.after}", stem="compare",
                            inputs=("compare", _positional(settings.before), _positional(settings.after)),
                            options=(*gates, *settings.extra_args)))
    gate = ("--fail-on", settings.fail_on) if settings.fail_on else ()
    stems = {t.stem for t in found}
    for path in settings.profiles:
        stem, n = _stem(path), 2
        while stem in stems:
            stem, n = f"{_stem(path)}-{n}", n + 1
        stems.add(stem)
        found.append(Target(kind="profile", label=path, stem=stem, inputs=(_positional(path),),
                            options=(*gate, *settings.extra_args)))
    return found


def _error_sentence(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    return " ".join(errors or lines[-1:]) or "no message"


def verdict_of(document: Mapping[str, Any]) -> str:
    """`improved`/`regressed`/`unchanged` for a comparison; the primary bottleneck (or `none`) for a profile."""
    verdict = document.get("verdict")
    if isinstance(verdict, str):
        return verdict
    if isinstance(verdict, Mapping):
        return str(verdict.get("primary") or "none")
    return "unknown"


def run_target(target: Target, out_dir: Path, python: str) -> Result:
    paths = {fmt: out_dir / f"{target.stem}.{fmt}" for fmt in FORMATS}
    exit_code = EXIT_OK
    print(f"::group::nsys-diagnose {one_line(target.label)}", flush=True)
    try:
        command = target.command(python, paths)
        print("$ " + one_line(shlex.join(["diagnose", *command[3:]])), flush=True)
        done = subprocess.run(command, check=False, capture_output=True, text=True, encoding="utf-8",
                              errors="replace")
        sys.stdout.write(done.stderr)  # the crossed gates, or the error
        if done.returncode not in (EXIT_OK, EXIT_GATE):  # killed by signal N: exit 128+N, as the CLI does
            code = done.returncode if done.returncode > 0 else 128 - done.returncode
            raise StepError(f"{target.label}: {_error_sentence(done.stderr)}", exit_code=code)
        missing = [fmt for fmt in FORMATS if not paths[fmt].is_file()]
        if missing:  # an exit 1 without the reports is a crash, not a crossed gate
            raise StepError(f"{target.label}: diagnose exited {done.returncode} without writing the "
                             f"{', '.join(missing)} report: {_error_sentence(done.stderr)}", exit_code=EXIT_INTERNAL)
        exit_code = done.returncode
    finally:
        print("::endgroup::", flush=True)
    try:
        document = json.loads(paths["json"].read_text(encoding="utf-8"))
    except ValueError as exc:
        raise StepError(f"{target.label}: the JSON report is unreadable ({exc})", exit_code=EXIT_INTERNAL) from None
    return Result(label=target.label, kind=target.kind, exit_code=exit_code, verdict=verdict_of(document),
                  markdown=str(paths["md"]), html=str(paths["html"]), json=str(paths["json"]))


def report_directory(env: Mapping[str, str], key: str) -> Path:
    """Never beside the profile: a directory of this use (its key) under the runner's temporary directory,
    emptied first so that a report of an earlier use in the same job cannot be taken for this one's."""
    runner_temp = env.get("RUNNER_TEMP")
    if not runner_temp:
        return Path(tempfile.mkdtemp(prefix="nsys-diagnose-"))
    out_dir = Path(runner_temp) / "nsys-diagnose" / re.sub(r"[^A-Za-z0-9._-]+", "_", key)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    return out_dir


def report(env: Mapping[str, str]) -> int:
    if importlib.util.find_spec("nsys_diagnose") is None:
        raise StepError(f"nsys-diagnose is not installed in {sys.executable}; the action installs it with "
                         f"`pip install` from its own checkout", exit_code=EXIT_INTERNAL)
    settings = read_settings(env)
    out_dir = report_directory(env, settings.key)
    results = [run_target(target, out_dir, sys.executable) for target in targets(settings)]
    exit_code = EXIT_GATE if any(r.exit_code == EXIT_GATE for r in results) else EXIT_OK
    manifest = {"key": settings.key, "exit_code": exit_code,
                "reports": [asdict(r) for r in results]}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    write_outputs(env, {
        "verdict": " ".join(r.verdict for r in results),
        "exit-code": str(exit_code),
        "report-dir": str(out_dir),
        "markdown": "\n".join(r.markdown for r in results),
        "html": "\n".join(r.html for r in results),
        "json": "\n".join(r.json for r in results),
    })
    for r in results:
        crossed = " (gate crossed)" if r.exit_code == EXIT_GATE else ""
        print(f"nsys-diagnose: {one_line(r.label)}: {r.verdict}{crossed}")
    return EXIT_OK


# -------------------------------------------------------------------------------------------- comment composition

@dataclass(frozen=True)
class Section:
    label: str
    markdown: str


def size(text: str) -> int:
    """UTF-8 bytes: never fewer than the characters GitHub counts, and what the summary limit counts."""
    return len(text.encode("utf-8"))


def code_span(text: str) -> str:
    """A file name from the repository as inert Markdown: no link, mention or HTML can form in a code span."""
    text = " ".join(text.replace("`", "'").split())
    return "`" + (text if len(text) <= 160 else "…" + text[-159:]) + "`"  # the end of a path names the file


def cut_markdown(markdown: str, budget: int) -> str:
    """The first `budget` bytes of a report, ended at a paragraph and with its open code fence and
    <details> blocks closed, so that what follows the cut still renders."""
    closers_room = 200
    head = markdown.encode("utf-8")[:max(budget - closers_room, 0)].decode("utf-8", errors="ignore")
    paragraph_end = head.rfind("\n\n")
    head = (head[:paragraph_end] if paragraph_end > 0 else head).rstrip()
    closers: list[str] = []
    if sum(1 for line in head.splitlines() if line.lstrip().startswith("```")) % 2:
        closers.append("```")
    closers.extend(["</details>"] * max(head.count("<details") - head.count("</details>"), 0))
    closers.append("*… cut here to fit; the full report is linked below.*")
    return head + "\n\n" + "\n\n".join(closers)


def compose(sections: Sequence[Section], *, head: str, foot: str, limit: int) -> str:
    """head, the reports and foot within `limit` bytes: whole reports while they fit, the next one cut at a
    paragraph, the rest left out, and a note naming what was shortened or left out."""
    separator = "\n\n---\n\n"
    whole = head + separator.join(s.markdown.strip() for s in sections) + "\n\n" + foot
    if size(whole) <= limit:
        return whole
    budget = limit - size(head) - size(foot) - CUT_NOTE_RESERVE
    kept: list[str] = []
    shortened: list[str] = []
    left_out: list[str] = []
    for i, section in enumerate(sections):
        text = section.markdown.strip()
        needed = size(text) + size(separator)
        if needed <= budget:
            kept.append(text)
            budget -= needed
            continue
        if budget - size(separator) >= MIN_CUT_SECTION:
            kept.append(cut_markdown(text, budget - size(separator)))
            shortened.append(section.label)
        else:
            left_out.append(section.label)
        left_out.extend(s.label for s in sections[i + 1:])
        break
    note = f"**Cut to fit GitHub's limit of {limit:,} characters:**"
    if shortened:
        note += " shortened " + ", ".join(code_span(label) for label in shortened) + "."
    if left_out:
        names = ", ".join(code_span(label) for label in left_out)
        if size(names) > CUT_NOTE_RESERVE - 300:
            names = f"{len(left_out)} reports"
        note += " left out " + names + "."
    note += " The full reports are linked below."
    return head + separator.join(kept) + "\n\n" + note + "\n\n" + foot


def _links(env: Mapping[str, str], artifact_url: str, artifact_name: str) -> str:
    server = env.get("GITHUB_SERVER_URL", "https://github.com")
    parts = ["nsys-diagnose"]
    if artifact_url:
        parts.append(f"[HTML reports (artifact {code_span(artifact_name)})]({artifact_url})")
    if env.get("GITHUB_REPOSITORY") and env.get("GITHUB_RUN_ID"):
        run_url = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
        parts.append(f"[workflow run]({run_url})" + ("" if artifact_url else " (reports, summary)"))
    return "<sub>" + " · ".join(parts) + "</sub>"


# ------------------------------------------------------------------------------------------------ pull request

@dataclass(frozen=True)
class PullRequest:
    repository: str
    number: int
    head_sha: str
    from_fork: bool


def pull_request(env: Mapping[str, str]) -> PullRequest | None:
    """The pull request of a pull_request (or pull_request_target) event, from the event payload."""
    if env.get("GITHUB_EVENT_NAME") not in PR_EVENTS or not env.get("GITHUB_EVENT_PATH"):
        return None
    try:
        event = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pr = event.get("pull_request") if isinstance(event, dict) else None
    if not isinstance(pr, dict) or not isinstance(pr.get("number"), int):
        return None
    head, base = _mapping(pr, "head"), _mapping(pr, "base")
    head_repo, base_repo = _mapping(head, "repo").get("full_name"), _mapping(base, "repo").get("full_name")
    return PullRequest(repository=env.get("GITHUB_REPOSITORY") or str(base_repo or ""), number=pr["number"],
                       head_sha=str(head.get("sha") or ""), from_fork=head_repo not in (None, base_repo))


def _mapping(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, Mapping) else {}


class Gh:
    """`gh api` calls on one repository; gh reads its token from GH_TOKEN."""

    def __init__(self, env: Mapping[str, str]) -> None:
        host = (env.get("GITHUB_SERVER_URL") or "https://github.com").split("://", 1)[-1].strip("/")
        self.host_args = [] if host == "github.com" else ["--hostname", host]

    def api(self, *args: str, body: Mapping[str, Any] | None = None) -> str:
        command = ["gh", "api", *self.host_args, *args]
        if body is not None:
            command += ["--input", "-"]
        try:
            done = subprocess.run(command, input=json.dumps(body) if body is not None else None, check=False,
                                  capture_output=True, text=True, encoding="utf-8", timeout=120)
        except FileNotFoundError:
            raise GhError("the gh CLI is not installed on this runner") from None
        except subprocess.TimeoutExpired:
            raise GhError("gh api did not answer within 120 s") from None
        if done.returncode != 0:
            raise GhError(" ".join((done.stderr or done.stdout).split())[:500] or f"gh exited {done.returncode}")
        return done.stdout


def parse_pages(text: str) -> list[dict[str, Any]]:
    """The comments of `gh api --paginate`: one JSON array per page, written one after the other."""
    decoder, at = json.JSONDecoder(), 0
    items: list[dict[str, Any]] = []
    while (at := _skip_space(text, at)) < len(text):
        page, at = decoder.raw_decode(text, at)
        items.extend(c for c in (page if isinstance(page, list) else [page]) if isinstance(c, dict))
    return items


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _first_line(body: object) -> str:
    return str(body or "").split("\n", 1)[0].strip()


def upsert_comment(gh: Gh, pr: PullRequest, marker: str, body: str) -> str:
    """Update the comment whose first line is `marker`, or post it: one comment per use, however many pushes.
    (The first line, stripped: an edit in the web page may have turned the line ends into CR LF.)"""
    listing = gh.api("--paginate", f"repos/{pr.repository}/issues/{pr.number}/comments?per_page=100")
    try:
        existing = next((c for c in parse_pages(listing)
                         if _first_line(c.get("body")) == marker and isinstance(c.get("id"), int)), None)
    except ValueError as exc:
        raise GhError(f"could not read the list of comments: {exc}") from None
    if existing is not None:
        answer = gh.api("--method", "PATCH", f"repos/{pr.repository}/issues/comments/{existing['id']}",
                        body={"body": body})
    else:
        answer = gh.api("--method", "POST", f"repos/{pr.repository}/issues/{pr.number}/comments",
                        body={"body": body})
    try:
        return str(json.loads(answer).get("html_url", ""))
    except (ValueError, AttributeError):
        return ""


def publish(report_dir: Path, env: Mapping[str, str]) -> int:
    try:
        manifest = json.loads((report_dir / MANIFEST).read_text(encoding="utf-8"))
        sections = [Section(r["label"], Path(r["markdown"]).read_text(encoding="utf-8"))
                    for r in manifest["reports"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StepError(f"{report_dir} holds no reports of `github_action.py report` ({exc})") from None
    pr = pull_request(env)
    artifact_url = env.get(ARTIFACT_URL_ENV, "").strip()
    foot = _links(env, artifact_url, _input(env, "upload-html"))
    if pr is not None and pr.head_sha:
        foot = foot.removesuffix("</sub>") + f" · for {pr.head_sha[:7]}</sub>"

    if summary_file := env.get("GITHUB_STEP_SUMMARY"):
        with open(summary_file, "a", encoding="utf-8") as summary:
            summary.write(compose(sections, head="", foot=foot, limit=SUMMARY_LIMIT) + "\n")

    comment_url = ""
    if not _flag(env, "comment", default=True):
        print("nsys-diagnose: comment: false, no pull-request comment")
    elif pr is None:
        print(f"nsys-diagnose: a {env.get('GITHUB_EVENT_NAME') or 'non-pull-request'} event, not a pull "
              f"request: no comment (the report is in the job summary)")
    elif not (env.get("GH_TOKEN") or env.get("GITHUB_TOKEN")):
        annotate("warning", "no token to comment with: set the input github-token (the report is in the job "
                            "summary)")
    else:
        marker = f"{MARKER} key={manifest.get('key', 'default')} -->"
        body = compose(sections, head=marker + "\n", foot=foot, limit=COMMENT_LIMIT)
        try:
            comment_url = upsert_comment(Gh(env), pr, marker, body)
            print(f"nsys-diagnose: report attached to pull request #{pr.number}: {comment_url}")
        except GhError as exc:
            why = (" Pull requests from forks get a read-only token: the report is in the job summary"
                   + (" and the artifact." if artifact_url else ".")) if pr.from_fork else \
                " The job needs `permissions: pull-requests: write`; the report is in the job summary."
            annotate("warning", f"could not comment on pull request #{pr.number}: {exc}.{why}")
    write_outputs(env, {"comment-url": comment_url})
    return int(manifest.get("exit_code", EXIT_OK))


# ------------------------------------------------------------------------------------------------------------ main

def _usage() -> NoReturn:
    sys.stderr.write("usage: github_action.py report | github_action.py publish REPORT_DIR\n")
    sys.exit(EXIT_ERROR)


def main(argv: Sequence[str]) -> int:
    env = os.environ
    try:
        if list(argv) == ["report"]:
            return report(env)
        if len(argv) == 2 and argv[0] == "publish":
            return publish(Path(argv[1]), env)
        _usage()
    except StepError as exc:
        annotate("error", str(exc))
        write_outputs(env, {"exit-code": str(exc.exit_code)})
        return exc.exit_code
    except OSError as exc:  # the runner, not the reports: a full disk, an unwritable summary or output file
        annotate("error", f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
