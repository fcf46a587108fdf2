"""The canonical tables are filled by column name and checked against their definitions; the cache format and the
generated schema reference follow those definitions."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import pytest

from nsys_diagnose.fixtures.generator import generate
from nsys_diagnose.reading import adapters, canonical
from nsys_diagnose.reading import cache_format as cache
from nsys_diagnose.reading.adapter_base import Adapter, Source
from nsys_diagnose.reading import canonical_doc, canonical_fill
from nsys_diagnose.reading.canonical import stored_ddl
from nsys_diagnose.reading.canonical_fill import AdapterMismatch, fill
from nsys_diagnose.reading.export import open_export

REPO = Path(__file__).resolve().parents[1]
SCHEMA_DOC = REPO / "engine" / "reading" / "nsys-schema.md"

_MEMSET = ("1 AS start_ns, 3 AS end_ns, 2 AS dur_ns, 0 AS device_id, 7 AS stream_id, 42 AS pid, 5 AS correlation_id, "
           "64 AS bytes, 'device' AS mem_kind, NULL::BIGINT AS graph_node_id")


@pytest.fixture
def con():
    connection = duckdb.connect()
    connection.execute(stored_ddl("memsets"))
    yield connection
    connection.close()


def test_an_adapter_fills_by_name_whatever_its_column_order(con):
    columns = _MEMSET.split(", ")
    fill(con, "memsets", "memsets from a test", "SELECT " + ", ".join(reversed(columns)))
    assert con.execute("SELECT pid, bytes, mem_kind, stream_id FROM memsets").fetchall() == [(42, 64, "device", 7)]


@pytest.mark.parametrize("select, says", [
    (_MEMSET.replace("64 AS bytes, ", ""), "column 'bytes' is missing"),
    (_MEMSET + ", 1 AS value", "column 'value' is not a column of the table"),
    (_MEMSET.replace("'device' AS mem_kind", "2 AS mem_kind"),
     "column 'mem_kind' is INTEGER, which does not fit its VARCHAR"),
    (_MEMSET.replace("64 AS bytes", "'64' AS bytes"),
     "column 'bytes' is VARCHAR, which does not fit its BIGINT"),
    (_MEMSET.replace("NULL::BIGINT AS graph_node_id", "NULL AS graph_node_id, 1 AS pid"),
     "column 'pid' appears 2 times"),
])
def test_a_wrong_adapter_is_an_internal_error_naming_table_adapter_and_column(con, select, says):
    with pytest.raises(AdapterMismatch) as caught:
        fill(con, "memsets", "memsets from a test", f"SELECT {select}")
    message = str(caught.value)
    assert "'memsets'" in message and "'memsets from a test'" in message and says in message
    assert not isinstance(caught.value, duckdb.Error)  # a bug of ours, never reported as a bad profile
    assert con.execute("SELECT count(*) FROM memsets").fetchone()[0] == 0


def test_a_bare_null_for_a_text_column_is_refused_and_a_typed_one_fits(con):
    # DuckDB types a bare NULL as INTEGER: adapters write NULL::VARCHAR for text they cannot read.
    with pytest.raises(AdapterMismatch, match="column 'mem_kind' is INTEGER"):
        fill(con, "memsets", "memsets from a test", "SELECT " + _MEMSET.replace("'device'", "NULL"))
    fill(con, "memsets", "memsets from a test", "SELECT " + _MEMSET.replace("'device'", "NULL::VARCHAR"))
    assert con.execute("SELECT mem_kind FROM memsets").fetchall() == [(None,)]


def test_integer_widths_and_integers_into_floating_point_are_compatible():
    assert canonical_fill.compatible("INTEGER", "BIGINT") and canonical_fill.compatible("BIGINT", "TINYINT")
    assert canonical_fill.compatible("DOUBLE", "BIGINT") and canonical_fill.compatible("DOUBLE", "DECIMAL(2,1)")
    assert not canonical_fill.compatible("BIGINT", "DOUBLE") and not canonical_fill.compatible("BOOLEAN", "INTEGER")
    assert not canonical_fill.compatible("VARCHAR", "BIGINT") and not canonical_fill.compatible("BIGINT", "VARCHAR")


def test_a_wrong_adapter_stops_the_read_with_an_internal_error(tmp_path, monkeypatch):
    profile = tmp_path / "run.sqlite"
    generate("eager_decode", profile)
    right = adapters.ADAPTERS["kernels"]

    def misnamed(source: Source) -> list[Adapter]:
        return [dataclasses.replace(a, select=lambda src, a=a: a.select(src).replace(" AS grid_size", " AS grid"))
                for a in right(source)]

    monkeypatch.setitem(adapters.ADAPTERS, "kernels", misnamed)
    with pytest.raises(AdapterMismatch) as caught:
        open_export(profile)
    message = str(caught.value)
    assert "'kernels from CUPTI_ACTIVITY_KIND_KERNEL'" in message
    assert "column 'grid_size' is missing" in message and "column 'grid' is not a column" in message

    from nsys_diagnose.cli.main import main

    assert main([str(profile), "-q", "--no-cache"]) == 3  # exit 3: an internal error, not a bad profile (exit 2)


def test_every_stored_table_is_made_of_canonical_columns():
    for name, view in canonical.VIEWS.items():
        stored = {c.name for c in canonical.stored_columns(name)}
        derived = set(canonical.STORED[name].derived) if name in canonical.STORED else set()
        assert stored | derived >= set(view.column_names), name
        assert not stored & derived, name


# -- The cache format follows the definitions -------------------------------------------------------------------

@pytest.fixture
def fresh_format():
    cache.format_version.cache_clear()
    yield
    cache.format_version.cache_clear()


def test_changing_a_canonical_column_changes_the_cache_format(monkeypatch, fresh_format):
    before = cache.format_version()
    kernels = canonical.VIEWS["kernels"]
    changed = tuple(dataclasses.replace(c, type="BIGINT") if c.name == "registers_per_thread" else c
                    for c in kernels.columns)
    monkeypatch.setitem(canonical.VIEWS, "kernels", dataclasses.replace(kernels, columns=changed))
    cache.format_version.cache_clear()
    assert cache.format_version() != before


def test_changing_a_stored_column_changes_the_cache_format(monkeypatch, fresh_format):
    before = cache.format_version()
    stored = canonical.STORED["api_calls"]
    extra = (dataclasses.replace(stored.extra[0], type="SMALLINT"),)
    monkeypatch.setitem(canonical.STORED, "api_calls", dataclasses.replace(stored, extra=extra))
    cache.format_version.cache_clear()
    assert cache.format_version() != before


def test_the_filling_code_is_part_of_the_cache_format_but_not_its_comments(monkeypatch, fresh_format):
    assert set(cache.FILLING_CODE) >= {"adapters.py", "loader.py", "metadata.py"}
    code = b"def f():\n    return 1\n"
    assert cache._code_tokens(code) == cache._code_tokens(b"# why\ndef f():  # note\n\n    return 1\n")
    assert cache._code_tokens(code) != cache._code_tokens(b"def f():\n    return 2\n")
    before = cache.format_version()
    monkeypatch.setattr(cache, "FILLING_CODE", ("adapters.py", "loader.py"))
    cache.format_version.cache_clear()
    assert cache.format_version() != before


def test_the_cache_key_holds_the_format(tmp_path):
    import json

    from nsys_diagnose.reading.export import _cache_key
    from nsys_diagnose.reading.profile_file import ProfileFile

    profile = tmp_path / "run.sqlite"
    generate("eager_decode", profile)
    with ProfileFile.open(profile) as pf:
        assert json.loads(_cache_key(pf))["format"] == cache.format_version()


# -- The schema document ----------------------------------------------------------------------------------------

def test_the_committed_canonical_reference_is_the_generated_one():
    committed = canonical_doc.committed_section(SCHEMA_DOC.read_text(encoding="utf-8"))
    assert committed == canonical_doc.markdown(), (
        f"engine/reading/nsys-schema.md is out of date; regenerate it with `{canonical_doc.UPDATE_COMMAND}`")


def test_update_rewrites_only_the_generated_section(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{canonical_doc.BEGIN_MARKER}\nstale\n{canonical_doc.END_MARKER}\nafter\n",
                   encoding="utf-8")
    assert canonical_doc.main(["--update", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text == "before\n" + canonical_doc.markdown() + "after\n"
    for name in (*canonical.VIEWS, *canonical.SIDE_TABLES):
        assert f"`{name}`" in text


def test_the_schema_document_cites_public_sources_and_lists_every_enum_code_used():
    text = SCHEMA_DOC.read_text(encoding="utf-8")
    assert "https://docs.nvidia.com/nsight-systems/UserGuide/" in text
    for code, word in [*adapters.COPY_KINDS.items(), *adapters.MEM_KINDS.items(), *adapters.SYNC_TYPES.items()]:
        assert f"{code} {word}" in text, (code, word)
    for code in (adapters.NVTX_PUSH_POP, adapters.NVTX_START_END, adapters.NVTX_DOMAIN_CREATE):
        assert str(code) in text


def test_kernels_without_a_device_are_placed_from_their_stream_or_counted_and_left_out(tmp_path):
    """A NULL deviceId (post-processed exports only): placed on the GPU of its context or stream when the export
    says which, else left out of the canonical tables and counted in profile_info, never kept as a row no per-GPU
    fact can place."""
    from test_robustness import without_device

    placed, lost = tmp_path / "placed.sqlite", tmp_path / "lost.sqlite"
    generate("eager_decode", placed)
    lost.write_bytes(placed.read_bytes())
    without_device(placed, "CUPTI_ACTIVITY_KIND_KERNEL", "rowid % 5 = 0", lost=False)
    without_device(lost, "CUPTI_ACTIVITY_KIND_KERNEL", "rowid % 5 = 0", lost=True)
    with open_export(placed) as export:
        assert export.query("SELECT count(*), count(device_id) FROM kernels") == [(7325, 7325)]
        assert dict(export.query("SELECT key, value FROM profile_info WHERE key LIKE '%device%'")) == {
            "device_recovered:kernels": "1465"}
    with open_export(lost) as export:
        assert export.count("kernels") == 5860
        assert export.query("SELECT count(*), count(device_id) FROM kernels") == [(5860, 5860)]
        info = dict(export.query("SELECT key, value FROM profile_info WHERE key LIKE '%device%'"))
        assert info["no_device:kernels"] == "1465" and int(info["no_device_ns:kernels"]) > 0
        assert export.used_devices == [0]
