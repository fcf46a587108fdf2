#!/usr/bin/env python3
"""Print the shape of the engine that tests/test_architecture.py and tests/test_module_shape.py enforce: the layers
(floors) with their modules and lines, the import arrows between modules, the arrows that climb a layer (must be 0),
the import cycles (must be 0), and the modules over 400 lines.

usage: python tools/layers.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_architecture as arch  # noqa: E402
import test_module_shape as shape  # noqa: E402


def main() -> int:
    modules = arch._modules()
    known = set(modules)
    graph = {name: arch._imports(name, path, known) for name, path in modules.items()}
    per_layer: dict[str, list[str]] = {layer: [] for layer, _ in arch.LAYERS}
    for name in modules:
        found = arch.layer_of(name)
        per_layer[found[1] if found else "?"].append(name)
    print(f"{'floor':<10} {'modules':>7} {'lines':>7}")
    for layer, names in per_layer.items():
        lines = sum(len(modules[n].read_text(encoding="utf-8").splitlines()) for n in names)
        print(f"{layer:<10} {len(names):>7} {lines:>7}")
    arrows = sum(len(targets) for targets in graph.values())
    climbs = arch.climbing_imports({**modules, **arch._fixture_modules()})
    cycles = arch._cycles(graph)
    long = [p for p in sorted(arch.ENGINE.rglob("*.py")) if len(p.read_text(encoding="utf-8").splitlines()) > 400]
    print(f"floors {len(arch.LAYERS)}, modules {len(modules)}, import arrows {arrows}, climbs {len(climbs)}, "
          f"cycles {len(cycles)}, modules over 400 lines {len(long)} (without a stated reason: "
          f"{len(shape.long_modules())})")
    for line in climbs:
        print("  climbs:", line)
    for cycle in cycles:
        print("  cycle:", " -> ".join(cycle))
    for path in long:
        print(f"  over 400: {path.relative_to(arch.ENGINE)} "
              f"({len(path.read_text(encoding='utf-8').splitlines())} lines)")
    return 1 if climbs or cycles else 0


if __name__ == "__main__":
    sys.exit(main())
