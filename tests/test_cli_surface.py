"""The command line behaves the same way everywhere: --version, -q and --no-color on every command, help text
with the exit codes and no stray %%."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from nsys_diagnose.cli import batch as batchcli, compare as comparecli, facts as factscli, main as cli
from nsys_diagnose.cli import rules as rulescli
from nsys_diagnose.base.version import tool_version

from conftest import slow_but

COMMANDS = ([], ["compare"], ["batch"], ["rules"], ["facts"])
PARSERS = {"diagnose": cli.profile_parser, "compare": comparecli.parser, "batch": batchcli.parser,
           "rules": rulescli.parser, "facts": factscli.parser}


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w) or "diagnose")
def test_every_command_prints_the_version(words, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*words, "--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"nsys-diagnose {tool_version()}"


def _helps() -> dict[str, str]:
    out = {}
    for name, build in PARSERS.items():
        parser = build()
        out[name] = parser.format_help()
        for action in parser._actions:  # the subcommands' own help
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):
                out.update({f"{name} {word}": sub.format_help() for word, sub in choices.items()})
    return out


def test_help_states_the_exit_codes_and_shows_no_doubled_percent_sign() -> None:
    helps = _helps()
    assert {"diagnose", "compare", "rules", "rules test", "facts", "facts show"} <= set(helps)
    for name, text in helps.items():
        assert "%%" not in text, name
    for name in PARSERS:
        assert "Exit codes: 0 success" in helps[name], name
    assert "gpu_utilization:-5%" in helps["compare"] and "METRIC:-N% when it falls by more than N %" in \
        " ".join(helps["compare"].split())


# `rules check` compiles every rule and fact (seconds; the fast tier runs it once, in tests/test_team_rules.py), so
# its spellings of the flags are in the slow tier
@pytest.mark.parametrize("flags, words", [
    pytest.param(f, w, marks=pytest.mark.slow) if w == ["rules", "check"] else (f, w)
    for f in (["-q"], ["--no-color"], ["--color", "never"], ["-q", "--no-color"])
    for w in (["rules", "list"], ["rules", "check"], ["facts", "list"])])
def test_quiet_and_no_color_are_accepted_before_and_after_the_subcommand(words, flags, capsys) -> None:
    assert cli.main([words[0], *flags, *words[1:]]) == 0
    before = capsys.readouterr().out
    assert cli.main([*words, *flags]) == 0
    assert capsys.readouterr().out == before and before


def test_no_color_is_color_never_for_diagnose_and_compare(tmp_path: Path) -> None:
    for build, args in ((cli.profile_parser, ["x.sqlite"]), (comparecli.parser, ["a.sqlite", "b.sqlite"])):
        assert build().parse_args([*args, "--no-color"]).color == "never"
        assert build().parse_args(args).color == "auto"


@pytest.mark.slow
def test_rules_test_quiet_prints_only_failures_and_the_count(tmp_path: Path, capsys) -> None:
    from nsys_diagnose.diagnosis.rules import bundled_rules_dir
    test_file = bundled_rules_dir() / "capture" / "graph-mode-hides-kernels.test.yaml"  # two cases: seconds, not tens
    assert cli.main(["rules", "test", str(test_file)]) == 0
    loud = capsys.readouterr().out.splitlines()
    assert cli.main(["rules", "test", "-q", str(test_file)]) == 0
    quiet = capsys.readouterr().out.splitlines()
    assert len(loud) > 1 and all(line.startswith("ok") for line in loud[:-1])
    cases = len(yaml.safe_load(test_file.read_text(encoding="utf-8"))["cases"])
    assert quiet == [loud[-1]] == [f"{cases} passed, 0 failed"] and len(loud) == cases + 1


@pytest.mark.parametrize("words", slow_but([["rules", "list"], ["facts", "list"]], ["rules", "list"]))
def test_a_reader_that_goes_away_is_not_an_error(words) -> None:
    import subprocess
    diagnose = Path(sys.executable).with_name("diagnose")
    proc = subprocess.Popen([str(diagnose), *words], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # as `| head` does once it has what it wants, before the command writes
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 141)  # 141: killed-by-SIGPIPE, as a shell would report it
    assert err == b""


def test_help_lists_every_command_and_each_one_answers_to_its_word(capsys) -> None:
    """`diagnose --help` is where a user learns the commands: every command word the dispatcher knows is named
    there with its synopsis, and `diagnose WORD --help` describes that command."""
    text = " ".join(cli.profile_parser().format_help().split())
    assert set(cli.COMMANDS) == {"profile", "compare", "batch", "rules", "facts"}
    for word in cli.COMMANDS:
        assert f"`diagnose {word} " in text, word
        with pytest.raises(SystemExit) as exit_:
            cli.main([word, "--help"])
        assert exit_.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: diagnose {word}"), word


def test_diagnose_help_lists_every_subcommand_of_each_command() -> None:
    """The Commands paragraph of `diagnose --help` names each command's subcommands, as its parser defines them."""
    flat = " ".join(cli.profile_parser().format_help().split())
    for word, (build, _, _, (usage, _)) in cli.COMMANDS.items():
        assert f"`{usage}`" in flat, word
        subparsers = [a for a in build()._actions if isinstance(getattr(a, "choices", None), dict)]
        if not subparsers:
            continue
        listed = {alternative.split()[0] for alternative in usage.removeprefix(f"diagnose {word} ").split("|")}
        assert listed == set(subparsers[0].choices), f"`diagnose --help` lists {word} {sorted(listed)}"
