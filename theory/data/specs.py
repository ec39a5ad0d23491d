"""The parameters of the trace generators, one spec per generator, checked once.

:class:`TraceSpec` is what :func:`theory.data.generators.generate_trace` (numpy) and
:func:`spark_backend.traces.generate.generate_trace_df` (Spark) draw from;
:class:`SessionSpec` is what :func:`theory.data.generators.game_sessions_trace` and
:func:`spark_backend.traces.generate.game_sessions_df` draw from. Both engines take their
parameters, defaults, checks and *meaning* (the distributions) from here, so a trace of
one engine has the distribution of the other's (their random streams differ). Times are
µs; gaps and distributions of delays are in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from theory.columns import (
    check_count,
    check_fraction,
    check_positive,
    check_seed,
    check_timestamp,
)
from theory.data.distributions import Delay, Distribution, check_delay
from theory.time import MICROS_PER_SECOND

__all__ = ["DELAY", "PLATFORMS", "STRAGGLER_DELAY", "PlatformProfile", "SessionSpec", "TraceSpec"]


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


#: The default delays of :class:`TraceSpec` (seconds): log-normal with a 1 s median, and
#: Pareto stragglers from 60 s on.
DELAY: Final[Delay] = Delay("lognorm", s=1.0, scale=1.0)
STRAGGLER_DELAY: Final[Delay] = Delay("pareto", b=1.5, scale=60.0)


def _set(spec: object, name: str, value: object) -> None:
    object.__setattr__(spec, name, value)  # the checked, normalised value of a frozen field


def _idle(
    partitions: int, idle_partitions: Iterable[int], idle_interval: tuple[int, int] | None
) -> tuple[tuple[int, ...], tuple[int, int] | None]:
    """Checked idle partitions (sorted, unique, in ``range(partitions)``) and interval."""
    idle = tuple(sorted({check_count(p, "idle_partitions[]") for p in idle_partitions}))
    if any(p >= partitions for p in idle):
        raise ValueError(f"idle_partitions must be in [0, partitions={partitions}), got {idle}")
    if idle_interval is None:
        return idle, None
    lo, hi = (check_timestamp(x, "idle_interval") for x in idle_interval)
    if hi <= lo:
        raise ValueError(f"idle_interval must have end > start, got {idle_interval}")
    return idle, (lo, hi)


@dataclass(frozen=True)
class TraceSpec:
    """A synthetic trace of exactly ``n`` rows (``seed`` fixes it within one engine).

    - Event times (µs, from ``start``) are a Poisson process at ``rate`` events per second
      of event time. ``bursts`` bursts each multiply the rate by ``burst_factor`` for
      about ``burst_duration`` seconds (runs of ``rate*burst_factor*burst_duration``
      events at uniformly chosen positions, clipped to the trace).
    - ``key`` is uniform over ``range(keys)`` (``f"{key_prefix}{key}"`` strings when
      ``key_prefix`` is given); ``partition = key % partitions``.
    - ``arrival_time = event_time + delay`` (µs), plus ``straggler_delay`` for a
      ``stragglers`` fraction of rows, capped at MAX_TIMESTAMP.
    - Partitions in ``idle_partitions`` have no events with event time in the half-open
      ``idle_interval = (start_us, end_us)``; such events get a key of another partition.
    - ``value`` draws from a distribution (raw units), or is 1.0 when None.

    TypeError for a parameter of the wrong type, ValueError for a bad value.
    """

    n: int
    seed: int
    start: int = 0
    rate: float = 1000.0
    keys: int = 100
    partitions: int = 4
    delay: Delay = DELAY
    stragglers: float = 0.0
    straggler_delay: Delay = STRAGGLER_DELAY
    bursts: int = 0
    burst_factor: float = 10.0
    burst_duration: float = 1.0
    idle_partitions: tuple[int, ...] = ()  # any iterable; kept sorted and unique
    idle_interval: tuple[int, int] | None = None
    value: Distribution | None = None
    key_prefix: str | None = None

    def __post_init__(self) -> None:
        _set(self, "n", check_count(self.n, "n"))
        _set(self, "seed", check_seed(self.seed))
        _set(self, "start", check_timestamp(self.start, "start"))
        _set(self, "rate", check_positive(self.rate, "rate"))
        _set(self, "keys", check_count(self.keys, "keys", minimum=1))
        _set(self, "partitions", check_count(self.partitions, "partitions", minimum=1))
        _set(self, "delay", check_delay(self.delay, "delay"))
        _set(self, "stragglers", check_fraction(self.stragglers, "stragglers"))
        _set(self, "straggler_delay", check_delay(self.straggler_delay, "straggler_delay"))
        _set(self, "bursts", check_count(self.bursts, "bursts"))
        _set(self, "burst_factor", check_positive(self.burst_factor, "burst_factor"))
        _set(self, "burst_duration", check_positive(self.burst_duration, "burst_duration"))
        idle, interval = _idle(self.partitions, self.idle_partitions, self.idle_interval)
        _set(self, "idle_partitions", idle)
        _set(self, "idle_interval", interval)
        if idle and interval is not None and not self.active_residues:
            raise ValueError(
                "idle_partitions leave no key in an active partition during idle_interval; "
                f"keys={self.keys}, partitions={self.partitions}, idle_partitions={list(idle)}"
            )
        if self.value is not None and not isinstance(self.value, Distribution):
            raise TypeError(
                f"value must be a Distribution (e.g. Delay) or None, got {self.value!r}"
            )
        if self.key_prefix is not None and not isinstance(self.key_prefix, str):
            raise TypeError(f"key_prefix must be a str or None, got {self.key_prefix!r}")

    @property
    def active_residues(self) -> tuple[int, ...]:
        """The partitions (``key % partitions``) that have keys and are not idle."""
        idle = set(self.idle_partitions)
        return tuple(r for r in range(min(self.partitions, self.keys)) if r not in idle)

    @property
    def burst_run(self) -> int:
        """Events in one burst: ``rate * burst_factor * burst_duration``, at least 1."""
        return max(1, round(self.rate * self.burst_factor * self.burst_duration))


@dataclass(frozen=True)
class SessionSpec:
    """User game events in per-user sessions: the *Streaming Systems* ch. 3 input.

    Exactly ``n`` rows; ``key`` = user id in ``first_user + range(users)``, ``value`` =
    score (1-100), ``partition = key % partitions``. Session lengths are
    1 + Poisson(``events_per_session`` - 1) events, sessions going to users at random
    (numpy) or in turn (Spark); inside a session gaps are exponential with mean
    ``within_gap`` seconds, capped at ``max_within_gap``; a user's first gap is uniform on
    [0, ``between_gap``) s and the gaps between their sessions are ``min_between_gap`` +
    exponential(``between_gap``) s, so a session window of a gap in between separates them.
    Delays follow :data:`PLATFORMS[platform]`, unless ``delay``/``stragglers``/
    ``straggler_delay`` override them. Users of ``idle_partitions`` pause during
    ``idle_interval`` (µs): their events from its start on move past its end.

    TypeError for a parameter of the wrong type, ValueError for a bad value.
    """

    n: int
    seed: int
    platform: str = "mobile"
    start: int = 0
    users: int = 100
    first_user: int = 0
    partitions: int = 4
    events_per_session: float = 10.0
    within_gap: float = 5.0
    max_within_gap: float = 30.0
    between_gap: float = 600.0
    min_between_gap: float = 180.0
    delay: Delay | None = None
    stragglers: float | None = None
    straggler_delay: Delay | None = None
    idle_partitions: tuple[int, ...] = ()  # any iterable; kept sorted and unique
    idle_interval: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        _set(self, "n", check_count(self.n, "n"))
        _set(self, "seed", check_seed(self.seed))
        if not isinstance(self.platform, str):
            raise TypeError(f"platform must be a str, got {self.platform!r}")
        if self.platform not in PLATFORMS:
            raise ValueError(f"platform must be one of {sorted(PLATFORMS)}, got {self.platform!r}")
        _set(self, "start", check_timestamp(self.start, "start"))
        _set(self, "users", check_count(self.users, "users", minimum=1))
        _set(self, "first_user", check_count(self.first_user, "first_user"))
        _set(self, "partitions", check_count(self.partitions, "partitions", minimum=1))
        eps = check_positive(self.events_per_session, "events_per_session")
        if eps < 1:
            raise ValueError(f"events_per_session must be >= 1, got {eps}")
        _set(self, "events_per_session", eps)
        self._check_gaps()
        self._check_delays()
        idle, interval = _idle(self.partitions, self.idle_partitions, self.idle_interval)
        _set(self, "idle_partitions", idle)
        _set(self, "idle_interval", interval)

    def _check_gaps(self) -> None:
        """Gaps in seconds; sessions stay separate only if every gap between them is longer
        than every gap inside one."""
        for name in ("within_gap", "max_within_gap", "between_gap", "min_between_gap"):
            _set(self, name, check_positive(getattr(self, name), name))
        if self.min_between_gap <= self.max_within_gap:
            raise ValueError(
                f"min_between_gap ({self.min_between_gap} s) must exceed max_within_gap "
                f"({self.max_within_gap} s) so sessions stay separate"
            )

    def _check_delays(self) -> None:
        if self.delay is not None:
            check_delay(self.delay, "delay")
        if self.stragglers is not None:
            _set(self, "stragglers", check_fraction(self.stragglers, "stragglers"))
        if self.straggler_delay is not None:
            check_delay(self.straggler_delay, "straggler_delay")

    @property
    def profile(self) -> PlatformProfile:
        """The delays in effect: the platform's, with this spec's overrides."""
        base = PLATFORMS[self.platform]
        return PlatformProfile(
            base.delay if self.delay is None else self.delay,
            base.stragglers if self.stragglers is None else self.stragglers,
            base.straggler_delay if self.straggler_delay is None else self.straggler_delay,
        )

    @property
    def expected_span(self) -> int:
        """The expected event-time span (µs) of a user's events: events per user times the
        mean gap (a fraction ``1/events_per_session`` of gaps start a session)."""
        capped_within = self.within_gap * (1.0 - math.exp(-self.max_within_gap / self.within_gap))
        p_new = 1.0 / self.events_per_session
        mean_gap = p_new * (self.min_between_gap + self.between_gap) + (1 - p_new) * capped_within
        return int(self.n / self.users * mean_gap * MICROS_PER_SECOND)

    @property
    def poisson_mean(self) -> float:
        """λ of the session lengths, 1 + Poisson(λ) events: ``events_per_session - 1``."""
        return self.events_per_session - 1.0
