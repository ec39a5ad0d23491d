"""Named scipy.stats distributions: the skew of generated traces.

Distributions are given in **seconds** for readability (``Delay("lognorm", s=0.8,
scale=2.0)`` has a median of 2 s); :meth:`Delay.sample` returns int64 **microseconds**.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from theory.columns import check_count
from theory.time import DAY, MICROS_PER_SECOND

__all__ = ["MAX_DELAY", "Delay", "Distribution", "check_delay"]

#: Upper clip of a sampled delay: 365 days in µs (keeps heavy tails finite and in range).
MAX_DELAY: Final[int] = 365 * DAY


@dataclass(frozen=True, init=False)
class Distribution:
    """A named scipy.stats distribution with keyword parameters, in its own unit.

    ``Distribution("pareto", b=1.5, scale=60.0)``. An unknown name or parameters scipy
    rejects raise ValueError naming them; a name or parameter of the wrong type,
    TypeError. :meth:`draw` returns raw float64 draws.
    """

    name: str
    params: tuple[tuple[str, float], ...]

    def __init__(self, name: str, /, **params: float) -> None:
        label = f"{type(self).__name__}({name!r})"
        dist = _scipy_distribution(name)
        for k, v in params.items():
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise TypeError(f"{label}: parameter {k}={v!r} not a number")
        _check_scipy_accepts(label, dist, params)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", tuple(sorted((k, float(v)) for k, v in params.items())))

    @property
    def kwargs(self) -> dict[str, float]:
        """The parameters as keyword arguments for scipy.stats."""
        return dict(self.params)

    def frozen(self) -> Any:
        """The frozen scipy.stats distribution."""
        return getattr(_stats(), self.name)(**self.kwargs)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` raw float64 draws (in the distribution's own unit) from ``rng``."""
        n = check_count(n, "n")
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        return np.asarray(self.frozen().rvs(size=n, random_state=rng), dtype=np.float64)

    def __repr__(self) -> str:
        args = "".join(f", {k}={v!r}" for k, v in self.params)
        return f"{type(self).__name__}({self.name!r}{args})"


@dataclass(frozen=True, init=False, repr=False)
class Delay(Distribution):
    """A delay distribution whose parameters are in **seconds**; samples are µs.

    ``Delay("lognorm", s=0.8, scale=2.0)``: log-normal with a 2 s median.
    """

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` delays as int64 µs, rounded, clipped to [0, MAX_DELAY] (NaN becomes 0)."""
        x = self.draw(rng, n)  # a fresh array
        x *= MICROS_PER_SECOND  # in place: keeps peak memory low for large n
        np.nan_to_num(x, copy=False, nan=0.0, posinf=float(MAX_DELAY), neginf=0.0)
        np.clip(x, 0.0, float(MAX_DELAY), out=x)
        np.rint(x, out=x)
        return x.astype(np.int64)

    def mean_seconds(self) -> float:
        """The distribution's mean in seconds (before clipping; may be inf)."""
        return float(self.frozen().mean())


def _stats() -> Any:
    """``scipy.stats``, imported on first use: it takes about a second to import, and a
    command that only reads a trace never draws from a distribution."""
    import scipy.stats

    return scipy.stats


def _scipy_distribution(name: object) -> Any:
    if not isinstance(name, str):
        raise TypeError(f"a distribution name must be a str, got {name!r}")
    st = _stats()
    dist = getattr(st, name, None)
    if not isinstance(dist, (st.rv_continuous, st.rv_discrete)):
        raise ValueError(f"unknown scipy.stats distribution {name!r}")
    return dist


def _check_scipy_accepts(label: str, dist: Any, params: dict[str, float]) -> None:
    """ValueError unless scipy takes ``params`` (names and values) for ``dist``."""
    try:
        median = float(dist(**params).ppf(0.5))
    except TypeError as e:  # scipy's word for an unknown or missing parameter
        raise ValueError(f"{label}: bad parameters {params}: {e}") from None
    if math.isnan(median):
        raise ValueError(f"{label}: parameters {params} are invalid for {dist.name}")


def check_delay(value: object, name: str) -> Delay:
    """``value`` if it is a :class:`Delay`; TypeError otherwise."""
    if not isinstance(value, Delay):
        raise TypeError(f"{name} must be a Delay, got {value!r}")
    return value
