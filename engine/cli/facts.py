"""`diagnose facts list|show|test`: the facts rules read, bundled and team ones, the rows of one fact on an
export, and the tests beside the facts. Its command line is parser(), beside run()."""

from __future__ import annotations

import argparse
import math
import textwrap
from pathlib import Path
from typing import Any

from ..runs.api import load_pack
from ..diagnosis.ruleset import RuleSet
from ..diagnosis.config import Config, ConfigError, resolve_config
from ..authoring.facttest import bundled_fact_tests, find_fact_tests, run_fact_tests, fact_test_file
from ..runs.multirank import diagnose_ranks, run_facts_of
from ..diagnosis.rules import load_rules
from ..base.duck import reraise_interrupt
from ..base.errors import DiagnoseError, InputError
from ..pack.apinames import load_api_names
from ..pack.stacks import load_stacks
from ..pack.opclasses import load_operation_classes
from ..facts.catalog import Fact, with_needs
from ..facts.loading import bundled_fact_files, load_facts
from ..base.text import did_you_mean
from ..facts.compute import FactResult, compute_facts
from ..facts.cross_rank import load_run_facts
from ..reading.export import open_export
from ..reading.ranks import resolve_run
from ..base.text import term
from ..base.units import describe_range
from .exits import EXIT_FINDINGS, EXIT_OK, exit_codes_help
from .interrupt import StopRequest
from .options import (CommandParser, add_cache, add_colour, add_config, add_debug, add_quiet, add_set, add_version,
                      positive_int_of)
from .output import check_output, emit
from .progress import Progress
from .tables import ROW_FORMATS, csv_table, json_document, terminal_table

_WIDTH = 100


def parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="diagnose facts",
                        description="The facts rules read: documented SQL over the canonical views of an export, "
                                    "bundled and from team rule directories.",
                        epilog=(epilog := exit_codes_help("facts")))
    add_config(p)
    add_quiet(p)
    add_colour(p, None)
    add_debug(p)
    add_version(p)
    sub = p.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    listing = sub.add_parser("list", help="every fact: name, what it holds, columns, params; helpers and team facts "
                                          "marked")
    listing.add_argument("-f", "--format", choices=("terminal", "json"), default="terminal",
                         help="readable blocks (default), or JSON with every doc, column and @check")
    show = sub.add_parser("show", help="compute one fact (and the facts it needs) on an export and print its rows",
                          description="Compute one fact, and the facts it needs, on an export and print its rows. "
                                      "A cross-rank fact (rank_balance) reads the exports of a multi-rank run: give "
                                      "two or more, or their directory.")
    show.add_argument("fact", metavar="FACT", help="a fact name, as `diagnose facts list` shows it")
    show.add_argument("profiles", nargs="+", metavar="PROFILE", help="SQLite export written by `nsys export --type "
                                                                     "sqlite`, or PyTorch-profiler trace "
                                                                     "(*.pt.trace.json.gz); read-only")
    show.add_argument("-f", "--format", choices=ROW_FORMATS, default="terminal",
                      help="aligned table (default), JSON ({fact, columns, row_count, rows, skipped}) or CSV")
    show.add_argument("-o", "--output", type=Path, help="write the rows to this file instead of standard output")
    show.add_argument("--limit", type=positive_int_of("rows"), metavar="N", help="print the first N rows only")
    add_set(show, "set a fact param, e.g. facts.gap_threshold_ns=5000 (rule settings are checked as for "
                   "diagnose); repeatable", "facts.PARAM=VALUE")
    add_cache(show)
    test = sub.add_parser("test", help="run the NAME.test.yaml cases beside the facts: canonical rows in, the "
                                       "fact's rows out",
                          description="Run fact tests: each NAME.test.yaml beside a fact's NAME.sql gives canonical "
                                      "rows and the rows the fact must compute from them. Exit 1 when a case fails.")
    test.add_argument("targets", nargs="*", metavar="FACT|PATH",
                      help="fact names, fact test files or directories of them (default: the tests of every "
                           "bundled fact and of the facts in the loaded rule directories)")
    for command in (listing, show, test):
        command.epilog = epilog
        add_config(command, after=True)
        add_quiet(command, after=True)
        add_colour(command, None, after=True)
        add_debug(command, after=True)
    return p


def run(args: argparse.Namespace, stop: StopRequest) -> int:
    config = resolve_config(args.config, args.rule_dirs, getattr(args, "sets", []))
    for d in config.rule_dirs:
        if not Path(d).is_dir():
            raise ConfigError(f"rule directory {d} does not exist")
    if args.command == "test":
        return test_facts(config, args.targets, quiet=args.quiet)
    facts = load_facts(config.rule_dirs)
    if args.command == "list":
        return list_facts(facts, args.format)
    progress = Progress(stop, quiet=args.quiet, prog="diagnose facts")
    try:
        return show_fact(args, config, facts, progress)
    finally:
        progress.clear()


def _entries(facts: dict[str, Fact]) -> list[tuple[Fact, str]]:
    """(fact, scope) of every fact: the bundled ones, helpers after them, the cross-rank ones, the team's."""
    every = [(f, "profile") for f in facts.values()] + [(f, "run") for f in load_run_facts().values()]
    return sorted(every, key=lambda e: (e[0].team, e[1] == "run", e[0].is_helper, e[0].name))


def list_facts(facts: dict[str, Fact], fmt: str) -> int:
    entries = _entries(facts)
    if fmt == "json":
        print(json_document([_fact_json(f, scope) for f, scope in entries]), end="")
        return EXIT_OK
    blocks = []
    for fact, scope in entries:
        traits = ["team" if fact.team else "bundled"]
        if fact.is_helper:
            traits.append("helper, " + ("materialized table" if fact.materialized else "view"))
        if scope == "run":
            traits.append("cross-rank: multi-rank runs")
        lines = [f"{fact.name}  ({'; '.join(traits)})", *_wrapped(fact.summary, "    ")]
        lines += _wrapped(", ".join(fact.column_names) or "none", "    columns: ", "             ")
        if fact.params:
            lines += _wrapped(", ".join(f"{n}={_number(v)} ({describe_range(*fact.param_ranges[n])})"
                                        for n, v in fact.params.items()), "    params:  ", "             ")
        if fact.team:
            lines.append(f"    file:    {fact.path}")
        blocks.append("\n".join(term(line) for line in lines))
    print("\n\n".join(blocks))
    print(f"\n{len(entries)} facts; `diagnose facts show FACT PROFILE` prints the rows of one")
    return EXIT_OK


def _wrapped(text: str, first: str, rest: str | None = None) -> list[str]:
    return textwrap.wrap(text, _WIDTH, initial_indent=first, subsequent_indent=rest or first,
                         break_on_hyphens=False) or [first.rstrip()]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _fact_json(fact: Fact, scope: str) -> dict[str, Any]:
    return {"name": fact.name, "summary": fact.summary, "doc": fact.doc, "source": "team" if fact.team else "bundled",
            "path": fact.path, "scope": scope, "helper": fact.is_helper, "needs": fact.needs,
            "requires": fact.requires, "params": fact.params,
            "param_ranges": {n: [None if math.isinf(x) else x for x in r] for n, r in fact.param_ranges.items()},
            "columns": [{"name": c.name, "doc": c.doc} for c in fact.columns],
            "checks": [{"column": c.column, "test": c.test, "args": list(c.args)} for c in fact.checks]}


def needed(facts: dict[str, Fact], name: str) -> dict[str, Fact]:
    """`name` and every fact it needs, directly or not, and the whole-capture facts (the start-up), which decide the
    window every other fact covers (engine/facts/window.py), so a fact shown alone has the rows `diagnose` reads."""
    wanted = with_needs(facts, [name, *(f.name for f in facts.values() if f.whole_capture and not f.team)])
    return {n: fact for n, fact in facts.items() if n in wanted}


def show_fact(args: argparse.Namespace, config: Config, facts: dict[str, Fact], progress: Progress) -> int:
    name = args.fact
    run_facts = load_run_facts()
    if name not in facts and name not in run_facts:
        known = [*facts, *run_facts]
        hint = did_you_mean(name, known) or "; `diagnose facts list` shows them all"
        raise DiagnoseError(f"no fact {name!r}{hint}")
    check_output(args.output, args.profiles, args.cache_dir)  # fail fast: before any export is read
    if name in run_facts:
        result = _run_fact(args, config, facts, name, progress)
    else:
        result = _profile_fact(args, config, facts, name, progress)
    text = _render(result, args.format, args.limit)
    progress.stop.check()
    progress.clear()
    emit(text, args.output, inputs=args.profiles, cache_dir=args.cache_dir)
    return EXIT_OK


def _profile_fact(args: argparse.Namespace, config: Config, facts: dict[str, Fact], name: str,
                  progress: Progress) -> FactResult:
    if len(args.profiles) != 1:
        raise InputError(f"fact {name!r} is computed over one export; give one PROFILE, not {len(args.profiles)} "
                         f"(only a cross-rank fact such as 'rank_balance' reads the exports of a multi-rank run).")
    if config.rule_params or config.severities or config.disabled:  # rule settings of diagnose.yaml or --set
        RuleSet.from_config(load_rules(facts, config.rule_dirs, scope=None), config, facts)  # refuses a typo
    else:
        RuleSet.from_config({}, config, facts)
    try:
        with open_export(args.profiles[0], progress=progress, cache=args.cache, cache_dir=args.cache_dir) as export:
            fact_set = compute_facts(export, params={k: s.value for k, s in config.fact_params.items()},
                                     phase_patterns=config.phase_patterns, facts=needed(facts, name),
                                     startup_patterns=config.startup_patterns,
                                     step_patterns=config.step_patterns,
                                     op_classes=load_operation_classes(config.rule_dirs),
                                     stacks=load_stacks(config.rule_dirs), api_names=load_api_names(config.rule_dirs),
                                     progress=progress, helpers={name})
    except RuntimeError as exc:  # Ctrl-C inside a DuckDB query surfaces as RuntimeError('Query interrupted')
        reraise_interrupt(exc)
        raise
    return fact_set[name]


def _run_fact(args: argparse.Namespace, config: Config, facts: dict[str, Fact], name: str,
              progress: Progress) -> FactResult:
    """A cross-rank fact: each rank is diagnosed (as `diagnose RANK0 RANK1 ...` does), then the fact runs over
    one row per rank."""
    inputs, _ = resolve_run(args.profiles, progress)
    pack = load_pack(config)  # once for all the ranks
    reports = diagnose_ranks(inputs, pack.config, progress=progress, cache=args.cache, cache_dir=args.cache_dir,
                             pack=pack)
    return run_facts_of(inputs, reports)[name]


def _render(result: FactResult, fmt: str, limit: int | None) -> str:
    rows = result.rows if limit is None else result.rows[:limit]
    if fmt == "json":
        return json_document({"fact": result.name, "columns": result.columns, "row_count": len(result.rows),
                              "rows": rows, "skipped": result.skipped})
    if fmt == "csv":
        return csv_table(result.columns, rows)
    shown = f"{len(rows):,} of {len(result.rows):,} rows" if len(rows) < len(result.rows) else \
        f"{len(rows):,} row{'s' if len(rows) != 1 else ''}"
    notes = [f"({shown})"]
    if result.skipped:
        notes.append(term(f"rules on this fact judge nothing on this export: {result.skipped}"))
    return terminal_table(result.columns, rows) + "\n".join(notes) + "\n"


def test_facts(config: Config, targets: list[str], *, quiet: bool = False) -> int:
    """`diagnose facts test [FACT|PATH ...]`: names are facts (bundled or of the loaded rule directories), anything
    else a test file or a directory of them, whose facts are loaded as a team pack."""
    paths = [Path(t) for t in targets if Path(t).exists() or t.endswith(".test.yaml") or "/" in t]
    names = [t for t in targets if Path(t) not in paths]
    bundled = bundled_fact_files()[0].parent.resolve()
    given = [(p if p.is_dir() else p.parent).resolve() for p in paths]
    dirs = list(dict.fromkeys([*config.rule_dirs, *(d for d in given if d != bundled)]))
    facts = load_facts(dirs)
    files = find_fact_tests(paths) if paths else []
    for name in names:
        if name not in facts:
            hint = did_you_mean(name, list(facts)) or "; `diagnose facts list` shows them all"
            raise DiagnoseError(f"no fact {name!r}{hint}")
        if not fact_test_file(facts[name]).is_file():
            raise DiagnoseError(f"fact {name!r} has no tests: write {fact_test_file(facts[name])}")
        files.append(fact_test_file(facts[name]))
    if not targets:
        files = bundled_fact_tests() + find_fact_tests([Path(d) for d in config.rule_dirs])
    if not files:
        raise DiagnoseError(f"no fact tests (NAME.test.yaml beside NAME.sql) in "
                            f"{', '.join(targets) or 'the loaded rule directories'}")
    results = run_fact_tests(list(dict.fromkeys(files)), facts, load_operation_classes(dirs), load_stacks(dirs),
                             load_api_names(dirs))
    failed = [r for r in results if not r.passed]
    for r in results:
        if quiet and r.passed:
            continue
        print(f"{'ok  ' if r.passed else 'FAIL'} {r.fact}: {r.name}")
        if not r.passed:
            print(f"       {r.problem}")
            print(f"       exp: {r.expected}")
            print(f"       got: {r.got}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return EXIT_FINDINGS if failed else EXIT_OK
