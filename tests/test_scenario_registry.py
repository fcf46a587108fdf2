"""The scenario registry (fixtures/registry.py): one module per scenario in fixtures/scenarios/, each registering
the scenario of its name once with ``@scenario``, with a description, an expected primary and a ground truth."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nsys_diagnose.fixtures import registry
from nsys_diagnose.fixtures.generator import SCENARIOS, generate

SCENARIO_DIR = Path(registry.__file__).resolve().parent / "scenarios"
CATEGORIES = Path(__file__).resolve().parents[1] / "rules" / "vocabulary" / "categories.yaml"


def _noop(path: Path, rng: random.Random, scale: int) -> None:
    return None


def test_every_scenario_module_registers_the_scenario_of_its_name() -> None:
    modules = sorted(p.stem for p in SCENARIO_DIR.glob("*.py") if p.stem != "__init__")
    assert modules == registry.scenario_modules()
    registered = registry.load()
    # a module without its @scenario line (or registering another name) leaves its scenario out of every test
    missing = sorted(set(modules) - set(registered))
    assert sorted(registered) == modules, f"modules that register no scenario of their name: {missing}"
    for name, reg in registered.items():
        assert reg.module.rsplit(".", 1)[-1] == name, f"{name} is registered by {reg.module}"
    assert list(SCENARIOS) == modules  # --list and --all go by name


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_has_a_description_a_primary_and_a_truth_that_scales(name: str) -> None:
    import yaml

    reg = registry.load()[name]
    categories = {c["id"] for c in yaml.safe_load(CATEGORIES.read_text())}
    assert reg.description.endswith(".") and len(reg.description) > 40
    assert reg.primary is None or reg.primary in categories
    one, two = reg.truth(1), reg.truth(2)
    assert one and two, f"{name}: empty ground truth"
    assert set(one) == set(two)  # the same quantities at any scale
    assert SCENARIOS[name].truth["capture_ns_min"] > 0  # the registry's default when the truth sets none


def test_generate_returns_the_truth_for_the_scale(tmp_path: Path) -> None:
    s = generate("sync_storm", tmp_path / "s.sqlite", scale=2)
    assert s.truth["kernel_count"] == 2 * SCENARIOS["sync_storm"].truth["kernel_count"]
    assert s.description == SCENARIOS["sync_storm"].description


def test_the_decorator_refuses_what_would_register_a_broken_scenario() -> None:
    ok = {"primary": None, "description": "A scenario.", "truth": lambda s: {"steps": s}}
    with pytest.raises(ValueError, match="unknown schema era"):
        registry.scenario("x_era", era="2019.1", **ok)
    with pytest.raises(ValueError, match="description is empty"):
        registry.scenario("x_desc", **{**ok, "description": " "})
    with pytest.raises(ValueError, match="truth must be a function"):
        registry.scenario("x_truth", **{**ok, "truth": {"steps": 1}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lower_case"):
        registry.scenario("bad-name", **ok)
    with pytest.raises(ValueError, match="registered twice"):
        registry.scenario("eager_decode", **ok)(_noop)  # this module is not scenarios/eager_decode.py
    assert registry.load()["eager_decode"].build is not _noop
