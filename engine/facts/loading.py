"""Loading the facts of a pack: the bundled rules/facts/*.sql and each team directory's SQL files, parsed, checked
for name clashes and (team SQL) against the sandbox.
"""

from __future__ import annotations

from pathlib import Path

from ..pack.layout import FACTS_DIR, bundled
from ..reading.canonical import VIEWS
from .catalog import Fact, FactError, parse_fact
from .reads import undeclared_reads
from .team_sql import RUNNER_TABLES, check_team_sql


def bundled_fact_files() -> list[Path]:
    return sorted(bundled(FACTS_DIR).glob("*.sql"))


def load_facts(extra_dirs: list[Path] | None = None, *, check_reads: bool = True) -> dict[str, Fact]:
    """The bundled facts and each team directory's. A team fact whose query reads a fact its `-- @needs` leaves out
    is refused, unless `check_reads` is False (`rules check`, which lists every such read itself)."""
    facts: dict[str, Fact] = {}
    files = [(p, False) for p in bundled_fact_files()]
    for d in extra_dirs or []:
        files += [(p, True) for p in sorted(Path(d).rglob("*.sql"))]
    for path, team in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise FactError(f"{path}: cannot read fact file ({exc})") from None
        fact = parse_fact(text, str(path))
        fact.team = team
        if fact.name in facts:
            raise FactError(f"{path}: fact {fact.name!r} is already defined in {facts[fact.name].path}", fact.name)
        if fact.name in VIEWS or fact.name in RUNNER_TABLES or fact.name.startswith("_phase_patterns"):
            raise FactError(f"{path}: fact name {fact.name!r} is taken by a canonical view or a table the engine "
                            f"fills", fact.name)
        if team:
            check_team_sql(fact)
        facts[fact.name] = fact
    for fact in facts.values():
        if not fact.team:
            continue
        for dep in fact.needs:
            if dep not in facts:
                raise FactError(f"{fact.path}: fact {fact.name!r} needs unknown fact {dep!r}", fact.name)
        # A read left out of -- @needs works only while the run order happens to compute the other fact first;
        # refuse it on every load, not only in `rules check` (which also binds the query: engine/facts/needs.py).
        undeclared = undeclared_reads(fact, facts.keys()) if check_reads else []
        if undeclared:
            raise FactError(undeclared[0], fact.name)
    return facts
