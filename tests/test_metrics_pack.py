"""The key metrics are pack data (rules/vocabulary/metrics.yaml), checked against the facts when they load: a
metric that names a fact no report carries, or a column its fact does not document, is one sentence that names
the file and line, instead of a report row that silently reads "n/a"."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsys_diagnose.pack.metrics import MetricError, bundled_metrics_file, read_metrics
from nsys_diagnose.reports.metrics import METRICS, metric_sources

GOOD = """\
gpu_utilization:
  label: GPU utilisation
  unit: share
  better: higher
  source: summary.gpu_utilization
"""


def _load(tmp_path: Path, text: str):
    path = tmp_path / "metrics.yaml"
    path.write_text(text, encoding="utf-8")
    return path, lambda: read_metrics(path, metric_sources())


def _error(tmp_path: Path, text: str) -> tuple[Path, str]:
    path, load = _load(tmp_path, text)
    with pytest.raises(MetricError) as exc:
        load()
    message = str(exc.value)
    assert "\n" not in message
    return path, message


def test_the_engine_reads_every_bundled_metric_from_the_pack_in_file_order():
    bundled = read_metrics(bundled_metrics_file(), metric_sources())
    assert bundled == METRICS
    text = bundled_metrics_file().read_text(encoding="utf-8").splitlines()
    assert all(text[m.line - 1] == f"{m.key}:" for m in METRICS)  # the line an error would name


def test_a_new_metric_of_a_reported_fact_loads(tmp_path):
    _, load = _load(tmp_path, GOOD + """
sync_rate:
  label: Synchronisations per second
  unit: rate
  better: lower
  source: sync_overview.calls_per_s
  versus: gpu_utilization
""")
    metrics = load()
    assert [m.key for m in metrics] == ["gpu_utilization", "sync_rate"]
    assert metrics[1].sources == ("sync_overview.calls_per_s",) and metrics[1].line == 7


def test_a_fact_no_report_carries_is_refused_at_its_line(tmp_path):
    path, message = _error(tmp_path, GOOD + """
idle_host:
  label: Idle during host work
  unit: ns
  better: lower
  source: host_idle.idle_ns
""")
    assert message.startswith(f"{path}:11:")
    assert "metric 'idle_host'" in message and "fact 'host_idle' is not marked `-- @report`" in message


def test_a_column_the_fact_does_not_document_is_refused_with_a_suggestion(tmp_path):
    path, message = _error(tmp_path, GOOD.replace("summary.gpu_utilization", "summary.gpu_utilisation"))
    assert message.startswith(f"{path}:5:")
    assert "'gpu_utilisation' is not a documented `-- @column` of fact 'summary'" in message
    assert "did you mean 'gpu_utilization'?" in message


def test_a_fact_that_does_not_exist_is_refused(tmp_path):
    path, message = _error(tmp_path, GOOD.replace("summary.gpu_utilization", "summry.gpu_utilization"))
    assert message.startswith(f"{path}:5:") and "there is no fact 'summry'; did you mean 'summary'?" in message


def test_throughput_and_profile_sources_are_checked_against_the_report(tmp_path):
    path, message = _error(tmp_path, GOOD.replace("summary.gpu_utilization", "throughput.token_per_s"))
    assert message.startswith(f"{path}:5:") and "throughput has no field 'token_per_s'" in message


@pytest.mark.parametrize("change, line, says", [
    (("unit: share", "unit: percentage"), 3, "unit must be one of ratio, share, percent"),
    (("better: higher", "better: up"), 4, "better must be higher, lower or null"),
    (("  label: GPU utilisation\n", "  label: GPU utilisation\n  colour: red\n"), 3, "unknown field 'colour'"),
    (("  label: GPU utilisation\n", ""), 1, "lacks label"),
    (("source: summary.gpu_utilization", "source: summary.gpu_utilization\n  threshold: low-utilization"), 6,
     "threshold must be RULE.PARAM"),
    (("source: summary.gpu_utilization", "source: summary.gpu_utilization\n  versus: mean_kernel_ns"), 6,
     "versus names another metric, and there is no 'mean_kernel_ns'"),
    (("source: summary.gpu_utilization", "source: summary.gpu_utilization\n  report: sometimes"), 6,
     "report must be true or false"),
])
def test_a_mistake_is_one_sentence_at_its_line(tmp_path, change, line, says):
    path, message = _error(tmp_path, GOOD.replace(*change))
    assert message.startswith(f"{path}:{line}:") and says in message


def test_a_metric_defined_twice_is_refused_not_silently_replaced(tmp_path):
    path, message = _error(tmp_path, GOOD + "\n" + GOOD)
    assert message == f"{path}:7:1: the metric 'gpu_utilization' is defined twice"


def test_a_group_split_apart_is_refused(tmp_path):
    grouped = GOOD.replace("source: summary.gpu_utilization", "source: summary.gpu_utilization\n  group: G")
    other = GOOD.replace("gpu_utilization", "kernel_count").replace("unit: share", "unit: count")
    path, message = _error(tmp_path, grouped + other + grouped.replace("gpu_utilization:", "copy_only_fraction:")
                           .replace("summary.gpu_utilization", "summary.copy_only_fraction"))
    assert message.startswith(f"{path}:17:") and "group 'G' share one row" in message
