"""Seeded trace generators: determinism, shape, skew and session structure."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.data.distributions import MAX_DELAY, Delay, Distribution
from theory.data.generators import game_sessions_trace, generate_trace
from theory.data.specs import PLATFORMS
from theory.data.trace import Trace
from theory.time import MINUTE, SECOND


def _assert_shape(t: Trace, n: int) -> None:
    assert len(t) == n
    assert t.event_time.dtype == np.int64 and t.arrival_time.dtype == np.int64
    assert bool(np.all(np.diff(t.arrival_time) >= 0)), "sorted by arrival"
    assert bool(np.all(t.arrival_time >= t.event_time)), "delays are non-negative"


# --------------------------------------------------------------------------- Delay


def test_delay_samples_are_microseconds() -> None:
    rng = np.random.default_rng(0)
    d = Delay("lognorm", s=0.5, scale=2.0).sample(rng, 20_000)
    assert d.dtype == np.int64
    assert np.median(d) == pytest.approx(2 * SECOND, rel=0.05)


def test_delay_clipped_non_negative_and_capped() -> None:
    rng = np.random.default_rng(0)
    assert np.all(Delay("norm", loc=-5.0, scale=1.0).sample(rng, 100) == 0)
    huge = Delay("uniform", loc=1e12, scale=1.0).sample(rng, 10)
    assert np.all(huge == MAX_DELAY)
    assert Delay("expon", scale=1.0).sample(rng, 0).shape == (0,)


def test_delay_validation() -> None:
    with pytest.raises(ValueError, match="'nosuchdist'"):
        Delay("nosuchdist", scale=1.0)
    with pytest.raises(ValueError, match="invalid"):
        Delay("lognorm", s=-1.0)
    with pytest.raises(ValueError, match="bad parameters"):
        Delay("lognorm", s=1.0, colour=2.0)
    with pytest.raises(ValueError, match="bad parameters"):
        Delay("lognorm")  # missing shape s
    with pytest.raises(TypeError, match="not a number"):
        Delay("lognorm", s="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name must be a str"):
        Delay(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown"):
        Delay("rv_continuous")


def test_delay_is_a_value() -> None:
    a, b = Delay("lognorm", s=1, scale=2.0), Delay("lognorm", scale=2.0, s=1.0)
    assert a == b and hash(a) == hash(b)
    assert repr(a) == "Delay('lognorm', s=1.0, scale=2.0)"
    assert a.kwargs == {"s": 1.0, "scale": 2.0}
    assert Distribution("lognorm", s=1.0) != Delay("lognorm", s=1.0)


# --------------------------------------------------------------------------- generate_trace


def test_deterministic_per_seed() -> None:
    kw = {"stragglers": 0.1, "bursts": 2, "value": Delay("expon", scale=3.0)}
    a = generate_trace(2000, seed=7, **kw)
    b = generate_trace(2000, seed=7, **kw)
    c = generate_trace(2000, seed=8, **kw)
    assert a == b
    assert a != c


@pytest.mark.parametrize("n", [0, 1, 2, 999])
def test_exact_n_sorted_and_causal(n: int) -> None:
    t = generate_trace(n, seed=1, stragglers=0.2, bursts=1)
    _assert_shape(t, n)
    assert t.partition is not None
    assert np.array_equal(t.partition, t.key % 4)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(0, 300),
    seed=st.integers(0, 2**32),
    keys=st.integers(1, 20),
    partitions=st.integers(1, 6),
    stragglers=st.floats(0, 1),
    bursts=st.integers(0, 3),
    start=st.integers(-(10**15), 10**15),
)
def test_generate_invariants(
    n: int, seed: int, keys: int, partitions: int, stragglers: float, bursts: int, start: int
) -> None:
    t = generate_trace(
        n,
        seed=seed,
        keys=keys,
        partitions=partitions,
        stragglers=stragglers,
        bursts=bursts,
        start=start,
    )
    _assert_shape(t, n)
    assert bool(np.all(t.event_time >= start))
    assert bool(np.all((t.key >= 0) & (t.key < keys)))
    assert t.partition is not None and np.array_equal(t.partition, t.key % partitions)


def test_poisson_rate() -> None:
    t = generate_trace(50_000, seed=3, rate=200.0)
    gaps = np.diff(np.sort(t.event_time))
    assert gaps.mean() == pytest.approx(SECOND / 200, rel=0.03)
    # Exponential gaps: standard deviation close to the mean.
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.05)


def test_bursts_raise_the_rate_locally() -> None:
    plain = generate_trace(20_000, seed=4, rate=1000.0)
    burst = generate_trace(
        20_000, seed=4, rate=1000.0, bursts=1, burst_factor=10.0, burst_duration=1.0
    )
    span = lambda t: int(t.event_time.max() - t.event_time.min())  # noqa: E731
    # One burst packs 10,000 events (10 s at the base rate) into about 1 s.
    assert span(burst) == pytest.approx(span(plain) - 9 * SECOND, rel=0.1)
    counts = np.bincount((np.sort(burst.event_time) // SECOND).astype(np.int64))
    assert counts.max() > 5 * np.median(counts)


def test_straggler_fraction() -> None:
    t = generate_trace(
        40_000,
        seed=5,
        delay=Delay("uniform", loc=0.0, scale=0.001),
        stragglers=0.1,
        straggler_delay=Delay("uniform", loc=100.0, scale=10.0),
    )
    late = (t.arrival_time - t.event_time) > 50 * SECOND
    assert late.mean() == pytest.approx(0.1, abs=0.01)
    none = generate_trace(1000, seed=5, stragglers=0.0, delay=Delay("uniform", scale=0.001))
    assert int((none.arrival_time - none.event_time).max()) <= 1000


def test_idle_partitions_are_idle_in_the_interval() -> None:
    lo, hi = 2 * SECOND, 6 * SECOND
    t = generate_trace(
        10_000,
        seed=6,
        rate=1000.0,
        keys=40,
        partitions=4,
        idle_partitions=(1, 3),
        idle_interval=(lo, hi),
    )
    assert len(t) == 10_000
    assert t.partition is not None
    inside = (t.event_time >= lo) & (t.event_time < hi)
    assert inside.sum() > 3000
    assert not np.any(inside & np.isin(t.partition, [1, 3]))
    assert np.array_equal(t.partition, t.key % 4)
    # Outside the interval the idle partitions produce data as usual.
    assert np.isin(t.partition[~inside], [1, 3]).mean() == pytest.approx(0.5, abs=0.05)
    # Without the interval nothing is idle.
    u = generate_trace(10_000, seed=6, keys=40, idle_partitions=(1, 3))
    assert u.partition is not None and np.isin(u.partition, [1, 3]).any()


def test_idle_needs_an_active_partition() -> None:
    with pytest.raises(ValueError, match="idle_partitions"):
        generate_trace(100, seed=0, partitions=2, idle_partitions=(0, 1), idle_interval=(0, 10**9))
    with pytest.raises(ValueError, match="idle_partitions"):
        generate_trace(10, seed=0, partitions=2, idle_partitions=(2,), idle_interval=(0, 1))


def test_values() -> None:
    assert np.all(generate_trace(10, seed=0).value == 1.0)
    t = generate_trace(20_000, seed=0, value=Distribution("norm", loc=5.0, scale=1.0))
    assert t.value.mean() == pytest.approx(5.0, abs=0.05)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n": -1}, "n"),
        ({"rate": 0.0}, "rate"),
        ({"rate": float("inf")}, "rate"),
        ({"stragglers": 1.5}, "stragglers"),
        ({"stragglers": -0.1}, "stragglers"),
        ({"partitions": 0}, "partitions"),
        ({"keys": 0}, "keys"),
        ({"bursts": -1}, "bursts"),
        ({"burst_factor": 0.0}, "burst_factor"),
        ({"seed": -3}, "seed"),
        ({"idle_interval": (5, 5)}, "idle_interval"),
        ({"idle_partitions": (4,)}, "idle_partitions"),
    ],
)
def test_generate_validation(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"n": 10, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=name):
        generate_trace(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 1.5}, "n must be an integer"),
        ({"seed": "7"}, "seed must be an integer"),
        ({"delay": 3.0}, "delay must be a Delay"),
        ({"value": "normal"}, "value must be a Distribution"),
        ({"key_prefix": 7}, "key_prefix must be a str"),
        ({"colour": 1}, "colour"),
    ],
)
def test_generate_wrong_types(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"n": 10, "seed": 0, **kwargs}
    with pytest.raises(TypeError, match=message):
        generate_trace(**args)  # type: ignore[arg-type]


def test_large_trace_exact_n() -> None:
    t = generate_trace(1_000_000, seed=0, stragglers=0.01, bursts=3)
    _assert_shape(t, 1_000_000)


# --------------------------------------------------------------------------- game sessions


def _within_key_gaps(t: Trace) -> np.ndarray:
    order = np.lexsort((t.event_time, t.key))
    k, e = t.key[order], t.event_time[order]
    return np.diff(e)[k[1:] == k[:-1]]


@pytest.mark.parametrize("platform", ["mobile", "console"])
def test_game_sessions_shape(platform: str) -> None:
    t = game_sessions_trace(5000, seed=1, platform=platform)
    _assert_shape(t, 5000)
    assert t.key.dtype == np.int64 and bool(np.all((t.key >= 0) & (t.key < 100)))
    assert bool(np.all((t.value >= 1) & (t.value <= 100)))
    assert t == game_sessions_trace(5000, seed=1, platform=platform)
    assert t != game_sessions_trace(5000, seed=2, platform=platform)


@pytest.mark.parametrize("n", [0, 1, 7, 1234])
def test_game_sessions_exact_n(n: int) -> None:
    assert len(game_sessions_trace(n, seed=0, users=5)) == n


def test_session_gap_structure() -> None:
    n, eps, users = 20_000, 10.0, 100
    t = game_sessions_trace(n, seed=9, users=users, events_per_session=eps)
    gaps = _within_key_gaps(t)
    assert gaps.size == n - len(np.unique(t.key))
    # Bimodal: inside a session gaps stay <= 30 s, between sessions >= 3 min.
    assert not np.any((gaps > 30 * SECOND) & (gaps < 3 * MINUTE))
    frac_long = float(np.mean(gaps > MINUTE))
    sessions = int(np.sum(gaps > MINUTE)) + len(np.unique(t.key))
    assert sessions / n == pytest.approx(1 / eps, rel=0.1)
    assert frac_long == pytest.approx(1 / eps, rel=0.1)


def test_mobile_delays_heavier_than_console() -> None:
    m = game_sessions_trace(20_000, seed=1, platform="mobile")
    c = game_sessions_trace(20_000, seed=1, platform="console")
    dm = (m.arrival_time - m.event_time).astype(float)
    dc = (c.arrival_time - c.event_time).astype(float)
    assert np.median(dm) > 3 * np.median(dc)
    assert np.percentile(dm, 99) > 10 * np.percentile(dc, 99)
    skew = lambda d: np.percentile(d, 99) / np.median(d)  # noqa: E731
    assert skew(dm) > 2 * skew(dc)
    assert PLATFORMS["mobile"].stragglers > PLATFORMS["console"].stragglers


def test_game_sessions_overrides_and_validation() -> None:
    t = game_sessions_trace(
        1000, seed=0, delay=Delay("uniform", loc=0.0, scale=0.001), stragglers=0.0
    )
    assert int((t.arrival_time - t.event_time).max()) <= 1000
    with pytest.raises(ValueError, match="platform"):
        game_sessions_trace(10, seed=0, platform="arcade")
    with pytest.raises(ValueError, match="n"):
        game_sessions_trace(-1, seed=0)
    with pytest.raises(ValueError, match="users"):
        game_sessions_trace(10, seed=0, users=0)
    with pytest.raises(ValueError, match="min_between_gap"):
        game_sessions_trace(10, seed=0, min_between_gap=10.0)
    with pytest.raises(ValueError, match="stragglers"):
        game_sessions_trace(10, seed=0, stragglers=2.0)
