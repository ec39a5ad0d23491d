import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.pipeline.graph import (
    GraphError,
    HoldKind,
    StageGraph,
    WatermarkTracker,
    hold_kind,
    hold_name,
)
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP


def diamond() -> StageGraph:
    return StageGraph.from_edges(["a", "b", "c", "d"], [("a", "c"), ("b", "c"), ("c", "d")])


def test_topological_order_and_neighbours():
    g = diamond()
    assert g.order == ("a", "b", "c", "d")
    assert g.sources() == ("a", "b")
    assert g.upstream("c") == ("a", "b")
    assert g.downstream("a") == ("c",)


def test_unknown_stage_is_named():
    with pytest.raises(GraphError, match="unknown stage 'zz'"):
        diamond().upstream("zz")
    with pytest.raises(GraphError, match="'x'"):
        StageGraph({"a": ("x",)})


def test_cycle_is_rejected():
    with pytest.raises(GraphError, match="cycle through: a, b"):
        StageGraph({"a": ("b",), "b": ("a",)})


def test_hold_names():
    assert hold_name(HoldKind.STATE, "pending") == "state:pending"
    assert hold_kind("buffer:out") is HoldKind.OUTPUT_BUFFER
    with pytest.raises(ValueError, match="unknown kind 'bogus'"):
        hold_kind("bogus:x")
    with pytest.raises(ValueError, match="not of the form"):
        hold_kind("nocolon")


def test_why_names_the_hold_and_then_the_source():
    t = WatermarkTracker(diamond())
    t.set_source_watermark("a", 100)
    t.set_source_watermark("b", 50)
    assert t.input_watermark("c") == 50
    t.set_hold("c", "state:pending", 60)
    t.set_source_watermark("b", 200)
    assert t.output_watermark("c") == 60
    assert t.why("d").chain == (("d", "input"), ("c", "state:pending"))
    t.set_hold("c", "state:pending", None)
    assert t.output_watermark("c") == 100
    assert t.why("d").culprit == ("a", "source:watermark")


def test_source_regressions_are_latched_and_counted():
    t = WatermarkTracker(diamond())
    t.set_source_watermark("a", 10)
    t.set_source_watermark("a", 5)
    assert t.input_watermark("a") == 10
    assert t.regressions["a"] == 1


def test_a_hold_below_the_latched_output_counts_once_not_per_apply():
    """The latch rule of theory.watermarks.latch (``Latch._latch_estimate``): a computed
    output below the latched one counts when it is a new value, not again each time an
    unrelated change re-evaluates the same state."""
    t = WatermarkTracker(diamond())
    t.apply({"a": 100, "b": 100})
    assert t.output_watermark("c") == 100
    t.set_hold("c", "state:pending", 40)  # too late: below the output, latched away
    assert t.output_watermark("c") == 100 and t.regressions["c"] == 1
    for w in range(101, 106):  # other stages move; c's computed output is still 40
        t.set_source_watermark("a", w)
    assert t.regressions["c"] == 1
    t.set_hold("c", "state:pending", 30)  # a new, lower value: a second regression
    assert t.regressions["c"] == 2
    t.set_hold("c", "state:pending", None)
    t.apply({"a": 200, "b": 200})
    assert t.output_watermark("c") == 200 and t.regressions["c"] == 2
    assert t.regressions["a"] == t.regressions["b"] == 0


def test_not_a_source():
    with pytest.raises(GraphError, match="not a source"):
        WatermarkTracker(diamond()).set_source_watermark("c", 1)


@st.composite
def random_dag_and_ops(draw):
    n = draw(st.integers(1, 7))
    names = [f"s{i}" for i in range(n)]
    inputs = {}
    for i, name in enumerate(names):
        ups = draw(st.lists(st.sampled_from(names[:i]), unique=True, max_size=3)) if i else []
        inputs[name] = tuple(ups)
    graph = StageGraph(inputs)
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("src"), st.sampled_from(graph.sources()), st.integers(-50, 200)),
                st.tuples(
                    st.just("hold"),
                    st.sampled_from(names),
                    st.one_of(st.none(), st.integers(-50, 200)),
                ),
            ),
            max_size=30,
        )
    )
    return graph, ops


@given(random_dag_and_ops())
def test_tracker_invariants_on_random_dags(case):
    graph, ops = case
    t = WatermarkTracker(graph)
    before = {s: (t.input_watermark(s), t.output_watermark(s)) for s in graph.order}
    for op, stage, value in ops:
        if op == "src":
            t.set_source_watermark(stage, value)
        else:
            t.set_hold(stage, "state:x", value)
        for s in graph.order:
            iw, ow = t.input_watermark(s), t.output_watermark(s)
            # monotonic
            assert iw >= before[s][0] and ow >= before[s][1]
            # output <= input
            assert ow <= iw
            # input = min of upstream outputs (latched: never below it, and equal when they
            # have not regressed, which upstream outputs never do)
            ups = graph.upstream(s)
            if ups:
                assert iw == min(t.output_watermark(u) for u in ups)
            before[s] = (iw, ow)
    for s in graph.order:
        assert MIN_TIMESTAMP <= t.output_watermark(s) <= MAX_TIMESTAMP


def test_equal_holds_are_counted_not_merged():
    t = WatermarkTracker(diamond())
    t.apply({"a": 100, "b": 100}, {("c", "state:x"): 40, ("c", "buffer:y"): 40})
    assert t.output_watermark("c") == 40
    t.set_hold("c", "state:x", None)  # the other hold at 40 still holds
    assert t.output_watermark("c") == 40 and t.why("c").component == "buffer:y"
    t.set_hold("c", "buffer:y", 90)
    assert t.output_watermark("c") == 90 and t.holds("c") == {"buffer:y": 90}


@pytest.mark.parametrize(
    ("sources", "holds", "exc"),
    [
        ({"a": 20}, {("c", "state:p"): 1.5}, TypeError),
        ({"a": 20.0}, {}, TypeError),
        ({"a": MAX_TIMESTAMP + 1}, {}, ValueError),
        ({"a": 20}, {("c", "bogus:p"): 7}, ValueError),
        ({"a": 20}, {("zz", "state:p"): 7}, GraphError),
        ({"c": 20}, {}, GraphError),
    ],
)
def test_a_bad_change_raises_and_changes_nothing(sources, holds, exc):
    t = WatermarkTracker(diamond())
    t.apply({"a": 10, "b": 10}, {("c", "state:p"): 5})
    state = lambda: (  # noqa: E731
        t.holds("c"),
        [(t.input_watermark(s), t.output_watermark(s)) for s in "abcd"],
        dict(t.regressions),
    )
    before = state()
    with pytest.raises(exc):
        t.apply(sources, holds)
    assert state() == before
