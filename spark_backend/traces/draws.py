"""Random draws as Spark column expressions, partitioning-independent.

Every draw is a counter-based hash of ``(seed, row id, stream)`` turned into a uniform
in (0, 1) (:func:`uniform`), then into the wanted distribution by inverse CDF (or
Box-Muller for the normal family). A row's draws therefore depend on its id alone, never
on how Spark partitions the rows, and each use of randomness has its own ``stream``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

import numpy as np
import scipy.stats as st
from pyspark.sql import Column
from pyspark.sql import functions as F

from theory.data.distributions import MAX_DELAY, Delay, Distribution
from theory.time import MAX_TIMESTAMP, MICROS_PER_SECOND

__all__ = [
    "SUPPORTED_DISTRIBUTIONS",
    "check_supported",
    "delay_us",
    "draw",
    "plus_capped",
    "poisson",
    "uniform",
]

#: scipy.stats names the Spark generators can sample (inverse CDF, or Box-Muller for the
#: normal family), with the parameters each takes besides loc/scale.
SUPPORTED_DISTRIBUTIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "lognorm": ("s",),
    "norm": (),
    "expon": (),
    "pareto": ("b",),
    "lomax": ("c",),
    "uniform": (),
    "weibull_min": ("c",),
}


def uniform(seed: int, stream: int, *idx: Column) -> Column:
    """A uniform in (0, 1) from a counter-based hash of (seed, row, stream): 53 bits.
    The row is named by one column (an id) or several (e.g. session and place in it)."""
    h = F.xxhash64(F.lit(seed).cast("long"), *idx, F.lit(stream).cast("long"))
    return (F.shiftrightunsigned(h, 11).cast("double") + F.lit(0.5)) * F.lit(2.0**-53)


def _std_normal(u1: Column, u2: Column) -> Column:
    """Box-Muller: a standard normal from two independent uniforms in (0, 1)."""
    return F.sqrt(F.lit(-2.0) * F.log(u1)) * F.cos(F.lit(2.0 * math.pi) * u2)


def check_supported(dist: Distribution | None, name: str) -> None:
    """ValueError unless Spark can draw ``dist`` (None, no distribution, passes)."""
    if dist is None:
        return
    allowed = SUPPORTED_DISTRIBUTIONS.get(dist.name)
    if allowed is None:
        raise ValueError(
            f"{name}={dist!r}: Spark generators support {sorted(SUPPORTED_DISTRIBUTIONS)}"
        )
    unknown = set(dist.kwargs) - {"loc", "scale", *allowed}
    if unknown:
        raise ValueError(f"{name}={dist!r}: unsupported parameters {sorted(unknown)}")


def draw(dist: Distribution, u1: Column, u2: Column) -> Column:
    """A draw of ``dist`` (in its own unit) as a double column, from two uniforms."""
    check_supported(dist, "distribution")
    kw = dist.kwargs
    standard = {
        "lognorm": lambda: F.exp(F.lit(kw["s"]) * _std_normal(u1, u2)),
        "norm": lambda: _std_normal(u1, u2),
        "expon": lambda: -F.log(u1),
        "pareto": lambda: F.pow(u1, F.lit(-1.0 / kw["b"])),
        "lomax": lambda: F.pow(u1, F.lit(-1.0 / kw["c"])) - F.lit(1.0),
        "uniform": lambda: u1,
        "weibull_min": lambda: F.pow(-F.log(u1), F.lit(1.0 / kw["c"])),
    }[dist.name]()
    return F.lit(float(kw.get("loc", 0.0))) + F.lit(float(kw.get("scale", 1.0))) * standard


def delay_us(dist: Delay, u1: Column, u2: Column) -> Column:
    """``Delay.sample`` in Spark: µs, rounded, NaN -> 0, clipped to [0, MAX_DELAY]."""
    x = draw(dist, u1, u2) * F.lit(float(MICROS_PER_SECOND))
    clipped = F.least(F.greatest(x, F.lit(0.0)), F.lit(float(MAX_DELAY)))
    return F.when(F.isnan(x), F.lit(0)).otherwise(F.rint(clipped)).cast("long")


def plus_capped(t: Column, d: Column) -> Column:
    """``min(t + d, MAX_TIMESTAMP)`` for ``d >= 0`` without overflow."""
    return F.when(d > F.lit(MAX_TIMESTAMP) - t, F.lit(MAX_TIMESTAMP)).otherwise(t + d)


def poisson(lam: float, u: str) -> Column:
    """Poisson(``lam``) by inverse CDF: how many of the CDF's values lie below the
    uniform in column ``u``.

    The CDF is tabulated on the driver up to where it reaches 1.0 in double precision
    (about ``lam + 8 sqrt(lam) + 14`` values), so the draw is exact, pure SQL (no Python
    worker), and costs one comparison per table entry. The table goes to Spark as one SQL
    text: a literal per entry through py4j would cost more than the draws."""
    table = _poisson_cdf(lam)
    if table.size == 0:
        return F.lit(0)
    values = ", ".join(f"{float(c)!r}D" for c in table)
    return F.expr(f"size(filter(array({values}), c -> c < `{u}`))")


def _poisson_cdf(lam: float) -> np.ndarray:
    """P(X <= k) for k = 0, 1, ... while below 1.0."""
    size = 16
    while True:
        cdf = st.poisson.cdf(np.arange(size), lam)
        if cdf[-1] >= 1.0:
            return cdf[cdf < 1.0]
        size *= 2
