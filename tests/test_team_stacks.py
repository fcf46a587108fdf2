"""Software stacks are data (rules/vocabulary/stacks.yaml): a team pack adds its own serving engine with one entry
in DIR/vocabulary/stacks.yaml, and the engine detects it, reads its step ranges and treats it as a serving stack;
a broken entry is refused with one sentence that names the file and line."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from nsys_diagnose.diagnosis.stacks import detect_stack
from nsys_diagnose.facts.loading import load_facts
from nsys_diagnose.facts.compute import _define_phases, compute_facts
from nsys_diagnose.facts.results_cache import results_key
from nsys_diagnose.fixtures import _kernels as K
from nsys_diagnose.fixtures import generator as gen
from nsys_diagnose.fixtures._export import ERA_2024, H100_SXM, Proc
from nsys_diagnose.pack.presets import capture_line, preset_choices, resolve_preset
from nsys_diagnose.pack.stacks import StackError, bundled_stacks, load_stacks
from nsys_diagnose.reading.export import open_export

ACME = """\
stacks:
  - key: acme
    label: Acme Serve
    lineage: [acme, pytorch]
    serving: true
    preset: pytorch
    detect:
      kernels: ['acme::']
      processes: ['(?i)^acme-serve']
    steps: ['^acme_tick [0-9]+$']
"""

# Acme's own kernels in place of the vLLM custom ops of the generator's Llama decode step.
_ACME_OPS = {spec: dataclasses.replace(spec, demangled=f"void acme::{spec.short}<float>(float *)")
             for spec in (K.RMS_NORM, K.FUSED_ADD_RMS_NORM, K.ROTARY_EMBEDDING, K.ACT_AND_MUL)}


def _team(tmp_path: Path, text: str = ACME) -> Path:
    pack = tmp_path / "pack"
    (pack / "vocabulary").mkdir(parents=True, exist_ok=True)
    (pack / "vocabulary" / "stacks.yaml").write_text(text)
    return pack


def _acme_decode(path: Path) -> Path:
    """An `acme-serve` process runs 12 eager decode steps with Acme's kernels, each step one NVTX range
    `acme_tick N` (a label no bundled step pattern knows)."""
    x = gen._new_export(ERA_2024, H100_SXM, 1, command=("acme-serve", ["--model", "m"]))
    p = Proc(51234, "acme-serve")
    x.procs.append(p)
    rng = random.Random(0)
    h = gen.Host(x, p, rng, gen._t0(rng))
    for i in range(12):
        gen.eager_decode_step(h, 4, swap=_ACME_OPS, label=f"acme_tick {i}")
        h.pause(300_000, 400_000)
    gen._finish(x, path)
    return path


def _facts(path: Path, stacks):
    facts = load_facts()
    needed = {n: facts[n] for n in ("_api_names", "_api_classes", "_step_ranges", "_nvtx_phases", "_phase_ranges",
                                    "software_stack") if n in facts}
    needed = {n: f for n, f in facts.items() if n in needed or n in _needs_of(facts, needed)}
    with open_export(path, cache=False) as export:
        return compute_facts(export, facts=needed, helpers={"_step_ranges"}, stacks=stacks)


def _needs_of(facts, wanted) -> set[str]:
    out: set[str] = set()
    todo = [n for f in wanted.values() for n in f.needs]
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo += facts[name].needs
    return out


def test_a_team_stack_is_detected_and_its_step_ranges_are_the_steps(tmp_path):
    path = _acme_decode(tmp_path / "acme.sqlite")
    team = _facts(path, load_stacks([_team(tmp_path)]))
    stack = detect_stack(team)
    assert (stack.name, stack.label, stack.lineage) == ("acme", "Acme Serve", ["acme", "pytorch"])
    assert "e.g. void acme::" in stack.evidence[0] and "1 processes, e.g. acme-serve" in stack.evidence
    assert all(r["serves_tokens"] for r in team.rows("software_stack"))  # `serving: true`
    steps = team.rows("_step_ranges")
    assert len(steps) == 12 and {r["source"] for r in steps} == {"nvtx"}
    assert steps[0]["text"] == "acme_tick 0"
    # Without the team's stacks.yaml the same profile is PyTorch and its steps are found from the syncs.
    plain = _facts(path, None)
    assert detect_stack(plain).name == "pytorch"
    assert "nvtx" not in {r["source"] for r in plain.rows("_step_ranges")}


def test_a_team_stack_overrides_a_bundled_one_in_place_and_new_ones_come_first(tmp_path):
    text = ACME + """\
  - key: vllm
    label: vLLM (Acme fork)
    lineage: [vllm, pytorch]
    serving: true
    preset: vllm
    detect:
      kernels: ['vllm::|acme_vllm::']
"""
    stacks = load_stacks([_team(tmp_path, text)])
    assert stacks.keys()[:3] == ("acme", "vllm", "sglang")
    assert stacks.get("vllm").label == "vLLM (Acme fork)" and stacks.fallback.key == "cuda"
    assert capture_line(["acme", "pytorch"], "", [], "", None).startswith(
        "Capture again with: diagnose profile --preset pytorch")
    con = duckdb.connect()
    _define_phases(con, None, stacks=stacks)
    assert con.execute("SELECT stack_of_kernel('acme_vllm::gemm'), step_of('acme_tick 3') IS NOT NULL").fetchone() \
        == ("vllm", True)


def test_the_facts_cache_key_changes_with_the_stack_patterns(tmp_path):
    facts = {"software_stack": load_facts()["software_stack"]}
    bundled = results_key("k", facts, None, None)
    assert results_key("k", facts, None, None, stacks=bundled_stacks()) == bundled
    team = results_key("k", facts, None, None, stacks=load_stacks([_team(tmp_path)]))
    changed = results_key("k", facts, None, None,
                          stacks=load_stacks([_team(tmp_path, ACME.replace("acme_tick", "acme_step"))]))
    assert len({bundled, team, changed}) == 3


@pytest.mark.parametrize("old, new, line, says", [
    ("preset: pytorch", "preset: trtllm", 6, "stack 'acme': preset 'trtllm' is no capture preset"),
    ("[acme, pytorch]", "[pytorch]", 4, "lineage must be a list of stack keys that starts with 'acme'"),
    ("serving: true", "serving: yes please", 5, "serving must be true or false"),
    ("['acme::']", "['acme::(']", 8, "'acme::(' is not a regular expression DuckDB accepts"),
    ("steps: ['^acme_tick [0-9]+$']\n", "steps: ['x']\n    phases:\n      prefil: ['x']\n", 12,
     "unknown key 'prefil'; allowed keys: prefill, decode"),
    ("    label: Acme Serve\n", "    label: Acme Serve\n    colour: blue\n", 4, "unknown key 'colour'"),
])
def test_a_broken_stacks_file_is_one_sentence_with_its_file_and_line(tmp_path, old, new, line, says):
    assert old in ACME
    pack = _team(tmp_path, ACME.replace(old, new))
    with pytest.raises(StackError) as caught:
        load_stacks([pack])
    message = str(caught.value)
    assert message.startswith(f"{pack / 'vocabulary' / 'stacks.yaml'}:{line}:"), message
    assert says in message and "\n" not in message


def test_a_lineage_naming_no_stack_is_refused(tmp_path):
    with pytest.raises(StackError, match="lineage names 'pytorh', which is no stack"):
        load_stacks([_team(tmp_path, ACME.replace("[acme, pytorch]", "[acme, pytorh]"))])


def test_rules_check_reports_a_broken_team_stacks_file(tmp_path):
    pack = _team(tmp_path, ACME.replace("preset: pytorch", "preset: nope"))
    (pack / "acme").mkdir()  # a rule of the pack meets the broken file too: the problem is listed once
    (pack / "acme" / "slow-tick.yaml").write_text(
        "id: acme/slow-tick\ntitle: Slow\ncategory: launch-bound\nseverity: info\nfact: launch_overhead\n"
        "when: [overhead_ratio > 0.9]\nmessage: slow\nwhy: ours\nremediation: [x]\n")
    p = subprocess.run([sys.executable, "-m", "nsys_diagnose.cli.main", "rules", "check", str(pack)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    problem = f"{pack / 'vocabulary' / 'stacks.yaml'}:6:5: stack 'acme': preset 'nope' is no capture preset"
    assert p.stdout.count(problem) == 1, p.stdout
    assert p.stdout.splitlines()[-1].endswith(": 1 error"), p.stdout


def test_the_tensorrt_llm_preset_is_named_after_its_stack_and_trtllm_still_works():
    assert bundled_stacks().get("tensorrt-llm").preset == "tensorrt-llm"
    assert {"tensorrt-llm", "trtllm"} <= set(preset_choices())
    assert resolve_preset("trtllm").preset == "tensorrt-llm"
    assert all(resolve_preset(s.preset).preset == s.preset for s in bundled_stacks())


def test_diagnose_with_the_team_pack_names_the_team_stack_and_counts_its_steps(tmp_path):
    """The whole run, not just the facts: `diagnose --rule-dir PACK` reads PACK/vocabulary/stacks.yaml, so the
    report's header names Acme Serve and its steps are the acme_tick ranges (a second run reuses no facts cached
    under the bundled stacks)."""
    import json

    path = _acme_decode(tmp_path / "acme.sqlite")
    pack = _team(tmp_path)
    run = [sys.executable, "-m", "nsys_diagnose.cli.main", str(path), "--format", "json", "-q",
           "--cache-dir", str(tmp_path / "cache")]
    plain = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    team = json.loads(subprocess.run([*run, "--rule-dir", str(pack)], capture_output=True, text=True,
                                     check=True).stdout)
    assert plain["profile"]["stack"]["name"] == "pytorch"
    assert (team["profile"]["stack"]["name"], team["profile"]["stack"]["label"]) == ("acme", "Acme Serve")
    steps = {name: doc["facts"]["steps"][0] for name, doc in (("plain", plain), ("team", team))}
    assert (steps["team"]["source"], steps["team"]["step_count"]) == ("nvtx", 12)
    assert steps["plain"]["source"] != "nvtx"
