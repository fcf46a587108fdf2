"""The same run gets the same diagnosis from its nsys export and from its PyTorch-profiler (Kineto) trace.

Every generated scenario (fixtures/generator.py) is written twice: as the nsys export, and as the Chrome trace
torch.profiler would have written for the same run (`generate(..., fmt="kineto")`, fixtures/_kineto.py, laid out as
pytorch/kineto libkineto/src/output_json.cpp writes it). Both are diagnosed and must agree on the verdict (primary,
rule, subject), on the rules that fire (rule, severity, subject), on the rules skipped, and on every key metric (the
report's `metrics`) exactly, with no tolerance: Kineto prints each time in microseconds with three decimals relative
to a base of its own, so every time survives to the nanosecond, and the same events give the same numbers.

A Kineto trace cannot hold all an nsys export can: `_kineto.dropped` counts what of an export the diagnosis reads
is left out or changed (CUDA-graph replays traced as whole graphs, OS-runtime calls, GPU metrics, CPU samples,
unified-memory migrations, NVTX domains, the CUDA calls Kineto does not log, records that end before they start).
A scenario whose export holds such data is listed in EXCEPTIONS with what changes and what must still hold; one
that drops data and is not listed, or is listed and drops nothing, fails, as does a listed change that no longer
happens. The two scenarios without GPU activity are refused by the trace reader, as a profile without CUDA
activities is.

Tiers: four scenarios (two of them listed in EXCEPTIONS) in the fast tier, every scenario and the multi-rank runs
in the slow tier. The exports and traces are made, and diagnosed, once per run (tests/conftest.py,
scenario_analysis); the traces beside the exports, in the run's scenario directory.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nsys_diagnose.base.errors import InputError
from nsys_diagnose.fixtures._kineto import KINETO_SUFFIX, dropped, write_kineto
from nsys_diagnose.fixtures.generator import SCENARIOS, generate
from nsys_diagnose.fixtures.runs import RUN_SCENARIOS, generate_run
from nsys_diagnose.reports.render import FORMATS, render

from conftest import _made_once, analysis, scenario_analysis, scenario_path, slow_but, sqlite_ro

FAST = ("eager_decode", "prefill_decode_nvtx", "memory_bound_metrics", "multi_gpu_straggler")

# What the trace reader says where a rule needs what a Kineto trace cannot hold.
NO_GPU_METRICS = "holds no GPU metrics"
NO_KERNELS = "holds no GPU kernel"
GPU_METRIC_RULES = ("interconnect-saturated", "latency-bound-kernels", "memory-bound", "tensor-cores-idle")
KERNEL_RULES = ("host-bound", "launch-bound", "low-utilization")
WINDOW_METRICS = ("gpu_active_fraction", "gpu_active_ns", "gpu_utilization", "kernel_count", "mean_gap_ns",
                  "mean_kernel_ns", "median_gap_ns", "overhead_ratio")
COPY_METRICS = ("copy_only_fraction", "memcpy_bytes", "memcpy_ns", "pageable_bytes", "pcie_bytes", "pcie_count",
                "pcie_ns", "pinned_bytes")


@dataclass(frozen=True)
class Listed:
    """A scenario whose Kineto trace lacks some of the export's data (`drops`: the kinds `dropped` reports), and
    what that changes: rules that fire only on the export (`lost`) or only on the trace (`gained`), metrics that
    may differ, whether the verdict may, rules the trace's report skips with a reason saying why (`skipped`: rule ->
    a fragment of the reason) or that only the export's report skips (`unskipped`), or the trace reader's refusal
    (a fragment of its message). Everything else must still agree."""

    reason: str
    drops: frozenset[str] = frozenset()
    lost: frozenset[str] = frozenset()
    gained: frozenset[str] = frozenset()
    metrics: frozenset[str] = frozenset()
    verdict: bool = False
    skipped: dict[str, str] = field(default_factory=dict)
    unskipped: frozenset[str] = frozenset()
    refused: str | None = None


def _exception(reason: str, drops: tuple[str, ...], *, lost: tuple[str, ...] = (), gained: tuple[str, ...] = (),
               metrics: tuple[str, ...] = (), verdict: bool = False, skipped: dict[str, str] | None = None,
               unskipped: tuple[str, ...] = (), refused: str | None = None) -> Listed:
    return Listed(reason, frozenset(drops), frozenset(lost), frozenset(gained), frozenset(metrics), verdict,
                  skipped or {}, frozenset(unskipped), refused)


def _metrics_lost(reason: str, lost: tuple[str, ...] = (), *, verdict: bool = False) -> Listed:
    return _exception(f"{reason}; the rules that read GPU metrics are skipped", ("gpu_metrics",), lost=lost,
                      verdict=verdict, skipped={rule: NO_GPU_METRICS for rule in GPU_METRIC_RULES})


GRAPH_REPLAYS = ("CUDA-graph replays traced as whole graphs (--cuda-graph-trace=graph) are no kernels, and Kineto "
                 "records none of them")
NOTHING_LEFT = {rule: NO_KERNELS for rule in KERNEL_RULES}

EXCEPTIONS: dict[str, Listed] = {
    # CUDA graphs replayed in graph mode: the replays' GPU time is gone, so is the rule that explains it
    "graph_decode_graph": _exception(
        f"{GRAPH_REPLAYS}: the GPU looks idle between the copies and syncs", ("graph_launches",),
        lost=("graph-mode-hides-kernels",), gained=("frequent-synchronization", "low-utilization"), verdict=True,
        metrics=WINDOW_METRICS),
    "graph_replays_fill": _exception(
        f"{GRAPH_REPLAYS}: the few eager kernels left span a short window", ("graph_launches",),
        lost=("graph-mode-hides-kernels",), gained=("capture-too-short", "frequent-synchronization"), verdict=True,
        metrics=WINDOW_METRICS),
    "healthy_graph_decode": _exception(
        f"{GRAPH_REPLAYS}: no kernel is left", ("graph_launches",), lost=("graph-mode-hides-kernels",),
        gained=("capture-no-kernels",), verdict=True, metrics=WINDOW_METRICS, skipped=NOTHING_LEFT),
    "graph_host_gaps": _exception(
        f"{GRAPH_REPLAYS} (no kernel is left), and OS-runtime calls are not traced", ("graph_launches", "osrt_calls"),
        lost=("graph-mode-hides-kernels", "host-bound"), gained=("capture-no-kernels",), verdict=True,
        metrics=WINDOW_METRICS, skipped=NOTHING_LEFT),
    "model_load_decode": _exception(
        f"{GRAPH_REPLAYS}: without the decode replays after it, the model load is no start-up to set apart, and "
        f"its copies and kernels are judged (the export's steady window has no kernel, so small-grids is skipped "
        f"there)", ("graph_launches",), lost=("graph-mode-hides-kernels",),
        gained=("low-utilization", "pcie-bound"), verdict=True, unskipped=("small-grids",),
        metrics=(*WINDOW_METRICS, *COPY_METRICS, "cpu_api_ns", "duration_ns", "launch_calls", "launch_mean_ns",
                 "launch_p50_ns")),
    "model_load_no_nvtx": _exception(
        f"{GRAPH_REPLAYS}: no kernel is left, and the model load is judged with the rest", ("graph_launches",),
        lost=("graph-mode-hides-kernels",), gained=("capture-no-kernels",), verdict=True,
        metrics=(*WINDOW_METRICS, *COPY_METRICS, "cpu_api_ns", "duration_ns"), skipped=NOTHING_LEFT),
    # OS-runtime calls: the server's idle waits (epoll) are no longer told apart from launch gaps
    "server_bursts_epoll": _exception(
        "OS-runtime calls are not traced: the waits for requests (epoll_wait) between bursts are idle time of "
        "unknown cause, so the GPU looks under-used rather than launch-bound", ("osrt_calls",),
        lost=("launch-bound", "server-idle"), gained=("low-utilization",), verdict=True,
        metrics=("copy_only_fraction", "gpu_active_fraction", "gpu_utilization", "mean_gap_ns", "overhead_ratio")),
    # GPU metrics
    "latency_bound_decode": _metrics_lost("GPU metrics are not traced", ("latency-bound-kernels",), verdict=True),
    "memory_bound_metrics": _metrics_lost("GPU metrics are not traced", ("memory-bound",), verdict=True),
    "metrics_2022_ga100": _metrics_lost("GPU metrics (nsys 2022 GENERIC_EVENTS) are not traced", ("memory-bound",),
                                        verdict=True),
    "metrics_2022_gh100": _metrics_lost("GPU metrics (nsys 2022 GENERIC_EVENTS) are not traced"),
    "metrics_2022_tu10x": _metrics_lost("GPU metrics (nsys 2022 GENERIC_EVENTS) are not traced"),
    "metrics_coarse_decode": _metrics_lost("GPU metrics are not traced, so neither is their sampling rate",
                                           ("metrics-too-coarse",)),
    "metrics_unknown_names": _metrics_lost("GPU metrics are not traced, so neither are their names",
                                           ("gpu-metrics-unrecognised",)),
    "nvlink_saturated_tp2": _metrics_lost("GPU metrics (NVLink throughput) are not traced", ("interconnect-saturated",),
                                          verdict=True),
    "tensor_idle_fp32_prefill": _metrics_lost("GPU metrics are not traced (the fp32 GEMMs are still found by name)"),
    # unified memory
    "uvm_migration_storm": _exception(
        "unified-memory migrations are not traced: what is left spans a short window", ("uvm_memcpys",),
        lost=("uvm-migration-storm",), gained=("capture-too-short",), verdict=True,
        metrics=("copy_only_fraction", "gpu_active_fraction", "gpu_utilization", "memcpy_bytes", "memcpy_ns")),
    "uvm_prefetch_host_print": _exception(
        "unified-memory migrations and CPU samples are not traced: what is left spans a short window",
        ("uvm_memcpys", "cpu_samples"), lost=("host-bound",), gained=("capture-too-short",), verdict=True,
        metrics=("copy_only_fraction", "gpu_active_fraction", "gpu_utilization", "memcpy_bytes", "memcpy_ns")),
    # the CUDA calls Kineto leaves out: of the driver API it logs launches and virtual-memory calls only
    "openmp_small_grids": _exception(
        "cuStreamSynchronize (a driver call) is not logged; the syncs themselves still are", ("driver_calls",),
        lost=("frequent-synchronization",), metrics=("cpu_api_ns", "duration_ns")),
    "tiny_kernels_queued": _exception(
        "cuCtxSynchronize (a driver call) is not logged", ("driver_calls",), metrics=("cpu_api_ns", "duration_ns")),
    "tiny_capture": _exception(
        "cuModuleGetLoadingMode (a driver call, the first of the capture) is not logged", ("driver_calls",),
        metrics=("cpu_api_ns", "duration_ns")),
    "pinned_alloc_before_loop": _exception(
        "cuMemHostAlloc (a driver call) is not logged; the pinned buffer is still seen through its copies",
        ("driver_calls",)),
    # a record that ends before it starts is written with duration 0 (output_json.cpp), so it is no longer invalid
    "clock_glitch": _exception(
        "the 42 records that end before they start are written with duration 0, and counted", ("reversed_records",),
        lost=("capture-invalid-timestamps",),
        metrics=("kernel_count", "mean_gap_ns", "mean_kernel_ns", "median_gap_ns", "memcpy_bytes", "pcie_bytes",
                 "pcie_count", "pinned_bytes")),
    # NVTX domains: the ranges stay, with their text; the domain name (vLLM's, here) is not needed
    "prefill_decode_nvtx": _exception("NVTX domains are lost; the ranges keep their text",
                                      ("nvtx_domain_ranges",)),
    "prefill_heavy_eager_decode": _exception("NVTX domains are lost; the ranges keep their text",
                                             ("nvtx_domain_ranges",)),
    "short_decode_after_prefills": _exception("NVTX domains are lost; the ranges keep their text",
                                              ("nvtx_domain_ranges",)),
    # no GPU activity at all: the nsys export is judged a failed capture, the trace is refused
    "empty_capture": _exception("the capture holds no event; a trace without any event is refused", (),
                                refused="holds no events"),
    "nvtx_only": _exception("the capture holds NVTX ranges only; a trace without GPU activity is refused",
                            ("nvtx_domain_ranges",), refused="holds no GPU activity"),
}


# ------------------------------------------------------------------------------------------------------------
# the traces, made once per run beside the exports (and read by every xdist worker)
# ------------------------------------------------------------------------------------------------------------
def kineto_path(name: str) -> Path:
    """The Kineto trace of generated scenario `name` (seed 0, scale 1), beside its export in the run's scenario
    directory, so that its diagnosis is cached as the export's is."""
    path = scenario_path(name).with_name(f"{name}{KINETO_SUFFIX}")
    if not path.exists():
        with _made_once(path):
            if not path.exists():
                scratch = Path(tempfile.mkdtemp(dir=path.parent)) / path.name
                generate(name, scratch, fmt="kineto")
                os.replace(scratch, path)
                scratch.parent.rmdir()
    return path


# ------------------------------------------------------------------------------------------------------------
# what the two diagnoses say, and where they differ
# ------------------------------------------------------------------------------------------------------------
def _text(value: Any) -> Any:
    return getattr(value, "value", value)


@dataclass(frozen=True)
class Summary:
    verdict: tuple[str | None, str | None, str | None]
    findings: frozenset[tuple[str, str, str | None]]
    skipped: dict[str, str]
    metrics: dict[str, Any]


def summarise(report) -> Summary:
    return Summary(
        (report.verdict.primary, report.verdict.rule, report.verdict.subject),
        frozenset((f.rule, _text(f.severity), f.subject) for f in report.findings),
        {s.rule: s.reason or "" for s in report.skipped},
        {k: _text(v) for k, v in report.metrics.items()})


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@dataclass
class Differences:
    verdict: tuple[Any, Any] | None
    lost: set[tuple[str, str, str | None]]  # fire on the export only
    gained: set[tuple[str, str, str | None]]  # fire on the trace only
    metrics: dict[str, tuple[Any, Any]]
    skipped_lost: set[str]  # skipped on the export only
    skipped_gained: dict[str, str]  # skipped on the trace only, with the reason

    def lines(self, allowed: Listed | None = None) -> list[str]:
        """One sentence per difference that `allowed` does not name."""
        ok = allowed or _exception("", ())
        out = []
        if self.verdict and not ok.verdict:
            out.append(f"verdict {self.verdict[0]} → {self.verdict[1]}")
        out += [f"{_name(f)} fires on the nsys export only" for f in sorted(self.lost, key=str) if f[0] not in ok.lost]
        out += [f"{_name(f)} fires on the Kineto trace only" for f in sorted(self.gained, key=str)
                if f[0] not in ok.gained]
        out += [f"{k}: {a} (nsys) → {b} (Kineto)" for k, (a, b) in sorted(self.metrics.items()) if k not in ok.metrics]
        out += [f"rule {r} is skipped on the nsys export only" for r in sorted(self.skipped_lost)
                if r not in ok.unskipped]
        out += [f"rule {r} is skipped on the Kineto trace only: {why}" for r, why in sorted(self.skipped_gained.items())
                if r not in ok.skipped]
        return out


def _name(finding: tuple[str, str, str | None]) -> str:
    rule, severity, subject = finding
    return f"{rule} ({severity}{', ' + subject if subject else ''})"


def differences(nsys: Summary, kineto: Summary) -> Differences:
    keys = sorted(set(nsys.metrics) | set(kineto.metrics))
    return Differences(
        verdict=None if nsys.verdict == kineto.verdict else (nsys.verdict, kineto.verdict),
        lost=set(nsys.findings - kineto.findings), gained=set(kineto.findings - nsys.findings),
        metrics={k: (nsys.metrics.get(k, "<none>"), kineto.metrics.get(k, "<none>")) for k in keys
                 if not _equal(nsys.metrics.get(k, "<none>"), kineto.metrics.get(k, "<none>"))},
        skipped_lost=set(nsys.skipped) - set(kineto.skipped),
        skipped_gained={r: why for r, why in kineto.skipped.items() if r not in nsys.skipped})


# ------------------------------------------------------------------------------------------------------------
# the comparison
# ------------------------------------------------------------------------------------------------------------
def check_listing(name: str) -> Listed | None:
    """The scenario is listed in EXCEPTIONS exactly when its trace drops data, with the kinds it drops."""
    drops = set(dropped(scenario_path(name)))
    listed = EXCEPTIONS.get(name)
    if listed is None:
        assert not drops, (f"{name}: the Kineto trace drops {sorted(drops)} of the export; list the scenario in "
                           f"EXCEPTIONS with what that changes")
    else:
        assert set(listed.drops) == drops, (f"{name}: EXCEPTIONS says the trace drops {sorted(listed.drops)}, "
                                            f"_kineto.dropped says {sorted(drops)}")
    return listed


@pytest.mark.parametrize("name", slow_but(sorted(SCENARIOS), *FAST))
def test_both_formats_get_the_same_diagnosis(name):
    listed = check_listing(name)
    nsys = summarise(scenario_analysis(name)[1])
    if listed is not None and listed.refused is not None:
        assert nsys.verdict[0] == "capture", f"{name}: the nsys export should be judged a failed capture: {nsys}"
        with pytest.raises(InputError, match=re.escape(listed.refused)):
            analysis(kineto_path(name))
        return
    report = analysis(kineto_path(name))[1]
    for fmt in FORMATS:  # the whole report, in every format
        text = render(report, fmt)
        assert "PyTorch profiler trace" in text and "Traceback" not in text, f"{name}: {fmt} report"
    kineto = summarise(report)
    diff = differences(nsys, kineto)
    unexplained = diff.lines(listed)
    assert not unexplained, (f"{name}: the Kineto trace of the same run is diagnosed differently:\n  "
                             + "\n  ".join(unexplained))
    if listed is not None:
        _check_the_listed_changes(name, listed, diff)


def _check_the_listed_changes(name: str, listed: Listed, diff: Differences) -> None:
    """What EXCEPTIONS says changes does: a rule it names as lost or gained is, a rule the trace must skip is
    skipped with its reason, and the verdict changes when it says so (else it does not, as checked above)."""
    assert {f[0] for f in diff.lost} == listed.lost, \
        f"{name}: rules firing on the export only: {sorted({f[0] for f in diff.lost})}, listed {sorted(listed.lost)}"
    assert {f[0] for f in diff.gained} == listed.gained, \
        f"{name}: rules firing on the trace only: {sorted({f[0] for f in diff.gained})}, listed {sorted(listed.gained)}"
    for rule, why in listed.skipped.items():
        assert why in diff.skipped_gained.get(rule, ""), \
            f"{name}: the trace's report should skip {rule} because it {why}; it says {diff.skipped_gained.get(rule)}"
    assert diff.skipped_lost == listed.unskipped, \
        f"{name}: rules skipped on the export only: {sorted(diff.skipped_lost)}, listed {sorted(listed.unskipped)}"
    if listed.verdict:
        assert diff.verdict is not None, f"{name}: EXCEPTIONS says the verdict changes; it no longer does"


def test_every_exception_names_a_scenario():
    unknown = sorted(set(EXCEPTIONS) - set(SCENARIOS))
    assert not unknown, f"EXCEPTIONS names scenarios that are not generated: {unknown}"
    kinds = {"graph_launches", "osrt_calls", "gpu_metrics", "cpu_samples", "uvm_memcpys", "nvtx_domain_ranges",
             "driver_calls", "runtime_calls", "stream_wait_events", "reversed_records", "unreadable_names"}
    assert all(e.drops <= kinds for e in EXCEPTIONS.values())


def test_differences_read_as_sentences():
    nsys = Summary(("launch-bound", "launch-bound", "GPU 0"), frozenset({("launch-bound", "warning", "GPU 0")}),
                   {"memory-bound": "no metrics"}, {"kernel_count": 10, "gpu_utilization": 0.5})
    kineto = Summary((None, None, None), frozenset({("capture-too-short", "warning", None)}),
                     {"memory-bound": "no metrics", "host-bound": "no kernels"},
                     {"kernel_count": 10, "gpu_utilization": 0.25})
    assert differences(nsys, kineto).lines() == [
        "verdict ('launch-bound', 'launch-bound', 'GPU 0') → (None, None, None)",
        "launch-bound (warning, GPU 0) fires on the nsys export only",
        "capture-too-short (warning) fires on the Kineto trace only",
        "gpu_utilization: 0.5 (nsys) → 0.25 (Kineto)",
        "rule host-bound is skipped on the Kineto trace only: no kernels",
    ]
    allowed = _exception("", (), lost=("launch-bound",), gained=("capture-too-short",), verdict=True,
                         metrics=("gpu_utilization",), skipped={"host-bound": "no kernels"})
    assert differences(nsys, kineto).lines(allowed) == []
    assert differences(nsys, nsys).lines() == []
    # an int is not the float of the same value: a count read as a float is a difference
    assert differences(nsys, Summary(nsys.verdict, nsys.findings, nsys.skipped,
                                     {**nsys.metrics, "kernel_count": 10.0})).lines()


# ------------------------------------------------------------------------------------------------------------
# the trace itself
# ------------------------------------------------------------------------------------------------------------
def _raw_counts(export: Path) -> dict[str, int]:
    with sqlite_ro(export) as con:
        def n(sql: str) -> int:
            return con.execute(sql).fetchone()[0]
        return {"kernel": n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
                "gpu_memcpy": n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
                "cuda_runtime": n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 0"),
                "cuda_sync": n("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
                "user_annotation": n("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND \"end\" IS NOT NULL")}


def test_the_trace_is_laid_out_as_kineto_writes_it(tmp_path):
    """eager_decode's trace: the header keys in Kineto's order, one event over several lines, times as
    microseconds with three decimals, one event per export row, an ac2g flow from each launch to its kernel, and
    the Record Window End last; writing it again gives the same bytes."""
    path = kineto_path("eager_decode")
    raw = gzip.decompress(path.read_bytes()).decode("utf-8")
    trace = json.loads(raw)
    assert list(trace) == ["schemaVersion", "deviceProperties", "cupti_version", "cuda_runtime_version",
                           "cuda_driver_version", "host_name", "displayTimeUnit", "baseTimeNanoseconds", "traceEvents",
                           "traceName"]
    assert trace["schemaVersion"] == 1 and trace["displayTimeUnit"] == "ms"
    assert trace["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert trace["deviceProperties"][0]["numSms"] == 132
    assert trace["baseTimeNanoseconds"] % (7_889_238 * 10**9) == 0
    assert raw.startswith(' {\n    "schemaVersion": 1,\n    "deviceProperties": [{"id": 0, ')
    assert '\n  {\n    "ph": "X",\n    "cat": "kernel",\n    "name": ' in raw
    assert all(re.fullmatch(r"\d+\.\d{3}", t) for t in re.findall(r'"(?:ts|dur)": ([^,\n]+)', raw))
    events = trace["traceEvents"]
    assert events[-1] == {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "",
                          "ts": events[-1]["ts"]}
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e["ph"] == "X":
            by_cat.setdefault(e["cat"], []).append(e)
    assert {cat: len(v) for cat, v in by_cat.items()} == _raw_counts(scenario_path("eager_decode"))
    launches = {e["args"]["correlation"]: e for e in by_cat["cuda_runtime"] if e["name"] == "cudaLaunchKernel"}
    assert all(k["args"]["correlation"] in launches for k in by_cat["kernel"])
    flows = {(e["ph"], e["id"]) for e in events if e.get("cat") == "ac2g"}
    assert all(("s", c) in flows and ("f", c) in flows for c in launches)
    assert {e["name"] for e in by_cat["user_annotation"]} == {"execute_model"}
    again = tmp_path / path.name
    assert write_kineto(scenario_path("eager_decode"), again) == {}
    assert again.read_bytes() == path.read_bytes()


# ------------------------------------------------------------------------------------------------------------
# multi-rank runs: one trace per rank
# ------------------------------------------------------------------------------------------------------------
def _run_summary(report) -> dict[str, Any]:
    return {
        "verdict": (report.verdict.primary, report.verdict.rule, report.verdict.subject),
        "findings": sorted((f.rule, _text(f.severity), f.subject) for f in report.findings),
        "balance": report.balance.model_dump(),
        "ranks": [(r.rank, r.window_ns, r.kernel_time_ns, r.compute_ns, r.comm_ns, r.exposed_comm_ns, r.step_time_ns,
                   r.is_straggler, (r.verdict.primary, r.verdict.rule, r.verdict.subject),
                   sorted((f.rule, _text(f.severity), f.subject) for f in r.findings)) for r in report.ranks],
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUN_SCENARIOS))
def test_a_run_of_rank_traces_gets_the_same_diagnosis(name, tmp_path, monkeypatch):
    """Each rank's trace carries its rank in `distributedInfo`, which numbers the ranks; the run read from the
    directory of traces is judged as the run read from the exports."""
    from nsys_diagnose.runs.multirank import diagnose_run

    monkeypatch.setenv("NSYS_DIAGNOSE_CACHE_DIR", str(tmp_path / "cache"))
    generate_run(name, tmp_path / "nsys")
    generate_run(name, tmp_path / "kineto", fmt="kineto")
    ranks = RUN_SCENARIOS[name].ranks
    traces = [tmp_path / "kineto" / f"rank{r}{KINETO_SUFFIX}" for r in range(ranks)]
    assert sorted(p.name for p in (tmp_path / "kineto").iterdir()) == sorted(p.name for p in traces)
    for r, trace in enumerate(traces):
        info = json.loads(gzip.decompress(trace.read_bytes()))["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("nccl", r, ranks)
    nsys = diagnose_run([tmp_path / "nsys"], cache=False)
    kineto = diagnose_run([tmp_path / "kineto"], cache=False)
    assert kineto.rank_numbering == "distributedInfo"
    assert _run_summary(kineto) == _run_summary(nsys)
