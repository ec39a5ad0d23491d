"""The executor-side steps of ``simulate --engine spark`` (:mod:`spark_backend.keyed_parts`),
without Spark: key partitions, the local order kept through splits and merges, holds as
their changes. Times are µs."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.keyed_parts import Part, dense, key_partition, merge, split, steps
from theory.pipeline.simulator import Stream, merge_streams
from theory.time import MAX_TIMESTAMP


def test_a_key_has_one_partition_whatever_its_array():
    ints = np.array([0, 7, 12, -3, 2**40], np.int64)
    assert key_partition(ints, 5).tolist() == key_partition(ints.astype(object), 5).tolist()
    assert key_partition(ints, 5).tolist() == [0, 2, 2, 2, 2**40 % 5]
    words = np.array(["a", "b", "a", None], object)
    got = key_partition(words, 3)
    assert got[0] == got[2] and got[3] == 0 and set(got.tolist()) <= {0, 1, 2}


def _stream(rng, n, keys):
    time = np.sort(rng.integers(0, 50, n))  # many ties: the order within a time matters
    return Stream(time, rng.integers(0, 1000, n), rng.integers(0, keys, n), rng.random(n))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(0, 40), st.integers(0, 40))
def test_split_and_merge_keep_the_local_order(seed, n_parts, n_a, n_b):
    """Each partition's merge of two inputs' pieces is the local merged stream's elements
    of that partition's keys, in the local order."""
    rng = np.random.default_rng(seed)
    a, b = _stream(rng, n_a, 6), _stream(rng, n_b, 6)
    whole = merge_streams([a, b])
    pieces: dict[int, list] = {}
    for i, s in enumerate((a, b)):
        part = Part(s, np.arange(len(s), dtype=np.int64).reshape(-1, 1))
        for p, piece in split(part, n_parts, rekey_global=False):
            pieces.setdefault(p, []).append((i, piece))
    seen = 0
    for p, got in pieces.items():
        merged = merge(got, inputs=2).stream
        mine = np.flatnonzero(key_partition(whole.key, n_parts) == p)
        for f in ("time", "timestamp", "key", "value"):
            assert np.array_equal(getattr(merged, f), getattr(whole, f)[mine])
        seen += len(merged)
    assert seen == n_a + n_b
    # re-keyed to one key: one partition, the stream in its order
    one = split(Part(whole, np.arange(len(whole)).reshape(-1, 1)), n_parts, rekey_global=True)
    assert [p for p, _ in one] == ([0] if len(whole) else [])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([5, 9, 9, 20, MAX_TIMESTAMP]), max_size=30))
def test_holds_travel_as_their_changes(values):
    hold = np.array(values, np.int64)
    changes = steps(hold)
    assert np.array_equal(dense(changes, hold.size), hold)
    assert changes.values.size == np.count_nonzero(np.diff(hold, prepend=MAX_TIMESTAMP))
