"""Our per-name kernel, CUDA API and copy totals agree with NVIDIA's own `nsys stats` on the real exports.

The golden CSVs were written by nsys 2022.4.2 with tools/make_nsys_golden.sh (see tests/golden/nsys_stats).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REAL_DIR, requires_real

GOLDEN = Path(__file__).parent / "golden" / "nsys_stats"
CASES = sorted(d for d in GOLDEN.iterdir() if d.is_dir() and (REAL_DIR / f"{d.name}.sqlite").exists()) \
    if GOLDEN.is_dir() else []

pytestmark = requires_real


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _whole_capture_facts(path: Path):
    """The facts over the whole capture, as nsys stats counts: the start-up (judged apart in reports) not cut."""
    from nsys_diagnose.runs.api import load_pack
    from nsys_diagnose.diagnosis.config import Config, apply_set
    from nsys_diagnose.facts.compute import compute_facts
    from nsys_diagnose.reading.export import open_export

    config = Config()
    apply_set(config, "facts.startup_min_share=1")
    pack = load_pack(config)
    with open_export(path) as export:
        return compute_facts(export, facts=pack.facts, params={k: v.value for k, v in config.fact_params.items()})


@pytest.fixture(scope="module", params=CASES, ids=lambda d: d.name.split("__")[0])
def case(request):
    golden = request.param
    return golden, _whole_capture_facts(REAL_DIR / f"{golden.name}.sqlite")


def test_cuda_api_totals_match_nsys_stats(case):
    golden, facts = case
    path = golden / "cudaapisum.csv"
    if not path.exists():
        pytest.skip("nsys produced no CUDA API summary for this export")
    theirs: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in _rows(path):
        # nsys strips only 4-digit suffixes (cudaLaunchKernel_v7000); we strip every _vN suffix.
        name = re.sub(r"_v[0-9]+$", "", row["Name"])
        theirs[name][0] += int(row["Num Calls"])
        theirs[name][1] += int(row["Total Time (ns)"])
    ours = {r["name"]: [r["call_count"], r["total_ns"]] for r in facts.rows("api_summary")}
    assert ours == dict(theirs)


def test_kernel_totals_match_nsys_stats(case):
    golden, facts = case
    path = golden / "gpukernsum.csv"
    if not path.exists():
        pytest.skip("nsys produced no kernel summary for this export")
    theirs: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in _rows(path):  # nsys splits a name by grid/block shape: add the rows up
        theirs[row["Name"]][0] += int(row["Instances"])
        theirs[row["Name"]][1] += int(row["Total Time (ns)"])
    ours = {r["name"]: [r["count"], r["total_ns"]] for r in facts.rows("kernel_summary")}
    assert ours == dict(theirs)


_OPERATION = re.compile(r"^\[CUDA (Unified Memory )?(memcpy|memset) ?(\w+)?\]$")


def test_copy_totals_match_nsys_stats(case):
    golden, facts = case
    path = golden / "gpumemtimesum.csv"
    if not path.exists():
        pytest.skip("nsys produced no memory-operation summary for this export")
    theirs: dict[str, list[int]] = {}
    for row in _rows(path):
        m = _OPERATION.match(row["Operation"])
        assert m, row["Operation"]
        uvm, op, direction = m.groups()
        key = "memset" if op == "memset" else (f"UVM {direction}" if uvm else direction)
        theirs[key] = [int(row["Count"]), int(row["Total Time (ns)"])]
    ours: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in facts.rows("copy_summary"):
        ours[r["copy_kind"]][0] += r["count"]
        ours[r["copy_kind"]][1] += r["total_ns"]
    assert dict(ours) == theirs


def test_every_golden_directory_has_its_export():
    names = {d.name for d in GOLDEN.iterdir() if d.is_dir()}
    assert names and all((REAL_DIR / f"{n}.sqlite").exists() for n in names)
