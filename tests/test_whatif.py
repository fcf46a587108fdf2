"""What a fix would buy: the replay of each cause's removal, checked by hand arithmetic on the generated exports,
the batch projection's range, and the compare of a projection with the next measurement."""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path

import pytest

from cli_in_process import run_cli
from conftest import scenario_analysis

NODE_GAP_NS = 1000  # facts.whatif_node_gap_ns: no node-traced graph replay in these scenarios


def _ops_by_step(path: Path, like: str = "execute_model") -> list[list[tuple[int, int, int, bool | None]]]:
    """Each 'execute_model' step's GPU operations (gap before it, start, end, is attention: None for a copy), from
    the export's own CUPTI rows: the kernels and copies whose launching call lies from the step's start to the next
    step's start (the STEPS block's span; the last step's range is its span here, as no call follows it), in start
    order."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    starts = [r[0] for r in con.execute("SELECT start FROM NVTX_EVENTS WHERE text LIKE ? ORDER BY start", (like,))]
    last_end = con.execute("SELECT max(end) FROM NVTX_EVENTS WHERE text LIKE ?", (like,)).fetchone()[0]
    ops = con.execute(
        "SELECT r.start, g.start, g.end, CASE WHEN g.name IS NOT NULL THEN s.value LIKE '%flash_fwd%' END FROM "
        "(SELECT correlationId, start, end, demangledName AS name FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "UNION ALL SELECT correlationId, start, end, NULL FROM CUPTI_ACTIVITY_KIND_MEMCPY) g "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.correlationId "
        "LEFT JOIN StringIds s ON s.id = g.name ORDER BY g.start").fetchall()
    con.close()
    spans = list(zip(starts, starts[1:] + [last_end]))
    prev_end = None
    steps: dict[int, list[tuple[int, int, int, bool | None]]] = {}
    for call, start, end, attention in ops:
        gap = 0 if prev_end is None else max(start - prev_end, 0)
        prev_end = end
        for i, (rs, re_) in enumerate(spans):
            if rs <= call < re_:
                steps.setdefault(i, []).append((gap, start, end, None if attention is None else bool(attention)))
    return [ops_of_step for _, ops_of_step in sorted(steps.items())]


def _steps_by_hand(path: Path, like: str = "execute_model") -> list[tuple[int, int]]:
    """(measured, projected without launch gaps) of each step (_ops_by_step): each operation adds its duration (they
    never overlap here) and the idle time before it. Without launch gaps each gap after the step's first operation
    becomes the per-node gap; the gap before the first (the DtoH, sync and host work between steps) stays."""
    out = []
    for ops_of_step in _ops_by_step(path, like):
        busy = sum(e - s for _, s, e, _ in ops_of_step)
        gaps = [g for g, _, _, _ in ops_of_step]
        out.append((busy + sum(gaps), busy + gaps[0] + sum(min(g, NODE_GAP_NS) for g in gaps[1:])))
    return out


def _batch_replay_by_hand(ops_of_step: list[tuple[int, int, int, bool | None]], attention: float,
                          other: float) -> int:
    """The step's chain replayed with attention kernels `attention` times and the other kernels `other` times as
    long (copies as measured): an operation starts at max(when it was issued, the previous one's new end), where
    it was issued is its measured start when an idle gap preceded it (else it waited on the previous one), and the
    first at its measured start. The step runs from the first operation's gap onwards."""
    origin = ops_of_step[0][1] - ops_of_step[0][0]
    end = None
    for i, (gap, start, stop, is_attention) in enumerate(ops_of_step):
        ready = start if i == 0 or gap > 0 else end
        factor = 1 if is_attention is None else attention if is_attention else other
        end = max(ready, end if end is not None else ready) + (stop - start) * factor
    return round(end - origin)


def test_reference_launch_gaps_projection_matches_hand_arithmetic():
    facts, report = scenario_analysis("reference_batch1_decode")
    from conftest import _SCENARIO_DIR
    by_hand = _steps_by_hand(_SCENARIO_DIR[0] / "reference_batch1_decode.sqlite")
    assert len(by_hand) == 96
    measured = statistics.median(m for m, _ in by_hand)
    projected = statistics.median(p for _, p in by_hand)
    # ~100 kernels x 4 us busy + 100 gaps of ~1 us + the retained gap before each step: about half the ~1.08 ms
    assert 1_000_000 <= measured <= 1_150_000 and 480_000 <= projected <= 600_000
    launch = next(f for f in report.findings if f.rule == "launch-bound")
    w = launch.what_if
    assert w is not None and w.transform == "launch-gaps" and w.basis == "steps" and w.steps == 96
    assert w.measured_step_ns == pytest.approx(measured, rel=0.01)
    assert w.projected_step_ns == pytest.approx(projected, rel=0.01)
    assert w.speedup == pytest.approx(measured / projected, rel=0.02)
    assert w.line.startswith("without launch gaps: step 1.") and "steps/s" in w.line


@pytest.mark.slow
def test_reference_batch8_range():
    facts, report = scenario_analysis("reference_batch1_decode")
    b = report.batch_what_if
    assert report.verdict.primary == "launch-bound"
    # made by default: the primary is a fixed per-step cost and the profile does not record its batch
    assert b is not None and b.batch == 8 and b.current_batch is None and b.factor == 8 and b.method == "model"
    w = next(f for f in report.findings if f.rule == "launch-bound").what_if
    row = next(r for r in report.facts["whatif_replay"] if r["phase"] is None)
    kernels, attention = row["kernel_step_ns"], row["attention_step_ns"]
    assert attention == pytest.approx(kernels * 11 / 100, rel=0.1)
    # by hand: each step's chain replayed with attention x8 and the other kernels flat (low) or +35 % (high, 5 %
    # per extra batch); the copies of these steps are its DtoH only, which stay
    from conftest import _SCENARIO_DIR
    steps = _ops_by_step(_SCENARIO_DIR[0] / "reference_batch1_decode.sqlite")
    assert len(steps) == 96
    assert all(sum(1 for _, _, _, a in ops_of_step if a) == 11 for ops_of_step in steps)
    low = statistics.median(_batch_replay_by_hand(o, 8, 1) for o in steps)
    high = statistics.median(_batch_replay_by_hand(o, 8, 1.35) for o in steps)
    assert b.projected_step_low_ns == pytest.approx(low, rel=0.01)
    assert b.projected_step_high_ns == pytest.approx(high, rel=0.01)
    # the longer kernels fill the launch gaps: the step hardly grows, so tokens/s grows nearly 8x and TPOT stays
    assert 1_000_000 <= b.projected_step_low_ns <= b.projected_step_high_ns <= 1.05 * b.measured_step_ns
    assert b.throughput_gain_low == pytest.approx(8 * b.measured_step_ns / b.projected_step_high_ns, rel=1e-3)
    assert b.throughput_gain_high == pytest.approx(8 * b.measured_step_ns / b.projected_step_low_ns, rel=1e-3)
    assert 7.5 < b.throughput_gain_low <= b.throughput_gain_high <= 8.01
    assert -0.01 <= b.tpot_rise_low <= b.tpot_rise_high < 0.05
    assert b.measured_step_ns == w.measured_step_ns
    assert "TPOT stays as measured" in b.line and "8 × the current batch" in b.assumptions[0]
    assert "filled by longer kernels" in b.assumptions[1]


def test_sync_projection_counts_only_sync_idle_time():
    """Removing the syncs saves exactly the GPU idle time of cause sync (each such gap down to the per-node gap),
    never the CPU's blocked time nor the other idle causes."""
    from conftest import _SCENARIO_DIR
    from nsys_diagnose.facts.compute import compute_facts
    from nsys_diagnose.reading.export import open_export

    _, report = scenario_analysis("sync_storm")
    w = next(f for f in report.findings if f.rule == "frequent-synchronization").what_if
    assert w is not None and w.transform == "sync" and w.basis == "steps"
    with open_export(_SCENARIO_DIR[0] / "sync_storm.sqlite") as export:
        # a sum over the steps needs all of them, not the sample whatif_replay's medians take
        facts = compute_facts(export, helpers=["_whatif_steps", "_idle_gaps"], params={"whatif_sample_steps": 10**9})
    steps = facts.rows("_whatif_steps")
    gaps = facts.rows("_idle_gaps")
    saved = sum(r["measured_ns"] - r["sync_ns"] for r in steps)
    sync_gaps = [g["gap_ns"] for g in gaps if g["cause"] == "sync"]
    # every sync gap of the capture lies in some step except, at most, the few before the first step
    by_hand = sum(g - min(g, NODE_GAP_NS) for g in sync_gaps)
    assert 0.98 * by_hand <= saved <= by_hand
    # the idle time the window breakdown charges to syncs (drain, wake-up, relaunch) bounds it, and it is most of
    # this profile's idle time, not all of it
    idle_sync = sum(r["idle_sync_ns"] for r in facts.rows("gpu_utilization"))
    idle = sum(r["window_ns"] - r["compute_busy_ns"] for r in facts.rows("gpu_utilization"))
    assert saved <= idle_sync < idle
    # busy time and the other causes' gaps stay: the replayed steps are never shorter than that
    assert all(r["sync_ns"] >= r["busy_ns"] for r in steps)
    assert w.speedup == pytest.approx(w.measured_step_ns / w.projected_step_ns)


def test_copies_pinned_on_pageable_copies():
    _, report = scenario_analysis("pageable_copies")
    f = next(f for f in report.findings if f.rule in ("pcie-bound", "pageable-memory-copies")
             and f.severity.at_least(f.severity.WARNING))
    w = f.what_if
    assert w is not None and w.transform == "copies-pinned"
    # 2 x 256 MiB per step at ~3 GB/s pageable (~180 ms) against 12..25 GB/s pinned (no large pinned copy to
    # measure: PCIe 3.0 to 4.0 x16), a range whose slow end is the step at 12 GB/s
    assert 5 < w.speedup < 10
    assert w.projected_step_slow_ns is not None and w.projected_step_ns < w.projected_step_slow_ns < w.measured_step_ns
    # the copies dominate: at 12 GB/s they take about 25/12 as long as at 25 GB/s
    assert 1.5 < w.projected_step_slow_ns / w.projected_step_ns < 2.2
    assert any("12..25 GB/s, a range" in a for a in w.assumptions)
    assert ".." in w.line.split("→")[1]


def _fused_steps_by_hand(path: Path, glue: set[str]) -> list[tuple[int, int]]:
    """(measured, projected with the glue fused) of each step of a run whose host issues far ahead of the GPU (every
    gap is the GPU's own, none a wait for the host): each run of k consecutive glue kernels takes 1/k of its time and
    loses the gaps before its second to last kernel; every other duration and gap stays."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    spans = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'execute_model' ORDER BY start").fetchall()
    ops = con.execute(
        "SELECT r.start, g.start, g.end, s.value FROM "
        "(SELECT correlationId, start, end, demangledName AS name FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "UNION ALL SELECT correlationId, start, end, NULL FROM CUPTI_ACTIVITY_KIND_MEMCPY) g "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.correlationId "
        "LEFT JOIN StringIds s ON s.id = g.name ORDER BY g.start").fetchall()
    con.close()
    starts = [s for s, _ in spans]
    bounds = list(zip(starts, starts[1:] + [spans[-1][1]]))
    steps: dict[int, list[tuple[int, int, bool]]] = {}
    prev_end = None
    for call, start, end, name in ops:
        gap = 0 if prev_end is None else max(start - prev_end, 0)
        prev_end = end
        for i, (lo, hi) in enumerate(bounds):
            if lo <= call < hi:
                steps.setdefault(i, []).append((gap, end - start, name in glue))
    out = []
    for ops_of_step in steps.values():
        measured = sum(g + d for g, d, _ in ops_of_step)
        fused, i = ops_of_step[0][0], 0  # the gap before the step's first operation stays
        while i < len(ops_of_step):
            j = i
            while j + 1 < len(ops_of_step) and ops_of_step[i][2] and ops_of_step[j + 1][2]:
                j += 1
            run = ops_of_step[i:j + 1]
            fused += (run[0][0] if i else 0) + sum(d for _, d, _ in run) / len(run)
            i = j + 1
        out.append((measured, round(fused)))
    return out


def test_fusion_projection_matches_hand_arithmetic():
    """The fused replay on an eager run whose glue takes ~42 % of the GPU: each repeated run of k glue kernels at
    1/k of its time, its inner launches gone, everything else as measured."""
    from conftest import _SCENARIO_DIR
    from nsys_diagnose.fixtures.generator import _GLUE_CLASSES

    _, report = scenario_analysis("eager_unfused_glue")
    by_hand = _fused_steps_by_hand(_SCENARIO_DIR[0] / "eager_unfused_glue.sqlite",
                                   {spec.demangled for spec in _GLUE_CLASSES})
    assert len(by_hand) == 6
    finding = next(f for f in report.findings if f.rule == "unfused-elementwise")
    w = finding.what_if
    assert w is not None and w.transform == "fused" and w.basis == "steps" and w.steps == 6
    assert w.measured_step_ns == pytest.approx(statistics.median(m for m, _ in by_hand), rel=0.01)
    # the replay, but never more than removing the rule's measured saving share gives (one saving model)
    share = finding.row["fusion_saving_fraction"]
    assert w.projected_step_ns == pytest.approx(max(statistics.median(p for _, p in by_hand),
                                                    w.measured_step_ns * (1 - share)), rel=0.01)
    assert finding.impact == pytest.approx(1 - w.projected_step_ns / w.measured_step_ns)
    # per layer 520 us of kernels of which 136 us go (runs of 2, 6, 2 and 2 glue kernels): ~1.35x steps/s
    assert 1.3 < w.speedup < 1.45 and "with the glue fused: step 17." in w.line and "steps/s" in w.line
    assert any("1/k of the run's time" in a for a in w.assumptions)


@pytest.mark.slow
def test_fusion_projection_changes_nothing_without_fusion_candidates():
    """A run with no repeated run of glue kernels replays to its measured steps: the transform only moves what it
    fuses."""
    for name in ("reference_batch1_decode", "healthy_graph_decode", "sync_storm", "long_context_decode"):
        _, report = scenario_analysis(name)
        candidates = {r["device_id"] for r in report.facts.get("fusion_candidates", []) if r["top_sequences"]}
        for row in report.facts["whatif_replay"]:
            if row["device_id"] not in candidates:
                assert row["fused_step_ns"] == row["measured_step_ns"], (name, row)


@pytest.mark.slow
def test_no_what_if_on_info_or_symptom_findings():
    for name in ("reference_batch1_decode", "sync_storm", "healthy_graph_decode"):
        _, report = scenario_analysis(name)
        for f in report.findings:
            if f.what_if is not None:
                assert f.severity.at_least(f.severity.WARNING) and f.kind.value == "cause"
            if not f.severity.at_least(f.severity.WARNING):
                assert f.what_if is None
    _, healthy = scenario_analysis("healthy_graph_decode")
    assert healthy.batch_what_if is None  # nothing is launch- or host-bound: no default batch projection


def test_compare_shows_projection_beside_measurement(tmp_path):
    from nsys_diagnose.runs.compare import compare
    from nsys_diagnose.reports.render import render

    _, before = scenario_analysis("reference_batch1_decode")
    _, after = scenario_analysis("graph_decode_node")
    # the graph run decodes batch 64 against batch 1: another workload, whose step cannot test the projection
    unchecked = next(p for p in compare(before, after).projections if p.rule == "launch-bound")
    assert unchecked.error is None and "another workload" in unchecked.line
    # the same GPU work per step in the after run (only the gaps removed): the projection is set beside it
    after = after.model_copy(deep=True)
    work = next(r["median_step_ns"] * r["median_busy_share"] for r in before.facts["steps"] if r["step_count"])
    for r in after.facts["steps"]:
        if r["step_count"]:
            r["median_busy_share"] = work / r["median_step_ns"]
    cmp = compare(before, after)
    p = next(p for p in cmp.projections if p.rule == "launch-bound")
    w = next(f for f in before.findings if f.rule == "launch-bound").what_if
    assert p.projected_step_ns == w.projected_step_ns and p.before_step_ns == w.measured_step_ns
    after_row = next(r for r in after.facts["whatif_replay"] if r["phase"] is None)
    assert p.measured_step_ns == after_row["measured_step_ns"]
    assert p.error == pytest.approx(p.measured_step_ns / p.projected_step_ns - 1)
    text = render(cmp, "terminal", colour=False)
    assert "projected" in text and "measured" in text and "WHAT-IF CHECK" in text
    assert "What-if check" in render(cmp, "md")
    assert p.applied and p.before_step_source == "nvtx"


def test_compare_checks_no_projection_while_the_cause_is_still_present():
    """Comparing a run with itself: the finding is still there at its full cost, so no fix was applied and its
    projection is not set beside a measurement."""
    from nsys_diagnose.runs.compare import compare
    from nsys_diagnose.reports.render import render

    _, before = scenario_analysis("reference_batch1_decode")
    cmp = compare(before, before)
    p = next(p for p in cmp.projections if p.rule == "launch-bound")
    assert not p.applied and p.measured_step_ns is None and p.error is None
    assert "cause still present" in p.line and "measured" not in p.line
    assert "cause still present" in render(cmp, "md")


def test_too_few_steps_give_no_projection():
    """A projection from a handful of steps says too little: below five, none per finding and no batch one."""
    from nsys_diagnose.diagnosis import whatif

    row = {"device_id": 0, "phase": None, "source": "nvtx", "steps": 4, "measured_step_ns": 1_000_000,
           "launch_gaps_step_ns": 500_000, "batch_factor": 8, "batch_low_step_ns": 1_000_000,
           "batch_high_step_ns": 1_100_000}
    assert whatif.what_if("launch-gaps", row) is None
    assert whatif.what_if("launch-gaps", {**row, "steps": 5}) is not None
    assert whatif.what_if("launch-gaps", {**row, "source": "window", "steps": 1}).basis == "window"


@pytest.mark.parametrize("value, says", [("1", "at least 2"), ("0", "at least 2"), ("x", "at least 2"),
                                         ("8.5", "at least 2"), ("-3", "at least 2"), ("4097", "at most 4096")])
def test_what_if_batch_refuses_bad_values(value, says, tmp_path):
    path = tmp_path / "none.sqlite"
    run = run_cli(path, "--what-if", f"batch={value}")
    assert run.returncode == 2
    assert "Traceback" not in run.stderr and says in run.stderr


@pytest.mark.slow
def test_what_if_batch_on_the_command_line(tmp_path):
    from nsys_diagnose.runs.api import diagnose
    from conftest import _SCENARIO_DIR

    scenario_analysis("reference_batch1_decode")
    report = diagnose(_SCENARIO_DIR[0] / "reference_batch1_decode.sqlite", what_if_batch=16, cache=False,
                      tokens=96)
    b = report.batch_what_if
    assert b is not None and b.batch == 16 and b.factor == 16
    # 16 x the attention kernels no longer fit in the launch gaps they fill: the step grows, if less than at batch 8
    # the gaps held it
    assert b.throughput_gain_high < 16 and 0 < b.tpot_rise_low < b.tpot_rise_high
    # with --tokens (one token per batch-1 step), tokens/s follows the steps/s speed-up
    w = next(f for f in report.findings if f.rule == "launch-bound").what_if
    assert w.measured_tokens_per_s == report.throughput.tokens_per_s
    assert w.projected_tokens_per_s == pytest.approx(w.measured_tokens_per_s * w.speedup)
    assert w.projected_steps_per_s == pytest.approx(1e9 / w.projected_step_ns)


@pytest.mark.slow
def test_batch_fit_where_steps_carry_their_batch(tmp_path):
    """TensorRT-LLM labels each step with its batch composition: with 1-4 generation requests per step, the batch
    projection fits step time against batch size by least squares instead of the kernel model."""
    from nsys_diagnose.runs.api import diagnose
    from nsys_diagnose.fixtures.generator import generate

    path = tmp_path / "trtllm.sqlite"
    generate("reference_batch1_decode", path)
    con = sqlite3.connect(path)
    ids = [r[0] for r in con.execute("SELECT rowid FROM NVTX_EVENTS WHERE text = 'execute_model' ORDER BY start")]
    batches = [1 + i % 4 for i in range(len(ids))]
    for i, (rowid, b) in enumerate(zip(ids, batches)):
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?",
                    (f"[Executor] _forward_step {i}: 0 ctx reqs, {b} gen reqs", rowid))
    con.commit()
    con.close()
    measured = [m for m, _ in _steps_by_hand(path, "[Executor] _forward_step %")]
    assert len(measured) == len(batches)
    n = len(batches)
    mb, mm = sum(batches) / n, sum(measured) / n
    slope = (sum((b - mb) * (m - mm) for b, m in zip(batches, measured))
             / sum((b - mb) ** 2 for b in batches))
    intercept = mm - slope * mb
    report = diagnose(path, cache=False)
    row = next(r for r in report.facts["whatif_replay"] if r["phase"] == "decode")
    assert row["batch_sizes"] == 4 and row["batch_median"] == 2.5
    assert row["fit_slope_ns"] == pytest.approx(slope, rel=1e-6, abs=1e-3)
    assert row["fit_intercept_ns"] == pytest.approx(intercept, rel=1e-6)
    b = report.batch_what_if
    # small batch and launch-bound: projected by default, to 8 requests per step, by the fit
    assert b is not None and b.method == "fit" and b.batch == 8 and b.current_batch == 2.5
    assert b.factor == pytest.approx(8 / 2.5)
    assert b.projected_step_low_ns == b.projected_step_high_ns == pytest.approx(intercept + 8 * slope, abs=1)
    assert b.measured_step_ns == pytest.approx(intercept + 2.5 * slope, abs=1)
    assert "least-squares fit" in b.line and "batch 8:" in b.line


def test_rule_what_if_key_is_validated(tmp_path):
    """`what_if:` is data like every rule key: a transform the replay does not know is a file:line error."""
    from pathlib import Path as P

    text = (P(__file__).parent.parent / "rules/launch-bound/launch-bound.yaml").read_text()
    text = text.replace("id: launch-bound", "id: acme/launch-twice").replace("what_if: launch-gaps", "what_if: graphs")
    (tmp_path / "launch-twice.yaml").write_text(text)
    run = run_cli("rules", "check", tmp_path)
    assert run.returncode == 2
    line = next(i for i, x in enumerate(text.splitlines(), 1) if x.startswith("what_if:"))
    assert f"launch-twice.yaml:{line}:1" in run.stdout + run.stderr and "'launch-gaps'" in run.stdout + run.stderr


@pytest.mark.slow
def test_a_run_that_serves_no_llm_gets_no_batch_projection_unless_asked(tmp_path):
    # An OpenACC stencil loop whose primary (small-kernels) a larger batch would amortise: "tokens/s" and "TPOT"
    # mean nothing there, so no projection by default, and an explicit one speaks of work and step time.
    from nsys_diagnose.runs.api import diagnose
    from conftest import _SCENARIO_DIR

    _, report = scenario_analysis("tiny_kernels_queued")
    assert report.profile.stack.name == "openacc" and report.verdict.rule == "small-kernels"
    assert report.batch_what_if is None
    asked = diagnose(_SCENARIO_DIR[0] / "tiny_kernels_queued.sqlite", what_if_batch=8, cache=False).batch_what_if
    assert asked is not None and "work per second" in asked.line and "the step time" in asked.line
    assert "tokens" not in asked.line and "TPOT" not in asked.line
    # a serving stack gets one by default, in tokens/s and TPOT
    _, reference = scenario_analysis("reference_batch1_decode")
    assert "tokens/s" in reference.batch_what_if.line and "TPOT" in reference.batch_what_if.line


def test_no_batch_projection_for_a_window_or_a_handful_of_steps():
    """A GPU without steps is projected over its judged window, which is no step: no batch or TPOT there; nor
    from fewer than five steps."""
    from nsys_diagnose.diagnosis import whatif

    row = {"device_id": 0, "phase": None, "source": "nvtx", "steps": 40, "measured_step_ns": 1_000_000,
           "kernel_step_ns": 400_000, "attention_step_ns": 40_000, "batch_factor": 8,
           "batch_low_step_ns": 1_000_000, "batch_high_step_ns": 1_100_000}

    class Facts:
        def __init__(self, r):
            self.results = {whatif.FACT: None}
            self._rows = [r]

        def rows(self, name):
            return self._rows

    assert whatif.batch_projection(Facts(row), 8, None, None) is not None
    assert whatif.batch_projection(Facts({**row, "source": "window", "steps": 1}), 8, None, None) is None
    assert whatif.batch_projection(Facts({**row, "steps": 4}), 8, None, None) is None
    # a replay of another batch than the one asked is no projection of it
    assert whatif.batch_projection(Facts(row), 16, None, None) is None


EXAMPLE = Path(__file__).resolve().parent.parent / "fixtures" / "examples" / "eager_decode.sqlite"


def test_an_explicit_batch_what_if_is_shown_as_the_one_asked_for():
    """`--what-if batch=8` asks for the projection the report makes by default: the report says so, rather than
    printing the same bytes as without the option (docs/reports.md "One story per report")."""
    from nsys_diagnose.runs.api import diagnose
    from nsys_diagnose.reports.render import render

    default, asked = diagnose(EXAMPLE), diagnose(EXAMPLE, what_if_batch=8)
    assert default.batch_what_if is not None and asked.batch_what_if is not None
    assert default.batch_what_if.batch == asked.batch_what_if.batch == 8
    assert "--what-if" not in default.batch_what_if.line
    assert "(--what-if batch=8, the default projection)" in asked.batch_what_if.line
    for fmt in ("terminal", "md", "html"):
        assert render(default, fmt) != render(asked, fmt), fmt
    other = diagnose(EXAMPLE, what_if_batch=16).batch_what_if
    assert other is not None and "(--what-if batch=16)" in other.line


def test_a_range_whose_ends_print_alike_is_one_value_in_every_format():
    """'4.19 ms..4.19 ms' or '8.0×..8.0×' says nothing a single value does not: each format shows one value."""
    import re

    from nsys_diagnose.runs.api import diagnose
    from nsys_diagnose.reports.render import render
    from nsys_diagnose.base.units import fmt_range, fmt_span

    assert fmt_range(4_185_175, 4_192_723) == "4.19 ms" and fmt_range(1_380_000, 1_510_000) == "1.38..1.51 ms"
    assert fmt_span(7.99, 8.0, lambda x: f"{x:.1f}×") == "8.0×"
    report = diagnose(EXAMPLE)
    b = report.batch_what_if
    assert b is not None and b.projected_step_low_ns != b.projected_step_high_ns  # the ends differ, unprinted
    degenerate = re.compile(r"(\d[\d.,]*)\s?([^\s\d.]*)\.\.\1\s?\2(?![\d.])")
    for fmt in ("terminal", "md", "html", "json"):
        text = render(report, fmt)
        assert not degenerate.search(text), (fmt, degenerate.search(text))
