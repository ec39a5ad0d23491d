"""In-band vs out-of-band propagation: the designs' defining behaviours, with numbers."""

import math

import numpy as np
import pytest

from theory.experiments.propagation import (
    InBand,
    OutOfBand,
    in_band_times,
    in_band_times_by_valve,
    propagation,
    run_in_band,
    run_out_of_band,
)
from theory.time import MILLISECOND, SECOND


@pytest.mark.parametrize("depth,p", [(1, 1), (2, 3), (3, 5), (4, 8)])
def test_vectorised_equals_valve_event_by_event(depth, p):
    design = InBand(hop_jitter=0.7)
    a = in_band_times(design, depth, p, 12_345, np.random.default_rng(depth * 100 + p))
    b = in_band_times_by_valve(design, depth, p, 12_345, np.random.default_rng(depth * 100 + p))
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x, y)


@pytest.fixture(scope="module")
def table():
    return propagation(depths=(1, 5, 20), parallelisms=(1, 10, 100), trials=5).rows


def cell(rows, design, depth, p, scenario="steady"):
    return next(
        r
        for r in rows
        if (r.design, r.depth, r.parallelism, r.scenario) == (design, depth, p, scenario)
    )


def test_in_band_latency_grows_with_depth_out_of_band_does_not(table):
    ib = [cell(table, "in-band", d, 10).latency for d in (1, 5, 20)]
    ob = [cell(table, "out-of-band", d, 10).latency for d in (1, 5, 20)]
    assert ib[0] < ib[1] < ib[2]
    # each hop costs at least the hop delay
    assert ib[2] - ib[0] >= 19 * MILLISECOND
    assert max(ob) - min(ob) <= OutOfBand().report_interval  # depth does not matter


def test_traffic_in_band_grows_cubically_out_of_band_linearly(table):
    ib10, ib100 = (cell(table, "in-band", 5, p).messages_per_second for p in (10, 100))
    ob10, ob100 = (cell(table, "out-of-band", 5, p).messages_per_second for p in (10, 100))
    assert ib100 / ib10 > 900
    assert ob100 / ob10 == pytest.approx(10)


def test_idle_partition(table):
    ib = cell(table, "in-band", 5, 10, "idle_partition")
    assert ib.latency >= InBand().idle_timeout
    never = run_in_band(
        InBand(idle_timeout=None), 5, 10, "idle_partition", np.random.default_rng(0)
    )
    assert math.isinf(never.latency)
    ob = cell(table, "out-of-band", 5, 10, "idle_partition")
    assert ob.latency == cell(table, "out-of-band", 5, 10).latency


def test_worker_failure_holds_safely_until_reassignment(table):
    ob = cell(table, "out-of-band", 5, 10, "worker_failure")
    design = OutOfBand()
    assert ob.latency >= design.reassign_delay
    assert ob.latency <= design.lease_duration + design.reassign_delay + 2 * design.report_interval
    assert ob.safe
    ib = cell(table, "in-band", 5, 10, "worker_failure")
    assert ib.latency >= InBand().restart_delay


def test_stale_holder_is_fenced(table):
    ob = cell(table, "out-of-band", 5, 10, "stale_holder")
    assert ob.rejected_reports > 0 and ob.safe
    assert math.isnan(cell(table, "in-band", 5, 10, "stale_holder").latency)


def test_bad_parameters():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="depth"):
        run_in_band(InBand(), 0, 1, "steady", rng)
    with pytest.raises(ValueError, match="unknown scenario 'x'"):
        run_out_of_band(OutOfBand(), 1, 1, "x", rng)
    with pytest.raises(ValueError, match="emit_interval"):
        InBand(emit_interval=0)
    with pytest.raises(ValueError, match="trials"):
        propagation(trials=0)
    with pytest.raises(TypeError, match="trials"):
        propagation(trials=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="parallelism"):
        run_out_of_band(OutOfBand(), 1, 100_001, "steady", rng)
    with pytest.raises(ValueError, match="hop_jitter"):
        InBand(hop_jitter=-0.5)
    with pytest.raises(TypeError, match="report_interval"):
        OutOfBand(report_interval=0.5 * SECOND)  # type: ignore[arg-type]
    # the boundaries themselves are valid designs and workloads
    edge = run_in_band(InBand(emit_interval=1, hop_delay=0, hop_jitter=0.0), 1000, 1, "steady", rng)
    assert edge.latency == 0  # a tick every µs, hops that cost nothing


@pytest.mark.parametrize("p", [2, 7, 16])
def test_message_model_valve_advances_on_every_update_in_steady_state(p):
    """The traffic model's premise, checked on a real valve: with P channels emitting
    ``t - bound`` at their own periodic ticks, the valve's output advances on (almost)
    every update, so a task forwards ~P watermarks per interval."""
    from theory.flink.valve import StatusWatermarkValve

    interval = 200 * MILLISECOND
    rng = np.random.default_rng(p)
    phases = rng.permutation(interval)[:p]
    valve = StatusWatermarkValve(p)
    updates = sorted(
        (int(ph) + k * interval, ch) for ch, ph in enumerate(phases) for k in range(50)
    )
    emitted = 0
    for t, ch in updates:
        emitted += sum(1 for x in valve.input_watermark(ch, t - SECOND) if isinstance(x, int))
    per_interval = emitted / 50
    assert p - 1 <= per_interval <= p


def test_latency_follows_the_design_parameters():
    rng = lambda: np.random.default_rng(5)  # noqa: E731
    slow = run_in_band(InBand(emit_interval=2 * SECOND), 5, 10, "steady", rng())
    fast = run_in_band(InBand(emit_interval=20 * MILLISECOND), 5, 10, "steady", rng())
    assert fast.latency < slow.latency
    far = run_in_band(InBand(hop_delay=50 * MILLISECOND), 5, 10, "steady", rng())
    near = run_in_band(InBand(hop_delay=1 * MILLISECOND), 5, 10, "steady", rng())
    assert far.latency - near.latency >= 5 * 49 * MILLISECOND
    a = run_out_of_band(OutOfBand(report_interval=5 * SECOND), 5, 10, "steady", rng())
    b = run_out_of_band(OutOfBand(report_interval=SECOND), 5, 10, "steady", rng())
    assert b.latency < a.latency
    c = run_out_of_band(OutOfBand(aggregator_latency=2 * SECOND), 5, 10, "steady", rng())
    d = run_out_of_band(OutOfBand(aggregator_latency=0), 5, 10, "steady", rng())
    assert c.latency - d.latency == 2 * SECOND


def _brute_hop(design, sent, p, rng):
    """A hop drawn as the model states it: every channel's delay, parallelism² draws."""
    e = rng.exponential(1.0, (sent.size, p))
    return sent[:, None] + np.round(design.hop_delay + design.hop_delay * design.hop_jitter * e)


@pytest.mark.parametrize("spread", [0, 400, 200_000])
def test_thinned_hop_has_the_law_of_every_channel_drawn(spread):
    """The last arrival per task (drawn from the channels above max(sent) + d only) and
    the full matrix built around it have the law of the brute-force hop: two-sample KS
    tests on 4,000 draws each, and a changed jitter is told apart (the test can fail)."""
    from scipy.stats import ks_2samp

    from theory.experiments.propagation import _arrival_matrix, _last_arrivals

    design = InBand(hop_jitter=0.5)
    rng = np.random.default_rng(spread)
    sent = 1_000_000 + rng.integers(0, spread + 1, 40)
    fast = np.concatenate([_last_arrivals(design, sent, 40, rng)[0] for _ in range(100)])
    brute = np.concatenate([_brute_hop(design, sent, 40, rng).max(axis=0) for _ in range(100)])
    assert ks_2samp(fast, brute).pvalue > 1e-3
    other = InBand(hop_jitter=0.6)
    wider = np.concatenate([_brute_hop(other, sent, 40, rng).max(axis=0) for _ in range(100)])
    assert ks_2samp(fast, wider).pvalue < 1e-6
    # the full matrix: its column maxima are the last arrivals, its entries the model's
    hop = _last_arrivals(design, sent, 40, rng)
    matrix = _arrival_matrix(design, sent, *hop, np.random.default_rng(1))
    assert np.array_equal(matrix.max(axis=0), hop[0])
    entries = np.concatenate(
        [
            _arrival_matrix(design, sent, *_last_arrivals(design, sent, 40, rng), rng)[
                :, :3
            ].ravel()
            for _ in range(30)
        ]
    )
    assert ks_2samp(entries, _brute_hop(design, sent, 90, rng).ravel()).pvalue > 1e-3


def test_grid_cells_equal_runs_one_by_one():
    """propagation() draws each trial once at the deepest depth and shares it across
    depths and scenarios; every cell equals its own runs at that depth."""
    rows = propagation(depths=(1, 4), parallelisms=(3, 50), trials=3, seed=7).rows
    for r in rows:
        if r.design != "in-band":
            continue
        runs = [
            run_in_band(InBand(), r.depth, r.parallelism, r.scenario,
                        np.random.default_rng([7, r.parallelism, t])).latency
            for t in range(3)
        ]  # fmt: skip
        assert r.latency == pytest.approx(np.median(runs), nan_ok=True)


def test_no_jitter_hops_cost_exactly_the_hop_delay():
    design = InBand(hop_jitter=0.0, hop_delay=7)
    times = in_band_times(design, 3, 4, 100, np.random.default_rng(0))
    for k in range(1, 4):
        assert np.all(times[k] == times[0].max() + 7 * k)
    valve = in_band_times_by_valve(design, 3, 4, 100, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(times, valve, strict=True))
