"""theory.wavelet.kth_in_suffix against sorting: the k-th smallest of ``ranks[pos:]``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.wavelet import kth_in_suffix


def brute(ranks: np.ndarray, pos: np.ndarray, k: np.ndarray) -> list[int]:
    return [int(np.sort(ranks[s:])[q - 1]) for s, q in zip(pos.tolist(), k.tolist(), strict=True)]


@st.composite
def problems(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A permutation and valid queries, with runs of repeated queries."""
    m = draw(st.integers(1, 70))
    ranks = np.array(draw(st.permutations(range(m))), dtype=np.int64)
    queries = []
    for s in draw(st.lists(st.integers(0, m - 1), max_size=40)):
        q = (s, draw(st.integers(1, m - s)))
        queries += [q] * draw(st.integers(1, 3))
    pos = np.array([s for s, _ in queries], dtype=np.int64)
    k = np.array([q for _, q in queries], dtype=np.int64)
    return ranks, pos, k


@settings(max_examples=300)
@given(problems())
def test_equals_sorting_the_suffix(problem):
    ranks, pos, k = problem
    got = kth_in_suffix(ranks, pos, k)
    assert got.dtype == np.int64
    assert got.tolist() == brute(ranks, pos, k)


def test_every_query_of_a_larger_permutation():
    rng = np.random.default_rng(5)
    m = 3000  # 12 levels; int32 inside
    ranks = rng.permutation(m)
    pos = np.sort(rng.integers(0, m, 500))
    k = 1 + (rng.random(pos.size) * (m - pos)).astype(np.int64)
    assert kth_in_suffix(ranks, pos, k).tolist() == brute(ranks, pos, k)
    # the extremes: the minimum and the maximum of every suffix
    pos = np.arange(m)
    assert kth_in_suffix(ranks, pos, np.ones(m, np.int64)).tolist() == (
        np.minimum.accumulate(ranks[::-1])[::-1].tolist()
    )
    assert kth_in_suffix(ranks, pos, m - pos).tolist() == (
        np.maximum.accumulate(ranks[::-1])[::-1].tolist()
    )


def test_no_queries_and_single_element():
    assert kth_in_suffix(np.array([0]), np.array([0]), np.array([1])).tolist() == [0]
    assert kth_in_suffix(np.arange(4), [], []).tolist() == []
    assert kth_in_suffix([], [], []).tolist() == []


@pytest.mark.parametrize(
    ("ranks", "pos", "k", "match"),
    [
        ([0, 2, 2], [0], [1], "permutation"),
        ([0, 1, 3], [0], [1], "permutation"),
        ([-1, 0, 1], [0], [1], "permutation"),
        ([0, 1, 2], [-1], [1], "pos must be >= 0"),
        ([0, 1, 2], [1], [3], r"k\[0\]=3 is outside \[1, 2\]"),
        ([0, 1, 2], [0, 2], [1, 0], r"k\[1\]=0 is outside"),
        ([0, 1, 2], [0, 1], [1], "k has 1 elements but pos has 2"),
        ([], [0], [1], "outside"),
    ],
)
def test_bad_values(ranks, pos, k, match):
    with pytest.raises(ValueError, match=match):
        kth_in_suffix(
            np.array(ranks, dtype=np.int64), np.array(pos, np.int64), np.array(k, np.int64)
        )


def test_bad_types():
    with pytest.raises(TypeError, match="ranks"):
        kth_in_suffix(np.array([0.0, 1.0]), [0], [1])
    with pytest.raises(TypeError, match="k"):
        kth_in_suffix([0, 1], [0], [1.5])
