"""The format of a cache of canonical tables: a digest of what decides its contents, the check that a cache file
holds exactly the tables this version writes (and nothing that could run SQL when read), and the state saved with
it."""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import io
import tokenize

import duckdb

from . import canonical
from .canonical import database_ddl
from ..base.duck import insert_rows, offline_connection, reraise_interrupt
# The code that decides what a cache holds, besides the canonical definitions: part of format_version().
FILLING_CODE = ("adapters.py", "adapter_base.py", "string_ids.py", "loader.py", "metadata.py", "kineto.py",
                "kineto_adapters.py", "kineto_file.py")


@functools.lru_cache(maxsize=1)
def expected_tables() -> dict[str, str]:
    """The CREATE TABLE statement DuckDB records for every table of a canonical database of this version."""
    con = offline_connection(threads=1)
    try:
        for ddl in database_ddl().values():
            con.execute(ddl)
        return dict(con.execute("SELECT table_name, sql FROM duckdb_tables()").fetchall())
    finally:
        con.close()


def _code_tokens(source: bytes) -> str:
    """Python source without its comments and layout: editing a comment does not change the format."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
    return " ".join(t.string for t in tokenize.tokenize(io.BytesIO(source).readline) if t.type not in skip)


@functools.lru_cache(maxsize=1)
def format_version() -> str:
    """The format of a cache: a digest of everything that decides its contents, the canonical tables and views
    (canonical.definition_text) and the code that fills them (FILLING_CODE). Any change to either gives a new
    format, so a cache of other contents is never reused and there is no version number to forget to bump."""
    digest = hashlib.sha256(canonical.definition_text().encode())
    package = importlib.resources.files(__package__)
    for name in FILLING_CODE:
        digest.update(b"\0" + name.encode() + b"\0" + _code_tokens(package.joinpath(name).read_bytes()).encode())
    return digest.hexdigest()[:16]


def foreign_objects(con: duckdb.DuckDBPyConnection, catalog: str) -> str | None:
    """Why the attached database `catalog` is not a canonical database of this version, or None when it holds
    exactly the expected tables. Only the catalog is read: nothing stored in it is executed."""
    def names(sql: str) -> list[str]:
        return [str(r[0]) for r in con.execute(sql, [catalog]).fetchall()]

    extra = (names("SELECT view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal")
             + names("SELECT function_name FROM duckdb_functions() WHERE database_name = ?")
             + names("SELECT sequence_name FROM duckdb_sequences() WHERE database_name = ?")
             + names("SELECT type_name FROM duckdb_types() WHERE database_name = ? AND NOT internal")
             + names("SELECT index_name FROM duckdb_indexes() WHERE database_name = ?")
             + names("SELECT constraint_text FROM duckdb_constraints() WHERE database_name = ?")
             + names("SELECT schema_name FROM duckdb_schemas() WHERE database_name = ? AND schema_name <> 'main' "
                     "AND NOT internal"))
    if extra:
        return f"it holds objects a cache never has ({', '.join(sorted(extra)[:3])})"
    found = dict(con.execute("SELECT table_name, sql FROM duckdb_tables() WHERE database_name = ?",
                             [catalog]).fetchall())
    if found != expected_tables():
        return "its tables are not those this version writes"
    return None


def read_state(con: duckdb.DuckDBPyConnection, catalog: str) -> dict[str, str] | None:
    """The key/value state saved with a canonical database, or None when it has none (not one of ours)."""
    try:
        return dict(con.execute(f'SELECT key, value FROM "{catalog}"._state').fetchall())
    except duckdb.Error as exc:
        reraise_interrupt(exc)
        return None


def write_state(con: duckdb.DuckDBPyConnection, catalog: str, state: dict[str, str]) -> None:
    con.execute(f'DROP TABLE IF EXISTS "{catalog}"._state')
    con.execute(database_ddl()["_state"].replace('TABLE "_state"', f'TABLE "{catalog}"."_state"'))
    insert_rows(con, f'"{catalog}"._state', list(state.items()))
