"""Units of fact columns and rule params, and human formatting of values."""

from __future__ import annotations

import math
from collections.abc import Callable

# Column-name suffix -> unit. The first matching suffix wins.
_SUFFIX_UNITS: tuple[tuple[str, str], ...] = (
    ("_ns", "ns"),
    ("_bytes", "bytes"),
    ("_pct", "percent"),
    ("gbps", "gbps"),
    ("_per_s", "per_s"),
    ("_per_kernel", "ratio"),
    ("_fraction", "ratio"),
    ("_share", "ratio"),
    ("_ratio", "ratio"),
    ("utilization", "ratio"),
    ("imbalance", "ratio"),
    ("_count", "count"),
    ("count", "count"),
    ("_calls", "count"),
    ("calls", "count"),
    ("samples", "count"),
    ("_ops", "count"),
    ("_id", "id"),
)

# Units a param may carry, the column unit it is compared with, and the factor to that column unit.
PARAM_UNITS: dict[str, tuple[str, float]] = {
    "ns": ("ns", 1.0),
    "us": ("ns", 1e3),
    "ms": ("ns", 1e6),
    "s": ("ns", 1e9),
    "bytes": ("bytes", 1.0),
    "KiB": ("bytes", 1024.0),
    "MiB": ("bytes", 1024.0 ** 2),
    "GiB": ("bytes", 1024.0 ** 3),
    "ratio": ("ratio", 1.0),
    "percent": ("percent", 1.0),
    "count": ("count", 1.0),
    "gbps": ("gbps", 1.0),
    "per_s": ("per_s", 1.0),
    "number": ("number", 1.0),
}

# The values a param of each unit may take when its rule or fact declares no range of its own: a ratio is a share
# (0-1), a percent a share of 100, durations, sizes, counts and rates cannot be negative. A param whose meaning
# differs (a ratio of two counts, which may exceed 1) declares its own `min`/`max`.
PARAM_RANGES: dict[str, tuple[float, float]] = {
    **{unit: (0.0, math.inf) for unit in PARAM_UNITS},
    "ratio": (0.0, 1.0),
    "percent": (0.0, 100.0),
    "number": (-math.inf, math.inf),
}


def fmt_limit(x: float) -> str:
    """A range limit as it is written in --set or YAML: 0, 0.5, 1e+20."""
    return f"{x:g}" if not float(x).is_integer() or abs(x) >= 1e15 else str(int(x))


def describe_range(lo: float, hi: float) -> str:
    """'between 0 and 1', 'at least 0', 'at most 5' or 'any number'."""
    if math.isinf(lo) and math.isinf(hi):
        return "any number"
    if math.isinf(hi):
        return f"at least {fmt_limit(lo)}"
    if math.isinf(lo):
        return f"at most {fmt_limit(hi)}"
    return f"between {fmt_limit(lo)} and {fmt_limit(hi)}"


# Time units a duration may be written in (e.g. a compare gate's '+5us'), in nanoseconds.
DURATION_UNITS: dict[str, float] = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


def column_unit(column: str) -> str:
    for suffix, unit in _SUFFIX_UNITS:
        if column.endswith(suffix):
            return unit
    # a share named by what it is a share of (share_of_gemm_time, comm_share_of_busy) is a 0-1 ratio too
    if column == "share" or column.startswith("share_of_") or "_share_of_" in column:
        return "ratio"
    return "number"


def fmt_duration(ns: float | None) -> str:
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)):
        return "n/a"
    ns = float(ns)
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def _three_figures(v: float) -> str:
    """'1.02', '54.3', '543': three significant digits for a value below 1000 in its unit."""
    return f"{v:.{2 if v < 10 else 1 if v < 100 else 0}f}"


def fmt_step(ns: float | None) -> str:
    """A step time to three significant digits ('1.02 ms', '543 µs'): projections compare close values."""
    if ns is None:
        return fmt_value(ns, "ns")
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= scale:
            return f"{_three_figures(ns / scale)} {unit}"
    return f"{ns:.0f} ns"


def fmt_span(low: float, high: float, fmt: Callable[[float], str]) -> str:
    """'a..b' with each end written by `fmt`, or one value where both ends print alike ('8.0×', not '8.0×..8.0×'):
    a range is shown as the reader can tell its ends apart, in every format."""
    a, b = fmt(low), fmt(high)
    return a if a == b else f"{a}..{b}"


def fmt_range(low: float, high: float) -> str:
    """'1.38..1.51 ms': both ends in the unit of the higher one; '4.19 ms' where they print alike."""
    unit = fmt_step(high).split()[-1]
    scale = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}[unit]
    return fmt_span(low / scale, high / scale, _three_figures) + f" {unit}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    n = float(n)
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_ratio(x: float | None, digits: int = 1) -> str:
    """'37.3 %'. A share that is neither none nor all never prints as 0 % or 100 %: it gets the digits it needs
    (up to two more), so a rounded headline ('99.8 %') agrees with the finding beside it."""
    if x is None:
        return "n/a"
    pct = 100 * float(x)
    text = f"{pct:.{digits}f}"
    extra = digits
    while 0 < pct < 100 and float(text) in (0.0, 100.0) and extra < digits + 2:
        extra += 1
        text = f"{pct:.{extra}f}"
    if 0 < pct < 100 and float(text) in (0.0, 100.0):
        step = f"{10.0 ** -extra:.{extra}f}"
        return f"< {step} %" if float(text) == 0 else f"> {100 - float(step):.{extra}f} %"
    return f"{text} %"


def fmt_number(x: float | None) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int) or (float(x).is_integer() and abs(x) >= 1):
        return f"{int(x):,}"
    x = float(x)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def fmt_value(value: object, unit: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    v = float(value)  # type: ignore[arg-type]
    if unit == "ns":
        return fmt_duration(v)
    if unit == "bytes":
        return fmt_bytes(v)
    if unit == "ratio":
        return fmt_ratio(v)
    if unit == "plain":
        return f"{v:.2f}"
    if unit == "percent":
        return f"{v:.1f} %"
    if unit == "gbps":
        return f"{v:.1f} GB/s"
    if unit == "per_s":
        return f"{fmt_number(v)}/s"
    return fmt_number(value)  # type: ignore[arg-type]


def fmt_param(value: float, unit: str) -> str:
    """A param in its own unit, e.g. 10 us -> '10 µs', 0.3 ratio -> '30.0 %'."""
    if unit in ("us", "ms", "s", "ns"):
        return f"{fmt_number(value)} {'µs' if unit == 'us' else unit}"
    if unit in ("KiB", "MiB", "GiB", "bytes"):
        return f"{fmt_number(value)} {unit}"
    return fmt_value(value, PARAM_UNITS.get(unit, ("number", 1))[0])
