"""Seeded, vectorised numpy trace generators (their parameters: :mod:`theory.data.specs`).

Every generator takes ``seed`` and draws from ``numpy.random.default_rng(seed)`` in a
fixed order, so one seed always gives one trace. Traces come back sorted by arrival time.
Spark draws the same distributions in :mod:`spark_backend.traces.generate`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from theory.data.distributions import Delay
from theory.data.specs import SessionSpec, TraceSpec
from theory.data.trace import Trace
from theory.time import MAX_TIMESTAMP, MICROS_PER_SECOND, SECOND

__all__ = ["game_sessions_trace", "generate_trace", "sample_sessions", "sample_trace"]


def generate_trace(n: int, *, seed: int, **params: Any) -> Trace:
    """A synthetic trace of exactly ``n`` rows, sorted by arrival time.

    ``params`` are the other fields of :class:`~theory.data.specs.TraceSpec` (rate, keys,
    partitions, delay, stragglers, bursts, idle partitions, value, ...), which says what
    they mean; TypeError for an unknown name.
    """
    return sample_trace(TraceSpec(n, seed, **params))


def game_sessions_trace(n: int, *, seed: int, **params: Any) -> Trace:
    """User game events in per-user sessions (the *Streaming Systems* ch. 3 input), sorted
    by arrival time; ``params`` are the other fields of
    :class:`~theory.data.specs.SessionSpec` (platform, users, session shape, delays)."""
    return sample_sessions(SessionSpec(n, seed, **params))


# --------------------------------------------------------------------------- shared parts


def _arrivals(
    rng: np.random.Generator,
    event_time: np.ndarray,
    delay: Delay,
    stragglers: float,
    straggler_delay: Delay,
) -> np.ndarray:
    """event_time + delay, plus a straggler delay for a ``stragglers`` fraction of rows,
    capped at MAX_TIMESTAMP."""
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


# --------------------------------------------------------------------------- generate_trace


def sample_trace(spec: TraceSpec) -> Trace:
    """The trace of ``spec`` (see :func:`generate_trace`)."""
    rng = np.random.default_rng(spec.seed)
    event_time = _poisson_times(rng, spec)
    key = rng.integers(0, spec.keys, spec.n, dtype=np.int64)
    _move_idle_keys(rng, spec, event_time, key)
    arrival = _arrivals(rng, event_time, spec.delay, spec.stragglers, spec.straggler_delay)
    values = None if spec.value is None else spec.value.draw(rng, spec.n)
    # Event times are non-decreasing, so a stable sort by arrival ties by event time.
    order = np.argsort(arrival, kind="stable")
    arrival = arrival[order]
    event_time = event_time[order]
    key = key[order]
    values = np.ones(spec.n, dtype=np.float64) if values is None else values[order]
    del order
    return Trace(event_time, arrival, _named_keys(spec, key), values, key % spec.partitions)


def _poisson_times(rng: np.random.Generator, spec: TraceSpec) -> np.ndarray:
    """Sorted event times (µs): exponential gaps at ``rate``, shortened inside bursts.

    In-place steps keep peak memory near five int64 columns for large n."""
    n = spec.n
    gaps = rng.exponential(1.0 / spec.rate, n)  # seconds
    if spec.bursts and n:
        gaps[_in_bursts(rng, spec)] /= spec.burst_factor
    np.cumsum(gaps, out=gaps)
    gaps *= MICROS_PER_SECOND
    np.rint(gaps, out=gaps)
    if n and spec.start + gaps[-1] > MAX_TIMESTAMP:
        raise ValueError("start + n / rate runs past MAX_TIMESTAMP; lower n or raise rate")
    event_time = gaps.astype(np.int64)
    del gaps
    event_time += spec.start
    return event_time


def _in_bursts(rng: np.random.Generator, spec: TraceSpec) -> np.ndarray:
    """The rows inside a burst: ``bursts`` runs of :attr:`TraceSpec.burst_run` rows."""
    n, run = spec.n, spec.burst_run
    starts = rng.integers(0, max(1, n - run + 1), spec.bursts)  # whole runs fit
    depth = np.zeros(n + 1, dtype=np.int32)
    np.add.at(depth, starts, 1)
    np.add.at(depth, np.minimum(starts + run, n), -1)
    return np.cumsum(depth[:n]) > 0


def _move_idle_keys(
    rng: np.random.Generator, spec: TraceSpec, event_time: np.ndarray, key: np.ndarray
) -> None:
    """Give events of idle partitions inside the idle interval a key of an active one."""
    if not spec.idle_partitions or spec.idle_interval is None or not spec.n:
        return
    i0, i1 = np.searchsorted(event_time, spec.idle_interval, side="left")
    window = key[i0:i1]  # a view: event times are sorted
    hit = np.isin(window % spec.partitions, spec.idle_partitions)
    if hit.any():  # the spec ensures some key is in an active partition
        all_keys = np.arange(spec.keys, dtype=np.int64)
        active = all_keys[~np.isin(all_keys % spec.partitions, spec.idle_partitions)]
        window[hit] = rng.choice(active, size=int(np.count_nonzero(hit)))


def _named_keys(spec: TraceSpec, key: np.ndarray) -> np.ndarray:
    """``key``, or ``f"{key_prefix}{key}"`` strings when the spec has a prefix."""
    if spec.key_prefix is None:
        return key
    return np.char.add(spec.key_prefix, key.astype(str)).astype(object)


# --------------------------------------------------------------------------- game sessions


def sample_sessions(spec: SessionSpec) -> Trace:
    """The trace of ``spec`` (see :func:`game_sessions_trace`)."""
    if spec.n == 0:
        return Trace.empty()
    rng = np.random.default_rng(spec.seed)
    lengths = _session_lengths(rng, spec)
    user_of_session = rng.integers(0, spec.users, lengths.size, dtype=np.int64)
    user, event_time = _session_times(rng, spec, lengths, user_of_session)
    score = rng.integers(1, 101, spec.n).astype(np.float64)
    key = spec.first_user + user
    _pause_idle(spec, key, event_time)
    p = spec.profile
    arrival = _arrivals(rng, event_time, p.delay, p.stragglers, p.straggler_delay)
    order = np.lexsort((event_time, arrival))
    key = key[order]
    return Trace(event_time[order], arrival[order], key, score[order], key % spec.partitions)


def _session_lengths(rng: np.random.Generator, spec: SessionSpec) -> np.ndarray:
    """Session lengths, 1 + Poisson(events_per_session - 1), cut to sum to exactly n."""
    n = spec.n
    m = int(n / spec.events_per_session * 1.1) + 16
    lengths = 1 + rng.poisson(spec.poisson_mean, m)
    while int(lengths.sum()) < n:
        lengths = np.concatenate([lengths, 1 + rng.poisson(spec.poisson_mean, m)])
    ends = np.cumsum(lengths)
    s = int(np.searchsorted(ends, n))  # session s holds event n-1
    lengths = lengths[: s + 1].copy()
    lengths[-1] -= int(ends[s]) - n
    return lengths


def _session_times(
    rng: np.random.Generator,
    spec: SessionSpec,
    lengths: np.ndarray,
    user_of_session: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(user, event time in µs) of every event, sessions laid out user by user."""
    n_sessions = lengths.size
    # a stable sort keeps each user's sessions in draw order
    sess_order = np.argsort(user_of_session, kind="stable")
    lengths_u = lengths[sess_order]
    user_u = user_of_session[sess_order]
    session_start = np.zeros(n_sessions, dtype=np.int64)
    session_start[1:] = np.cumsum(lengths_u)[:-1]
    first_of_user = np.ones(n_sessions, dtype=bool)
    first_of_user[1:] = user_u[1:] != user_u[:-1]

    gaps = np.minimum(rng.exponential(spec.within_gap, spec.n), spec.max_within_gap)  # s
    gaps[session_start] = spec.min_between_gap + rng.exponential(spec.between_gap, n_sessions)
    first_gaps = rng.uniform(0.0, spec.between_gap, int(first_of_user.sum()))
    gaps[session_start[first_of_user]] = first_gaps
    gaps_us = np.rint(gaps * SECOND).astype(np.int64)
    event_time = spec.start + _per_user_sums(gaps_us, session_start[first_of_user])
    if int(event_time.max()) > MAX_TIMESTAMP:
        raise ValueError("start plus the sessions' span runs past MAX_TIMESTAMP")
    return np.repeat(user_u, lengths_u), event_time


def _per_user_sums(gaps_us: np.ndarray, user_first: np.ndarray) -> np.ndarray:
    """Cumulative sums of ``gaps_us`` restarting at each user's first event."""
    total = np.cumsum(gaps_us)
    base = total[user_first] - gaps_us[user_first]
    marker = np.zeros(gaps_us.size, dtype=bool)
    marker[user_first] = True
    return total - base[np.cumsum(marker) - 1]


def _pause_idle(spec: SessionSpec, key: np.ndarray, event_time: np.ndarray) -> None:
    """Users of idle partitions pause: their events from the interval's start on move by
    its length (capped at MAX_TIMESTAMP), so those partitions have no event inside it."""
    if not spec.idle_partitions or spec.idle_interval is None:
        return
    lo, hi = spec.idle_interval
    paused = np.isin(key % spec.partitions, spec.idle_partitions) & (event_time >= lo)
    room = MAX_TIMESTAMP - event_time[paused]
    event_time[paused] += np.minimum(hi - lo, room)
