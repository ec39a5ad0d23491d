import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.pipeline.processing import Processing
from theory.time import MAX_TIMESTAMP
from theory.watermarks.holds import inflight_min

rng = np.random.default_rng(0)


def test_constant_latency_is_fifo():
    a = np.array([0, 1, 1, 5])
    d = Processing(latency=3).departures(a, rng)
    assert d.tolist() == [3, 4, 4, 8]


def test_stall_holds_departures_until_it_ends():
    a = np.array([0, 10, 20, 40])
    d = Processing(latency=1, stalls=((5, 30),)).departures(a, rng)
    assert d.tolist() == [1, 30, 30, 41]


def test_bad_processing_parameters():
    with pytest.raises(ValueError, match="latency"):
        Processing(latency=-1)
    with pytest.raises(ValueError, match=r"stalls\[0\]"):
        Processing(stalls=((5, 5),))
    with pytest.raises(ValueError, match="sorted"):
        Processing(latency=1).departures(np.array([3, 1]), rng)


items = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 10), st.integers(-50, 50)), max_size=30
)


@given(items, st.booleans())
def test_inflight_min_matches_brute_force(rows, fifo):
    a = np.array([r[0] for r in rows], dtype=np.int64)
    d = a + np.array([r[1] for r in rows], dtype=np.int64)
    if fifo and a.size:
        order = np.argsort(a, kind="stable")
        a, d = a[order], np.maximum.accumulate(d[order])
    ts = np.array([r[2] for r in rows], dtype=np.int64)
    s = inflight_min(a, d, ts)
    for t in range(-1, 55):
        live = ts[(a <= t) & (t < d)]
        expected = int(live.min()) if live.size else MAX_TIMESTAMP
        assert int(s.at(t)) == expected


def test_inflight_min_checks_its_columns():
    with pytest.raises(TypeError, match="depart must hold integers"):
        inflight_min(np.array([0]), np.array([1.5]), np.array([0]))
    with pytest.raises(ValueError, match="timestamp has 1 elements but arrive has 2"):
        inflight_min(np.array([0, 1]), np.array([1, 2]), np.array([0]))
