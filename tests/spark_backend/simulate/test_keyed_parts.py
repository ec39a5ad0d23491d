"""The executor-side steps of ``simulate --engine spark`` (:mod:`spark_backend.simulate.parts`),
without Spark: key partitions, the local order kept through splits and merges, holds as
their changes. Times are µs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.simulate.grid import partition_grid
from spark_backend.simulate.parts import (
    OthersMin,
    Part,
    bounded,
    group_outputs,
    group_round,
    hold_changes,
    key_partition,
    merge,
    others_min,
    record_bytes,
    settle,
    split,
)
from theory.data.trace import Trace
from theory.pipeline.simulator import PaneTable, Stream, merge_streams, simulate, source_input
from theory.pipeline.stages import GroupByWindow, Pipeline, Source
from theory.series import StepSeries, pointwise_min
from theory.time import MAX_TIMESTAMP, SECOND
from theory.windowing.engine import STATE_HOLD
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.triggers import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    DefaultTrigger,
    Repeatedly,
)
from theory.windowing.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows


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
    hold = np.array([*values, 0], np.int64)  # (the final step's is left out)
    instants = np.arange(100, 100 + 3 * hold.size - 3, 3, dtype=np.int64)
    changes = hold_changes(hold, instants)
    assert np.array_equal(changes.at(instants), hold[:-1])
    assert changes.values.size == np.count_nonzero(np.diff(hold[:-1], prepend=MAX_TIMESTAMP))


WINDOWS = [FixedWindows(60 * SECOND), SlidingWindows(60 * SECOND, 20 * SECOND),
           Sessions(30 * SECOND), GlobalWindows()]  # fmt: skip
TRIGGERS = [
    DefaultTrigger(),
    AfterWatermark(early=AfterCount(3), late=AfterCount(1)),
    AfterWatermark(early=AfterProcessingTime(5 * SECOND)),
    AfterWatermark(late=AfterCount(2)),
    Repeatedly(AfterCount(4)),
]


def _trace(seed: int, n: int, keys: int, tick: int = SECOND) -> Trace:
    rng = np.random.default_rng(seed)
    event = np.sort(rng.integers(0, 600 * SECOND, n))
    # bursts of ties, stragglers far behind: late data under the heuristic watermarks
    delay = rng.integers(0, 4 * SECOND, n) + (rng.random(n) < 0.1) * rng.integers(0, 90 * SECOND, n)
    arrival = (event + delay) // tick * tick  # (ticks of a second: many ties)
    return Trace(event, arrival, rng.integers(0, keys, n), rng.integers(1, 9, n).astype(float))


def keyed_stage(spec: GroupByWindow, stream: Stream, iw: StepSeries, n_parts: int, fast: bool):
    """The stage run as :mod:`spark_backend.simulate.simulation` runs it, in this process:
    (rounds, state hold, the panes as one table in the local order, each partition's
    instants)."""
    glob = spec.rekey == "global"
    parts = dict(split(Part(stream, np.arange(len(stream)).reshape(-1, 1)), n_parts, glob))
    keys = [None] if glob else stream.key.tolist()
    ranks = {k: r for r, k in enumerate(dict.fromkeys(keys))}

    def run_round(others):
        ran = {p: group_round(spec, pt, iw, fast, others and others.of_partition(p))
               for p, pt in parts.items()}  # fmt: skip
        return {p: hold_changes(r.state_hold, inst) for p, (inst, r) in ran.items()}, ran

    rounds, holds, ran = settle(run_round, 64, spec.name)
    tables = [group_outputs(spec, parts[p], iw, inst, r, ranks)[1]
              for p, (inst, r) in ran.items()]  # fmt: skip
    fields = list(PaneTable.__dataclass_fields__)
    cols = {f: np.concatenate([getattr(t, f) for t in tables]) for f in fields}
    rank = np.fromiter(map(ranks.__getitem__, cols["key"].tolist()), np.int64, cols["key"].size)
    order = np.lexsort((cols["index"], cols["window_end"], cols["window_start"], rank,
                        cols["fire_time"]))  # fmt: skip
    state = pointwise_min(list(holds.values()))
    return rounds, state, {f: c[order] for f, c in cols.items()}, [i for i, _ in ran.values()]


_HOLD_VALUES = st.sampled_from([3, 5, 5, 9, 20, MAX_TIMESTAMP])


@st.composite
def _holds(draw):
    """Partitions' own holds: step series over a few shared times (ties within and
    across partitions), initials included."""
    parts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True))
    holds = {}
    for p in parts:
        times = np.array(sorted(draw(st.sets(st.integers(0, 12), max_size=6))), np.int64)
        values = np.array([draw(_HOLD_VALUES) for _ in times], np.int64)
        holds[p] = StepSeries(times, values, draw(_HOLD_VALUES))
    return holds


def _function(s):
    """A series as its function (one representation), or None."""
    return None if s is None else s.compressed()


def _equal(a, b):
    a, b = _function(a), _function(b)
    if a is None or b is None:
        return a is b
    same = a.initial == b.initial and np.array_equal(a.times, b.times)
    return same and np.array_equal(a.values, b.values)


@settings(max_examples=200, deadline=None)
@given(_holds(), _holds())
def test_the_others_table_gives_each_partition_the_minimum_of_the_others(holds, last):
    table = OthersMin.of(holds)
    for p in range(8):  # members and partitions without a hold
        assert _equal(table.of_partition(p), others_min(holds, p)), p
    # settled: every member's minimum of the others unchanged since the last round
    for old in (last, {p: holds[p] for p in holds}, None):
        before = None if old is None else OthersMin.of(old)
        want = (old is None or set(old) == set(holds)) and all(
            _equal(_or_none(others_min(holds, p)),
                   _NONE if old is None else _or_none(others_min(old, p)))
            for p in holds
        )  # fmt: skip
        assert table.settled(before) == want


_NONE = StepSeries(np.empty(0, np.int64), np.empty(0, np.int64), MAX_TIMESTAMP)


def _or_none(s):
    return _NONE if s is None else s


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    window=st.sampled_from(WINDOWS),
    trigger=st.sampled_from(TRIGGERS),
    mode=st.sampled_from(list(AccumulationMode)),
    combiner=st.sampled_from(list(TimestampCombiner)),
    lateness=st.sampled_from([0, 45 * SECOND]),
    watermark=st.sampled_from(["perfect", "bounded:5s", "percentile:0.6"]),
    n_parts=st.integers(2, 5),
    fast=st.booleans(),
)
def test_a_partition_on_its_own_instants_runs_as_on_the_whole_grid(
    seed, window, trigger, mode, combiner, lateness, watermark, n_parts, fast
):
    """Key partitions each run over their own instants, in rounds, give the local
    simulator's panes (every field, in its order) and state hold (µs)."""
    strategy = WindowingStrategy(
        window, trigger, mode, allowed_lateness=lateness, timestamp_combiner=combiner,
        allow_unsafe_triggers=True,
    )  # fmt: skip
    spec = GroupByWindow("g", "in", strategy, "sum")
    pipe = Pipeline([Source("in", watermark), spec])
    trace = _trace(seed, 200, 7)
    local = simulate(pipe, {"in": trace}, fast=fast).stages["g"]
    stream, _ = source_input(pipe.stage("in"), trace)
    _, state, panes, _ = keyed_stage(spec, stream, local.input_watermark, n_parts, fast)
    assert local.panes is not None and len(local.panes) == panes["key"].size
    for f, got in panes.items():
        want = getattr(local.panes, f)
        assert np.array_equal(want, got, equal_nan=want.dtype.kind == "f"), f
    held = local.holds[STATE_HOLD]
    assert np.array_equal(held.times, state.times) and np.array_equal(held.values, state.values)


def test_a_partition_holds_fewer_instants_than_the_stage():
    """Sessions of 40 keys in 8 partitions under the perfect watermark: each partition's
    grid is well under the stage's (the whole grid: every arrival and watermark step),
    and the result is still the local one."""
    strategy = WindowingStrategy(Sessions(30 * SECOND), AfterWatermark())
    spec = GroupByWindow("g", "in", strategy, "sum")
    pipe = Pipeline([Source("in", "perfect"), spec])
    trace = _trace(7, 4_000, 40, tick=1)
    local = simulate(pipe, {"in": trace}).stages["g"]
    stream, _ = source_input(pipe.stage("in"), trace)
    iw = local.input_watermark
    rounds, state, panes, grids = keyed_stage(spec, stream, iw, 8, True)
    whole = np.union1d(stream.time, iw.times).size
    assert len(grids) == 8 and max(g.size for g in grids) < whole / 2
    assert rounds >= 2 and panes["key"].size == len(local.panes)
    assert np.array_equal(local.holds[STATE_HOLD].values, state.values)
    # more than its arrivals: the watermark steps before them and those that fire windows
    part = Part(stream, np.arange(len(stream)).reshape(-1, 1))
    mine = dict(split(part, 8, False))[0].stream
    assert partition_grid(strategy, mine, iw).size > np.union1d(mine.time, []).size


def test_a_part_past_one_spark_record_is_refused_naming_its_stage_and_partition(monkeypatch):
    from spark_backend.simulate import parts as keyed_parts

    n = 1000
    stream = Stream(np.arange(n), np.arange(n), np.arange(n) % 7, np.ones(n))
    part = Part(stream, np.zeros((n, 3), np.int64))
    assert record_bytes(part) == n * (4 + 3) * 8
    objects = Part(Stream(stream.time, stream.timestamp, stream.key.astype(object),
                          stream.value), part.place)  # fmt: skip
    assert record_bytes(objects) > record_bytes(part)
    monkeypatch.setattr(keyed_parts, "RECORD_LIMIT", n * 7 * 8)
    assert bounded(part, 3, "sessions") is part  # (at the limit: kept)
    monkeypatch.setattr(keyed_parts, "RECORD_LIMIT", n * 7 * 8 - 1)
    with pytest.raises(ValueError, match=r"stage 'sessions': key partition 3 holds 1,000 "
                       r"elements .*--partitions"):  # fmt: skip
        bounded(part, 3, "sessions")
