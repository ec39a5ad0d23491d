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
    assert SECOND
