"""What counts as a kernel launch, a synchronisation or an allocation is data (rules/vocabulary/api_names.yaml):
the facts read it through _api_classes alone, a team's DIR/vocabulary/api_names.yaml adds its own API names, a
broken or contradictory list is refused with one sentence naming the file, and the cached fact rows follow it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.catalog import with_needs
from nsys_diagnose.facts.compute import compute_facts
from nsys_diagnose.facts import results_cache
from nsys_diagnose.pack.apinames import ApiFamily, ApiNames, ApiNamesError, bundled_api_names, load_api_names
from nsys_diagnose.reading.export import rows_export


def _team(tmp_path: Path, text: str) -> Path:
    (tmp_path / "vocabulary").mkdir(exist_ok=True)
    (tmp_path / "vocabulary" / "api_names.yaml").write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(("name", "family"), [
    ("cudaLaunchKernel", "kernel_launch"), ("cudaLaunchKernel_ptsz", "kernel_launch"),
    ("cuLaunchKernelEx", "kernel_launch"), ("cudaGraphLaunch", "graph_launch"),
    ("cudaLaunchHostFunc", "host_function_launch"), ("cudaStreamSynchronize", "sync"), ("cudaMemcpy", "sync_copy"),
    ("cudaMemcpyAsync", None), ("cudaStreamWaitEvent", "wait"), ("cudaFreeHost", "allocation"),
])
def test_the_bundled_list_puts_each_call_in_the_family_the_facts_expect(name, family):
    assert bundled_api_names().family_of(name) == family


def test_a_team_launch_api_counts_as_a_launch_in_the_facts(tmp_path):
    team = load_api_names([_team(tmp_path, "families:\n  kernel_launch:\n    names: [acmeLaunchKernel]\n")])
    assert team.family_of("acmeLaunchKernel") == "kernel_launch"
    assert team.family_of("cudaLaunchKernel") == "kernel_launch"  # the bundled names stay
    facts = load_facts()
    calls = [{"start_ns": i * 10, "end_ns": i * 10 + 5, "pid": 1, "tid": 1, "global_tid": 1, "correlation_id": i,
              "name": name} for i, name in enumerate(["acmeLaunchKernel", "acmeLaunchKernel", "cudaLaunchKernel"], 1)]
    wanted = with_needs(facts, ["capture_health"])
    with rows_export({"api_calls": calls}, name="team launches") as export:
        found = compute_facts(export, facts={n: f for n, f in facts.items() if n in wanted}, api_names=team)
    assert found["capture_health"].rows[0]["launch_call_count"] == 3
    with rows_export({"api_calls": calls}, name="bundled launches") as export:
        found = compute_facts(export, facts={n: f for n, f in facts.items() if n in wanted})
    assert found["capture_health"].rows[0]["launch_call_count"] == 1


def test_a_name_another_family_already_holds_is_refused_naming_both(tmp_path):
    path = _team(tmp_path, "families:\n  kernel_launch:\n    names: [cudaStreamSynchronize]\n")
    with pytest.raises(ApiNamesError) as err:
        load_api_names([path])
    message = str(err.value)
    assert message.startswith(str(path / "vocabulary" / "api_names.yaml"))
    assert "cudaStreamSynchronize" in message and "'kernel_launch'" in message and "'sync'" in message


def test_a_name_that_is_no_api_name_is_refused_at_its_line(tmp_path):
    path = _team(tmp_path, "families:\n  kernel_launch:\n    doc: ours\n    names: [acmeLaunch, 'acme launch']\n")
    with pytest.raises(ApiNamesError, match=r"api_names\.yaml:4:\d+: family 'kernel_launch': 'acme launch' is not "
                                            r"an API name"):
        load_api_names([path])


def test_a_family_no_fact_reads_is_refused_with_the_one_meant(tmp_path):
    """A misspelt family would leave its names counted as plain calls, silently: the load stops instead."""
    path = _team(tmp_path, "families:\n  sync_cpy:\n    names: [acmeSync]\n")
    with pytest.raises(ApiNamesError, match=r"api_names\.yaml:2:3: family 'sync_cpy': no fact reads this family.*"
                                            r"did you mean 'sync_copy'\?"):
        load_api_names([path])


def test_the_cached_fact_rows_follow_the_list(monkeypatch):
    facts = load_facts()
    bundled = results_cache.results_key("k", facts, None, None)
    changed = ApiNames((*bundled_api_names().families, ApiFamily("acme_launch", "", ("acmeLaunch",))))
    monkeypatch.setattr(results_cache, "bundled_api_names", lambda: changed)
    assert results_cache.results_key("k", facts, None, None) != bundled
