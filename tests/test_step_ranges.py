"""The steps of a serving run: one row per iteration of the engine's loop, as the stacks mark it in NVTX
(vLLM V1 `gpu_model_runner: forward`, `execute_model`, TensorRT-LLM `_forward_step N: C ctx reqs, G gen reqs`,
phase ranges) or, without such ranges, from the synchronisations or graph launches of the thread that issues
the work. Step time, per-phase step statistics and the quiet stretches of a waiting server are all read from
these rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest

from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.compute import _define_phases, compute_facts
from nsys_diagnose.fixtures.generator import generate
from nsys_diagnose.reading.export import open_export

from conftest import real, requires_real

STEP_CASES = [
    ("gpu_model_runner: forward", True), ("gpu_model_runner:forward", True), ("execute_model", True),
    ("Worker.execute_model", True), ("[Executor] _forward_step 12: 2 ctx reqs, 30 gen reqs", True),
    ("step", True), ("step 12", True), ("engine_step", True), ("iteration #3", True), ("Model step", True),
    # the other ranges of a vLLM V1 step belong to the step the forward range anchors
    ("gpu_model_runner: preprocess", False), ("gpu_model_runner: sample", False),
    # nothing that merely contains the letters: optimizer steps, schedulers, modules
    ("optimizer.step", False), ("step_size_search", False), ("execute_model_async_helper", False),
    ("LlamaForCausalLM.forward", False), ("aten::mm", False), ("lr_scheduler.step", False),
]


@pytest.fixture(scope="module")
def step_of():
    con = duckdb.connect()
    _define_phases(con, None)
    yield lambda text: con.execute("SELECT step_of(?)", [text]).fetchone()[0]
    con.close()


@pytest.mark.parametrize(("text", "is_step"), STEP_CASES, ids=[t for t, _ in STEP_CASES])
def test_a_range_is_a_step_when_its_text_names_one(step_of, text, is_step) -> None:
    assert (step_of(text) is not None) == is_step


def _steps(path: Path, step_patterns: dict[str, str] | None = None) -> list[dict]:
    facts = load_facts()
    needed = {name: facts[name] for name in ("_api_names", "_api_classes", "_step_ranges")}
    with open_export(path, cache=False) as export:
        found = compute_facts(export, facts=needed, helpers={"_step_ranges"}, step_patterns=step_patterns)
    return found.rows("_step_ranges")


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("steps")
    for name in ("eager_decode", "prefill_heavy_eager_decode", "sync_storm", "graph_decode_graph"):
        generate(name, root / f"{name}.sqlite")
    return root


def test_each_execute_model_range_is_one_step(exports: Path) -> None:
    rows = _steps(exports / "eager_decode.sqlite")
    assert len(rows) == 25  # the scenario's 25 decode steps
    assert {(r["source"], r["text"], r["label_phase"]) for r in rows} == {("nvtx", "execute_model", None)}
    assert [r["step_id"] for r in rows] == list(range(1, 26))
    assert all(a["end_ns"] <= b["start_ns"] for a, b in zip(rows, rows[1:]))


def test_phase_ranges_are_steps_and_nested_ranges_count_once(exports: Path) -> None:
    rows = _steps(exports / "prefill_heavy_eager_decode.sqlite")
    # 6 iterations of one prefill and 4 decode steps; the 'LlamaForCausalLM.forward' ranges inside are no steps
    assert [r["label_phase"] for r in rows] == (["prefill"] + ["decode"] * 4) * 6


def test_a_step_range_inside_a_phase_range_is_the_step(tmp_path: Path) -> None:
    path = tmp_path / "nested.sqlite"
    generate("eager_decode", path)
    with sqlite3.connect(path) as con:  # wrap every execute_model range in a 'decode' range on its thread
        con.execute("INSERT INTO StringIds VALUES ((SELECT max(id) + 1 FROM StringIds), 'decode')")
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text, domainId) "
                    "SELECT start - 500, end + 500, eventType, globalTid, 'decode', domainId FROM NVTX_EVENTS "
                    "WHERE text = 'execute_model'")
    rows = _steps(path)
    assert len(rows) == 25 and {r["text"] for r in rows} == {"execute_model"}


def test_tensorrt_llm_step_text_carries_the_batch_composition(tmp_path: Path) -> None:
    path = tmp_path / "trt.sqlite"
    generate("eager_decode", path)
    with sqlite3.connect(path) as con:
        ranges = con.execute("SELECT rowid FROM NVTX_EVENTS WHERE text = 'execute_model' ORDER BY start").fetchall()
        for i, (rowid,) in enumerate(ranges):
            ctx = 2 if i % 5 == 0 else 0
            con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?",
                        (f"[Executor] _forward_step {i}: {ctx} ctx reqs, {30 + i} gen reqs", rowid))
    rows = _steps(path)
    assert len(rows) == 25
    assert [r["ctx_reqs"] for r in rows] == [2 if i % 5 == 0 else 0 for i in range(25)]
    assert [r["gen_reqs"] for r in rows] == [30 + i for i in range(25)]
    assert [r["label_phase"] for r in rows] == ["prefill" if i % 5 == 0 else "decode" for i in range(25)]


@pytest.mark.slow
def test_configured_step_patterns_replace_the_defaults(exports: Path) -> None:
    assert _steps(exports / "eager_decode.sqlite", {"mine": "^no such range$"})[0]["source"] == "sync"
    rows = _steps(exports / "eager_decode.sqlite", {"mine": "(?i)^execute_model$"})
    assert len(rows) == 25 and rows[0]["source"] == "nvtx"


def test_without_step_ranges_the_synchronisations_delimit_the_steps(exports: Path) -> None:
    # sync_storm: 2000 iterations of a launch and a cudaDeviceSynchronize, no NVTX
    rows = _steps(exports / "sync_storm.sqlite")
    assert len(rows) == 1999 and {r["source"] for r in rows} == {"sync"}
    assert all(a["end_ns"] == b["start_ns"] for a, b in zip(rows, rows[1:]))


def test_without_ranges_or_synchronisations_graph_launches_delimit_the_steps(tmp_path: Path) -> None:
    path = tmp_path / "graphs.sqlite"
    generate("graph_decode_graph", path)
    with sqlite3.connect(path) as con:  # 28 replays, one cudaGraphLaunch each; no NVTX and no synchronisation
        con.execute("DELETE FROM NVTX_EVENTS WHERE eventType <> 75")
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN (SELECT id FROM StringIds "
                    "WHERE value LIKE '%Synchronize%' OR value LIKE 'cudaMemcpy\\_%' ESCAPE '\\')")
    rows = _steps(path)
    assert len(rows) == 27 and {r["source"] for r in rows} == {"graph-launch"}


@requires_real
def test_real_exports_without_step_ranges_fall_back_to_synchronisations() -> None:
    # an LLM inference simulation labelled per layer and per token, not per step: 512 synchronisations
    rows = _steps(real("Sh1mwww__llama3-inference"))
    assert len(rows) == 511 and {r["source"] for r in rows} == {"sync"}


def test_step_patterns_are_read_from_diagnose_yaml(tmp_path: Path, exports: Path) -> None:
    from nsys_diagnose.diagnosis.config import ConfigError, load_config_file

    config_file = tmp_path / "diagnose.yaml"
    config_file.write_text('steps: {engine: "(?i)^execute_model$"}\n')
    patterns = load_config_file(config_file).step_patterns
    assert patterns == {"engine": "(?i)^execute_model$"}
    assert len(_steps(exports / "eager_decode.sqlite", patterns)) == 25
    for text, problem in (("steps: {}\n", "step detection by NVTX name cannot be turned off"),
                          ('steps: {engine: "(?<=x)step"}\n', "is not a regular expression DuckDB accepts"),
                          ("steps: [step]\n", "steps must be a mapping")):
        config_file.write_text(text)
        with pytest.raises(ConfigError, match=problem):
            load_config_file(config_file)


@pytest.mark.slow
def test_overlapping_ranges_are_steps_each_and_empty_ranges_none(tmp_path: Path) -> None:
    path = tmp_path / "overlap.sqlite"
    generate("eager_decode", path)
    with sqlite3.connect(path) as con:
        # start/end ranges need not nest: each step range now runs 0.8 ms into the next one
        con.execute("UPDATE NVTX_EVENTS SET end = end + 800000 WHERE text = 'execute_model'")
    rows = _steps(path)
    assert len(rows) == 25 and all(a["end_ns"] > b["start_ns"] for a, b in zip(rows, rows[1:]))
    with sqlite3.connect(path) as con:
        con.execute("UPDATE NVTX_EVENTS SET end = start WHERE text = 'execute_model'")
    assert [r["source"] for r in _steps(path)][:1] == ["sync"]  # instants mark no step: the syncs do
