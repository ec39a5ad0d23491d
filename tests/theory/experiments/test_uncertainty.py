"""Intervals over seeds (Student's t) and bootstrap intervals over windows
(theory.experiments.uncertainty), against their formulas (docs/researcher.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.experiments.uncertainty import (
    IntervalTable,
    _percentiles_of_counts,
    bootstrap_windows,
    over_seeds,
    seed_table,
    sweep_seeds,
    t_interval,
)

finite = st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False)


def test_t_interval_worked_example() -> None:
    """Values 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.3026527 (the tables' 4.303),
    half-width 4.3026527 / √3 = 2.4841377."""
    mean, low, high = t_interval([1, 2, 3])
    assert mean == 2.0
    assert high - mean == pytest.approx(4.302652729749462 / math.sqrt(3), rel=1e-9)
    assert mean - low == pytest.approx(high - mean, rel=1e-12)


def test_one_seed_has_no_interval_and_a_missing_value_no_mean() -> None:
    mean, low, high = t_interval([5.0])
    assert mean == 5.0 and math.isnan(low) and math.isnan(high)
    assert all(math.isnan(x) for x in t_interval([1.0, None]))  # type: ignore[list-item]
    assert all(math.isnan(x) for x in t_interval([1.0, math.inf]))


@given(st.lists(finite, min_size=2, max_size=30), finite)
@settings(max_examples=60)
def test_t_interval_holds_the_mean_and_moves_with_a_shift(values, shift) -> None:
    mean, low, high = t_interval(values)
    tol = 1e-9 * (1 + max(abs(v) for v in values))
    assert low <= mean + tol and mean <= high + tol
    assert min(values) - tol <= mean <= max(values) + tol
    m2, l2, h2 = t_interval([v + shift for v in values])
    tol2 = 1e-6 * (1 + abs(shift) + max(abs(v) for v in values))
    assert m2 == pytest.approx(mean + shift, abs=tol2)
    assert h2 - l2 == pytest.approx(high - low, abs=tol2)


@given(st.integers(0, 2**63 - 1), st.integers(1, 40))
@settings(max_examples=30)
def test_the_sweep_starts_at_the_base_seed_and_repeats_no_seed(base, n) -> None:
    seeds = sweep_seeds(base, n)
    assert seeds[0] == base and len(seeds) == n == len(set(seeds))
    assert seeds == sweep_seeds(base, n)
    assert sweep_seeds(base, n + 1)[:n] == seeds


@pytest.mark.parametrize("n", [0, -1])
def test_no_seeds_is_refused(n) -> None:
    with pytest.raises(ValueError, match="seeds must be an integer >= 1"):
        sweep_seeds(0, n)


def test_seed_table_names_units_and_leaves_times_and_flags_out() -> None:
    tables = [
        {"strategy": ["a", "b"], "late_count": [1, 3], "latency_us": [10, 11],
         "end_us": [5, 6], "end_utc": ["x", "y"], "on_frontier": [True, False]},
        {"strategy": ["a", "b"], "late_count": [3, 3], "latency_us": [20, None],
         "end_us": [5, 6], "end_utc": ["x", "y"], "on_frontier": [False, False]},
    ]
    t = seed_table(tables, [0, 7])
    assert list(t.columns) == [
        "strategy", "seeds", "late_count_mean", "late_count_ci_low", "late_count_ci_high",
        "latency_mean_us", "latency_ci_low_us", "latency_ci_high_us",
    ]
    assert t["late_count_mean"] == [2.0, 3.0] and t["late_count_ci_low"][1] == 3.0
    # 10 and 20 µs: mean 15, s = √50, t(0.975, 1) = 12.7062047
    half = 12.706204736174694 * math.sqrt(50) / math.sqrt(2)
    assert t["latency_mean_us"][0] == 15
    assert t["latency_ci_high_us"][0] == round(15 + half)
    assert isinstance(t["latency_ci_low_us"][0], int)
    assert t["latency_mean_us"][1] is None  # a seed without a value: blank
    with pytest.raises(ValueError, match="seed 7: strategy rows"):
        seed_table([tables[0], {**tables[1], "strategy": ["b", "a"]}], [0, 7])


def test_over_seeds_runs_each_seed_once_and_shows_as_a_table() -> None:
    ran: list[int] = []

    def run(seed: int) -> dict[str, list[object]]:
        ran.append(seed)
        return {"strategy": ["s"], "x": [float(seed % 7)]}

    t = over_seeds(run, 3, base_seed=4)
    assert ran == list(sweep_seeds(4, 3))
    assert t["x_mean"] == [float(np.mean([s % 7 for s in ran]))]
    html = t._repr_html_()
    assert html.startswith("<table>") and "<th>x_ci_low</th>" in html and "3 seeds" in html
    assert "x_mean" in str(t)
    assert over_seeds(run, 1)["x_ci_low"] == [None]


@given(st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=30), st.data())
@settings(max_examples=60)
def test_percentiles_of_counts_are_numpys_on_the_repeated_values(values, data) -> None:
    v = np.sort(np.asarray(values, dtype=np.float64))
    counts = np.asarray(
        [data.draw(st.lists(st.integers(0, 3), min_size=v.size, max_size=v.size))
         for _ in range(3)], dtype=np.int64,
    )
    got = _percentiles_of_counts(v, counts, (50, 90, 99))
    for row, c in zip(got, counts, strict=True):
        m = np.repeat(v, c)
        want = np.percentile(m, [50, 90, 99]) if m.size else [np.nan] * 3
        np.testing.assert_array_equal(row, want)


def _windows(n: int, strategies=("a", "b"), seed: int = 1) -> dict[str, list[object]]:
    rng = np.random.default_rng(seed)
    rows: dict[str, list[object]] = {c: [] for c in (
        "strategy", "key", "window_start_us", "completeness_at_first_firing", "latency_us",
        "fired_by_end_of_input", "elements", "final_count")}
    for s in strategies:
        for i in range(n):
            rows["strategy"].append(s)
            rows["key"].append(i % 3)
            rows["window_start_us"].append(i * 1000)
            rows["completeness_at_first_firing"].append(float(rng.choice([0.5, 1.0])))
            rows["latency_us"].append(None if i % 7 == 0 else int(rng.integers(0, 10**6)))
            rows["fired_by_end_of_input"].append(i == n - 1)
            rows["elements"].append(4)
            rows["final_count"].append(int(rng.integers(2, 5)))
    return rows


def test_bootstrap_estimates_are_the_strategies_tables() -> None:
    """The estimate column is the metric on the windows as they are: the mean
    completeness, the share complete, numpy's linear latency percentiles over the fired
    windows not fired by the end of input."""
    w = _windows(50, ("a",))
    t = bootstrap_windows(w, 200, seed=3)
    comp = np.asarray(w["completeness_at_first_firing"])
    lat = np.asarray([x for x, e in zip(w["latency_us"], w["fired_by_end_of_input"], strict=True)
                      if x is not None and not e], dtype=np.float64)
    assert t["completeness_mean"] == [comp.mean()]
    assert t["complete_fraction"] == [np.mean(comp >= 1)]
    for q in (50, 90, 99):
        assert t[f"window_latency_p{q}_us"] == [round(float(np.percentile(lat, q)))]
    assert t["windows"] == [50] and t["resamples"] == [200]
    for m in ("completeness_mean", "window_latency_p50"):
        unit = "_us" if "latency" in m else ""
        assert t[f"{m}_ci_low{unit}"][0] <= t[f"{m}_ci_high{unit}"][0]  # type: ignore[operator]
    assert "final_completeness_mean" not in t.columns
    assert "final_completeness_mean_ci_low" in bootstrap_windows(w, 20, late_firings=True).columns


def test_bootstrap_is_seeded_paired_and_blind_to_row_order() -> None:
    w = _windows(40)
    a = bootstrap_windows(w, 100, seed=5)
    assert a.columns == bootstrap_windows(w, 100, seed=5).columns
    assert a.columns != bootstrap_windows(w, 100, seed=6).columns
    order = np.random.default_rng(0).permutation(len(w["strategy"]))
    shuffled = {c: [v[i] for i in order] for c, v in w.items()}
    b = bootstrap_windows(shuffled, 100, seed=5)
    # the strategies come in another order; each one's row is the same
    for col in a.columns:
        assert dict(zip(a["strategy"], a[col], strict=True)) == dict(
            zip(b["strategy"], b[col], strict=True)), col


def test_identical_windows_give_a_point_interval_and_end_of_input_counts_on_request() -> None:
    w = _windows(30, ("a",))
    w["completeness_at_first_firing"] = [0.75] * 30
    t = bootstrap_windows(w, 50)
    assert t["completeness_mean_ci_low"] == t["completeness_mean_ci_high"] == [0.75]
    w["latency_us"] = [10] * 29 + [10**9]
    w["fired_by_end_of_input"] = [False] * 29 + [True]
    assert bootstrap_windows(w, 50)["window_latency_p99_ci_high_us"] == [10]
    assert bootstrap_windows(w, 50, include_end_of_input=True)["window_latency_p99_us"][0] > 10


def test_the_bootstrap_interval_of_a_mean_is_about_the_normal_one() -> None:
    """For a mean over many windows the 2.5th-97.5th percentile interval of the
    resampled means approaches mean ± 1.96·σ/√n (the central limit theorem)."""
    n = 2000
    rng = np.random.default_rng(11)
    comp = rng.random(n)
    w = {"strategy": ["a"] * n, "key": [0] * n, "window_start_us": list(range(n)),
         "completeness_at_first_firing": comp.tolist(), "latency_us": [1] * n,
         "fired_by_end_of_input": [False] * n, "elements": [1] * n, "final_count": [1] * n}
    t = bootstrap_windows(w, 2000, seed=2)
    half = 1.959963984540054 * comp.std() / math.sqrt(n)
    assert t["completeness_mean_ci_low"][0] == pytest.approx(comp.mean() - half, abs=0.1 * half)
    assert t["completeness_mean_ci_high"][0] == pytest.approx(comp.mean() + half, abs=0.1 * half)


@pytest.mark.parametrize("bad", [0, -3, True])
def test_no_resamples_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="resamples must be an integer >= 1"):
        bootstrap_windows(_windows(3), bad)


def test_interval_table_in_arrow_keeps_integer_microseconds() -> None:
    t = IntervalTable("t", {"strategy": ["a"], "x_mean_us": [None], "y": [0.5], "n": [3]})
    arrow = t.to_arrow()
    assert str(arrow.schema.field("x_mean_us").type) == "int64"
    assert str(arrow.schema.field("y").type) == "double"
    assert str(arrow.schema.field("n").type) == "int64"
