#!/usr/bin/env python3
"""Snapshot what `diagnose` concludes on every fixture scenario and every real export, to prove that a change
kept (or deliberately changed) the diagnosis.

usage: python tools/snapshot.py [--real DIR] [--diagnose CMD] -o SNAPSHOT.json
       python tools/snapshot.py --diff BEFORE.json AFTER.json

For each input it runs `diagnose INPUT --format json --no-cache -q` in a child process and keeps the verdict,
every finding (rule, severity, subject, impact, evidence values) and the key metrics. --diff prints one line per
input whose snapshot differs, with the fields that changed, and exits 1 when any did.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]


def _inputs(real: Path | None, workdir: Path) -> dict[str, Path]:
    from nsys_diagnose.fixtures.generator import SCENARIOS, generate

    out: dict[str, Path] = {}
    for name in sorted(SCENARIOS):
        path = workdir / f"{name}.sqlite"
        generate(name, path)
        out[f"scenario:{name}"] = path
    if real is not None:
        for path in sorted(real.glob("*.sqlite")):
            out[f"real:{path.name}"] = path
    return out


def _round(value: object) -> object:
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def _summary(report: dict) -> dict:
    return _round({
        "verdict": {k: report["verdict"].get(k) for k in ("primary", "rule", "subject", "impact", "headline")},
        "findings": [{"rule": f["rule"], "severity": f["severity"], "subject": f.get("subject"),
                      "impact": f.get("impact"), "evidence": {e["column"]: e["value"] for e in f["evidence"]}}
                     for f in report["findings"]],
        "metrics": report["metrics"],
    })


def snapshot(diagnose: list[str], real: Path | None) -> dict[str, dict]:
    with tempfile.TemporaryDirectory(prefix="nsys-diagnose-snapshot-") as tmp:
        result: dict[str, dict] = {}
        for key, path in _inputs(real, Path(tmp)).items():
            done = subprocess.run([*diagnose, str(path), "--format", "json", "--no-cache", "-q"],
                                  capture_output=True, text=True)
            if done.returncode not in (0, 1):
                result[key] = {"exit": done.returncode, "stderr": done.stderr.strip()[-300:]}
                continue
            result[key] = _summary(json.loads(done.stdout))
            print(f"{key}: {result[key]['verdict']['headline']}", file=sys.stderr)
        return result


def diff(before: dict[str, dict], after: dict[str, dict]) -> int:
    changed = 0
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        changed += 1
        if a is None or b is None:
            print(f"{key}: only {'after' if a is None else 'before'}")
            continue
        fields = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        print(f"{key}: {', '.join(fields)} differ")
        for field in fields:
            print(f"  before {field}: {json.dumps(a.get(field))[:400]}")
            print(f"  after  {field}: {json.dumps(b.get(field))[:400]}")
    print(f"{changed} of {len(set(before) | set(after))} inputs differ")
    return 1 if changed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--real", type=Path, default=_REPO.parent / "shared" / "real-profiles",
                   help="directory of real exports to include (default: ../shared/real-profiles when present)")
    p.add_argument("--diagnose", default=f"{shlex.quote(sys.executable)} -m nsys_diagnose.cli.main",
                   help="command that runs diagnose (default: this Python's nsys_diagnose)")
    p.add_argument("-o", "--output", type=Path)
    p.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = p.parse_args(argv)
    if args.diff:
        return diff(*(json.loads(p.read_text()) for p in args.diff))
    if args.output is None:
        p.error("-o SNAPSHOT.json is required (or --diff BEFORE AFTER)")
    real = args.real if args.real and args.real.is_dir() else None
    args.output.write_text(json.dumps(snapshot(shlex.split(args.diagnose), real), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
