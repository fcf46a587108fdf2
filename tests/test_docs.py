"""The reference docs under docs/ are generated from the rule, fact and key-metric metadata
(engine/authoring/docs.py); the committed pages, and the generated parts of docs/measures.md and docs/batch.md,
must be what the generator writes now, so a changed rule, param, fact or metric cannot leave its docs behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nsys_diagnose.authoring import docs
from nsys_diagnose.diagnosis.rules import bundled_rules_dir, rule_files

from conftest import REPO, scenario_analysis

DOCS = REPO / "docs"

# Building the pages runs every rule's first firing test case on its generated scenario, about half of them:
# too slow for the fast tier. `make docs-check` checks the committed pages on its own.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return docs.build(scenario_facts=lambda name: scenario_analysis(name)[0], docs=DOCS)


def test_committed_docs_are_what_the_generator_writes(pages):
    problems = docs.stale(DOCS, pages)
    assert not problems, (f"{len(problems)} generated doc(s) under docs/ are stale: {', '.join(problems)}. "
                          f"Regenerate them with: {docs.FIX_COMMAND}")


def test_every_bundled_rule_has_a_page_listed_in_the_index(pages):
    ids = {p.stem for p in rule_files(bundled_rules_dir())}
    assert {name for name in pages if name.startswith("rules/") and name != "rules/README.md"} == \
        {f"rules/{i}.md" for i in ids}
    index = pages["rules/README.md"]
    assert all(f"]({i}.md)" in index for i in ids)


def test_a_rule_page_gives_its_params_a_real_example_and_the_advice_per_stack(pages):
    page = pages["rules/launch-bound.md"]
    assert "| `max_overhead_ratio` | 0.3 | ratio | between 0 and 1 |" in page
    assert "--set launch-bound.PARAM=VALUE" in page
    # the example is the message the rule prints on its first firing test case, with the scenario's numbers
    assert "On the generated scenario `eager_decode`" in page
    assert re.search(r"GPU 0 runs [\d,]+ kernels of [\d.]+ µs on average", page)
    assert "For vLLM profiles" in page and "--enforce-eager" in page
    assert "| a stricter ratio than the profile's 0.63 silences it | `eager_decode` | `max_overhead_ratio=0.7` " \
           "| does not fire |" in page


def test_the_facts_page_shows_columns_params_lineage_and_flags(pages):
    page = pages["facts.md"]
    section = page[page.index('<a id="kernel_gaps"></a>'):page.index('<a id="kernel_summary"></a>')]
    assert "Computed again per inference phase" in section
    assert "| `gap_threshold_ns` | 10000 | at least 0 |" in section
    assert "Reads (`@needs`): [`_timeline`](#_timeline)" in section and "[`_gpu_ops`](#_gpu_ops)" in section
    assert "| `device_id` | CUDA device index. | not_null |" in section
    assert '<a id="rank_balance"></a>' in page  # cross-rank facts too


def test_every_relative_link_of_the_generated_docs_leads_somewhere(pages):
    for name, text in pages.items():
        here = (DOCS / name).parent
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (here / target).resolve().exists(), f"{name} links to {target}, which does not exist"
        for anchor in re.findall(r"\]\(\.\./facts\.md#([^)]+)\)", text) + (
                re.findall(r"\]\(#([^)]+)\)", text) if name == "facts.md" else []):
            assert f'<a id="{anchor}"></a>' in pages["facts.md"], f"{name} links to facts.md#{anchor}"


def test_every_table_row_has_the_cells_of_its_header_and_prose_stays_text(pages):
    # an unescaped | in a doc or message would split a cell; <your command> would vanish as an HTML tag
    for name, text in pages.items():
        header = None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.startswith("|"):
                header = None
                continue
            cells = len(re.findall(r"(?<!\\)\|", line))
            header = header or cells
            assert cells == header, f"{name}:{number}: {cells - 1} cells under a header of {header - 1}: {line}"
    capture_line = "nsys profile --delay=&lt;warm-up seconds&gt; --duration=&lt;seconds&gt;"
    assert capture_line in pages["rules/capture-too-short.md"]


def _whole_pages(pages: dict[str, str]) -> dict[str, str]:
    """The pages the generator writes whole (not the hand-written ones that hold a generated part)."""
    return {name: text for name, text in pages.items() if text.startswith(docs.GENERATED_MARKER)}


def test_check_mode_names_a_stale_page_and_the_command_that_fixes_it(tmp_path: Path, pages, monkeypatch, capsys):
    pages = _whole_pages(pages)
    for name, text in pages.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "rules" / "launch-bound.md").write_text("old", encoding="utf-8")
    (tmp_path / "rules" / "retired-rule.md").write_text(f"{docs.GENERATED_MARKER} (python -m "
                                                       f"nsys_diagnose.authoring.docs --write) from "
                                                       f"rules/x/retired-rule.yaml "
                                                       f"-->\n# gone\n",
                                                       encoding="utf-8")
    monkeypatch.setattr(docs, "build", lambda **_: pages)
    assert docs.main(["--check", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "rules/launch-bound.md" in out and "rules/retired-rule.md" in out and "make docs" in out
    assert docs.main(["--write", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote {tmp_path / 'rules' / 'launch-bound.md'}",
                                                    f"removed {tmp_path / 'rules' / 'retired-rule.md'}"]
    assert not (tmp_path / "rules" / "retired-rule.md").exists()
    assert docs.main(["--check", "--out", str(tmp_path)]) == 0


def test_a_page_written_by_hand_beside_the_generated_ones_is_left_alone(tmp_path: Path, pages, monkeypatch, capsys):
    """Only pages that carry the generator's marker are the generator's: a team's own page under docs/rules/ is
    neither stale nor removed by --write."""
    pages = _whole_pages(pages)
    assert {"facts.md", "rules/README.md", "rules/launch-bound.md"} <= set(pages)
    for name, text in pages.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    own = tmp_path / "rules" / "our-serving-notes.md"
    own.write_text("# Our serving notes\n\nWhat launch-bound means on our fleet.\n", encoding="utf-8")
    monkeypatch.setattr(docs, "build", lambda **_: pages)
    assert docs.main(["--check", "--out", str(tmp_path)]) == 0
    assert docs.main(["--write", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""
    assert own.read_text(encoding="utf-8").startswith("# Our serving notes")
