"""Seeded, vectorised trace generators whose skew is a named scipy.stats distribution.

Distributions are given in **seconds** for readability (``Delay("lognorm", s=0.8,
scale=2.0)`` has a median of 2 s); :meth:`Delay.sample` returns int64 **microseconds**.
Every generator takes ``seed`` and draws from ``numpy.random.default_rng(seed)`` in a
fixed order, so one seed always gives one trace. Traces come back sorted by arrival time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import scipy.stats as st

from theory.columns import check_count, check_fraction, check_positive, check_seed, check_timestamp
from theory.data.traces import Trace
from theory.time import DAY, MAX_TIMESTAMP, MICROS_PER_SECOND, SECOND

__all__ = [
    "MAX_DELAY",
    "PLATFORMS",
    "Delay",
    "Distribution",
    "PlatformProfile",
    "game_sessions_trace",
    "generate_trace",
]

#: Upper clip of a sampled delay: 365 days in µs (keeps heavy tails finite and in range).
MAX_DELAY: Final[int] = 365 * DAY


# --------------------------------------------------------------------------- validation


# --------------------------------------------------------------------------- distributions


@dataclass(frozen=True, init=False)
class Distribution:
    """A named scipy.stats distribution with keyword parameters, in its own unit.

    ``Distribution("pareto", b=1.5, scale=60.0)``. An unknown name or parameters scipy
    rejects raise ValueError naming them. :meth:`draw` returns raw float64 draws.
    """

    name: str
    params: tuple[tuple[str, float], ...]

    def __init__(self, name: str, /, **params: float) -> None:
        dist = getattr(st, name, None) if isinstance(name, str) else None
        if not isinstance(dist, (st.rv_continuous, st.rv_discrete)):
            raise ValueError(f"unknown scipy.stats distribution {name!r}")
        for k, v in params.items():
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ValueError(
                    f"{type(self).__name__}({name!r}): parameter {k}={v!r} not a number"
                )
        try:
            frozen = dist(**params)
            median = float(frozen.ppf(0.5))
        except TypeError as e:
            raise ValueError(
                f"{type(self).__name__}({name!r}): bad parameters {params}: {e}"
            ) from None
        if math.isnan(median):
            raise ValueError(
                f"{type(self).__name__}({name!r}): parameters {params} are invalid for {name}"
            )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", tuple(sorted((k, float(v)) for k, v in params.items())))

    @property
    def kwargs(self) -> dict[str, float]:
        """The parameters as keyword arguments for scipy.stats."""
        return dict(self.params)

    def frozen(self) -> Any:
        """The frozen scipy.stats distribution."""
        return getattr(st, self.name)(**self.kwargs)

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


# --------------------------------------------------------------------------- shared parts


def _arrivals(
    rng: np.random.Generator,
    event_time: np.ndarray,
    delay: Delay,
    stragglers: float,
    straggler_delay: Delay,
) -> np.ndarray:
    """event_time + delay, plus a straggler delay for a ``stragglers`` fraction of rows."""
    n = event_time.shape[0]
    d = delay.sample(rng, n)
    if stragglers > 0 and n:
        is_straggler = rng.random(n) < stragglers
        d[is_straggler] += straggler_delay.sample(rng, int(np.count_nonzero(is_straggler)))
    if n and int(event_time.max()) > MAX_TIMESTAMP - int(d.max()):
        room = MAX_TIMESTAMP - np.maximum(event_time, 0)
        np.minimum(d, room, out=d)
    d += event_time  # arrival, in place
    return d


def _check_delay(value: Any, name: str) -> Delay:
    if not isinstance(value, Delay):
        raise ValueError(f"{name} must be a Delay, got {value!r}")
    return value


# --------------------------------------------------------------------------- generate_trace


def generate_trace(
    n: int,
    *,
    seed: int,
    start: int = 0,
    rate: float = 1000.0,
    keys: int = 100,
    partitions: int = 4,
    delay: Delay = Delay("lognorm", s=1.0, scale=1.0),
    stragglers: float = 0.0,
    straggler_delay: Delay = Delay("pareto", b=1.5, scale=60.0),
    bursts: int = 0,
    burst_factor: float = 10.0,
    burst_duration: float = 1.0,
    idle_partitions: Iterable[int] = (),
    idle_interval: tuple[int, int] | None = None,
    value: Distribution | None = None,
) -> Trace:
    """A synthetic trace of exactly ``n`` rows, sorted by arrival time.

    - Event times (µs, from ``start``) are a Poisson process at ``rate`` events per second
      of event time. ``bursts`` bursts each multiply the rate by ``burst_factor`` for
      about ``burst_duration`` seconds (runs of ``rate*burst_factor*burst_duration``
      events at uniformly chosen positions, clipped to the trace).
    - ``key`` is uniform over ``range(keys)``; ``partition = key % partitions``.
    - ``arrival_time = event_time + delay`` (µs), plus ``straggler_delay`` for a
      ``stragglers`` fraction of rows.
    - Partitions in ``idle_partitions`` have no events with event time in the half-open
      ``idle_interval = (start_us, end_us)``; such events get a key of another partition.
    - ``value`` draws from a distribution (raw units), or is 1.0 when None.
    """
    n = check_count(n, "n")
    seed = check_seed(seed)
    start = check_timestamp(start, "start")
    rate = check_positive(rate, "rate")
    keys = check_count(keys, "keys", minimum=1)
    partitions = check_count(partitions, "partitions", minimum=1)
    delay = _check_delay(delay, "delay")
    stragglers = check_fraction(stragglers, "stragglers")
    straggler_delay = _check_delay(straggler_delay, "straggler_delay")
    bursts = check_count(bursts, "bursts")
    burst_factor = check_positive(burst_factor, "burst_factor")
    burst_duration = check_positive(burst_duration, "burst_duration")
    idle = sorted({check_count(p, "idle_partitions[]") for p in idle_partitions})
    if any(p >= partitions for p in idle):
        raise ValueError(f"idle_partitions must be in [0, partitions={partitions}), got {idle}")
    if idle_interval is not None:
        lo, hi = (check_timestamp(x, "idle_interval") for x in idle_interval)
        if hi <= lo:
            raise ValueError(f"idle_interval must have end > start, got {idle_interval}")
    if value is not None and not isinstance(value, Distribution):
        raise ValueError(f"value must be a Distribution (e.g. Delay) or None, got {value!r}")

    rng = np.random.default_rng(seed)
    # In-place steps below keep peak memory near five int64 columns for large n.
    gaps = rng.exponential(1.0 / rate, n)  # seconds
    if bursts and n:
        run = max(1, round(rate * burst_factor * burst_duration))
        starts = rng.integers(0, max(1, n - run + 1), bursts)  # whole runs fit
        depth = np.zeros(n + 1, dtype=np.int32)
        np.add.at(depth, starts, 1)
        np.add.at(depth, np.minimum(starts + run, n), -1)
        in_burst = np.cumsum(depth[:n]) > 0
        del depth
        gaps[in_burst] /= burst_factor
        del in_burst
    np.cumsum(gaps, out=gaps)
    gaps *= MICROS_PER_SECOND
    np.rint(gaps, out=gaps)
    if n and start + gaps[-1] > MAX_TIMESTAMP:
        raise ValueError("start + n / rate runs past MAX_TIMESTAMP; lower n or raise rate")
    event_time = gaps.astype(np.int64)
    del gaps
    event_time += start

    key = rng.integers(0, keys, n, dtype=np.int64)
    if idle and idle_interval is not None and n:
        lo, hi = idle_interval
        i0, i1 = np.searchsorted(event_time, [lo, hi], side="left")
        window = key[i0:i1]  # a view: event times are sorted
        hit = np.isin(window % partitions, idle)
        if hit.any():
            all_keys = np.arange(keys, dtype=np.int64)
            active = all_keys[~np.isin(all_keys % partitions, idle)]
            if active.size == 0:
                raise ValueError(
                    "idle_partitions leave no key in an active partition during idle_interval; "
                    f"keys={keys}, partitions={partitions}, idle_partitions={idle}"
                )
            window[hit] = rng.choice(active, size=int(np.count_nonzero(hit)))

    arrival = _arrivals(rng, event_time, delay, stragglers, straggler_delay)
    vals = None if value is None else value.draw(rng, n)
    # Event times are non-decreasing, so a stable sort by arrival ties by event time.
    order = np.argsort(arrival, kind="stable")
    arrival = arrival[order]
    event_time = event_time[order]
    key = key[order]
    vals = np.ones(n, dtype=np.float64) if vals is None else vals[order]
    del order
    return Trace(event_time, arrival, key, vals, key % partitions)


# --------------------------------------------------------------------------- game sessions


@dataclass(frozen=True)
class PlatformProfile:
    """Delay model of one game platform (all distributions in seconds)."""

    delay: Delay
    stragglers: float
    straggler_delay: Delay


#: Mobile: heavier, more skewed delays (log-normal, 5 % Pareto stragglers, phones going
#: offline: median 4 min, 99th percentile 1.6 h, and an uncapped tail, so among the 150k
#: stragglers of a 3M-event trace the latest is typically weeks late; it is what holds a
#: perfect watermark back). Console: short, tight log-normal delays, rare stragglers.
PLATFORMS: Final[Mapping[str, PlatformProfile]] = {
    "mobile": PlatformProfile(
        Delay("lognorm", s=1.2, scale=5.0), 0.05, Delay("pareto", b=1.2, scale=120.0)
    ),
    "console": PlatformProfile(
        Delay("lognorm", s=0.4, scale=0.5), 0.001, Delay("pareto", b=3.0, scale=5.0)
    ),
}


def game_sessions_trace(
    n: int,
    *,
    seed: int,
    platform: Literal["mobile", "console"] = "mobile",
    start: int = 0,
    users: int = 100,
    partitions: int = 4,
    events_per_session: float = 10.0,
    within_gap: float = 5.0,
    max_within_gap: float = 30.0,
    between_gap: float = 600.0,
    min_between_gap: float = 180.0,
    delay: Delay | None = None,
    stragglers: float | None = None,
    straggler_delay: Delay | None = None,
) -> Trace:
    """User game events in per-user sessions: the *Streaming Systems* ch. 3 input.

    Exactly ``n`` rows; ``key`` = user id in ``range(users)``, ``value`` = score (1-100),
    ``partition = user % partitions``. Session lengths are 1 + Poisson(events_per_session
    - 1) events; inside a session gaps are exponential with mean ``within_gap`` seconds,
    capped at ``max_within_gap`` (< 1 min); between a user's sessions gaps are
    ``min_between_gap`` + exponential(``between_gap``) seconds (> 1 min), so a 1-minute
    session window separates them. Delays follow :data:`PLATFORMS[platform]`, unless
    ``delay``/``stragglers``/``straggler_delay`` override them. Sorted by arrival time.
    """
    n = check_count(n, "n")
    seed = check_seed(seed)
    if platform not in PLATFORMS:
        raise ValueError(f"platform must be one of {sorted(PLATFORMS)}, got {platform!r}")
    start = check_timestamp(start, "start")
    users = check_count(users, "users", minimum=1)
    partitions = check_count(partitions, "partitions", minimum=1)
    events_per_session = check_positive(events_per_session, "events_per_session")
    if events_per_session < 1:
        raise ValueError(f"events_per_session must be >= 1, got {events_per_session}")
    within_gap = check_positive(within_gap, "within_gap")
    max_within_gap = check_positive(max_within_gap, "max_within_gap")
    between_gap = check_positive(between_gap, "between_gap")
    if not math.isfinite(float(min_between_gap)) or min_between_gap < 0:
        raise ValueError(f"min_between_gap must be >= 0 seconds, got {min_between_gap!r}")
    if min_between_gap <= max_within_gap:
        raise ValueError(
            f"min_between_gap ({min_between_gap} s) must exceed max_within_gap "
            f"({max_within_gap} s) so sessions stay separate"
        )
    profile = PLATFORMS[platform]
    delay = profile.delay if delay is None else _check_delay(delay, "delay")
    frac = profile.stragglers if stragglers is None else check_fraction(stragglers, "stragglers")
    sdelay = (
        profile.straggler_delay
        if straggler_delay is None
        else _check_delay(straggler_delay, "straggler_delay")
    )

    rng = np.random.default_rng(seed)
    # Session lengths summing to exactly n.
    if n == 0:
        return Trace.empty()
    m = int(n / events_per_session * 1.1) + 16
    lengths = 1 + rng.poisson(events_per_session - 1.0, m)
    while int(lengths.sum()) < n:
        lengths = np.concatenate([lengths, 1 + rng.poisson(events_per_session - 1.0, m)])
    ends = np.cumsum(lengths)
    s = int(np.searchsorted(ends, n))  # session s holds event n-1
    lengths = lengths[: s + 1].copy()
    lengths[-1] -= int(ends[s]) - n
    n_sessions = lengths.size
    user_of_session = rng.integers(0, users, n_sessions, dtype=np.int64)

    # Lay sessions out user by user: a stable sort keeps each user's sessions in draw order.
    sess_order = np.argsort(user_of_session, kind="stable")
    lengths_u = lengths[sess_order]
    user_u = user_of_session[sess_order]
    session_start = np.zeros(n_sessions, dtype=np.int64)
    session_start[1:] = np.cumsum(lengths_u)[:-1]
    first_of_user = np.ones(n_sessions, dtype=bool)
    first_of_user[1:] = user_u[1:] != user_u[:-1]

    gaps = np.minimum(rng.exponential(within_gap, n), max_within_gap)  # seconds
    gaps[session_start] = min_between_gap + rng.exponential(between_gap, n_sessions)
    gaps[session_start[first_of_user]] = rng.uniform(0.0, between_gap, int(first_of_user.sum()))
    gaps_us = np.rint(gaps * SECOND).astype(np.int64)
    total = np.cumsum(gaps_us)
    user_ev = np.repeat(user_u, lengths_u)
    # Per-user cumulative sum: subtract the running total before each user's first event.
    user_first_ev = session_start[first_of_user]
    base = total[user_first_ev] - gaps_us[user_first_ev]
    marker = np.zeros(n, dtype=bool)
    marker[user_first_ev] = True
    seg = np.cumsum(marker) - 1
    offsets = total - base[seg]
    event_time = start + offsets
    if int(event_time.max()) > MAX_TIMESTAMP:
        raise ValueError("start plus the sessions' span runs past MAX_TIMESTAMP")

    score = rng.integers(1, 101, n).astype(np.float64)
    arrival = _arrivals(rng, event_time, delay, frac, sdelay)
    order = np.lexsort((event_time, arrival))
    return Trace(
        event_time[order], arrival[order], user_ev[order], score[order], user_ev[order] % partitions
    )
