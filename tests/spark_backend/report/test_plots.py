"""The report's figures (issue 13 findings 4 and 9, and the stages figure's straggler
tail): every arrival on the processing-time axis (a compressed tail, not a cut),
coinciding strategies kept visible and named, dates on the axes when times are real
dates. No Spark: the figures are drawn from numpy curves and inspected before saving."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from spark_backend.report import plots
from theory.series import StepSeries
from theory.time import HOUR, MINUTE, SECOND
from theory.watermarks.heuristic import bounded_out_of_orderness_curve
from theory.watermarks.perfect import perfect_curve

START = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z, as the demo
STRAGGLER = 250 * HOUR  # the demo's straggler tail


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions draw, kept open instead of saved."""
    kept = []

    def keep(fig, path: Path) -> Path:
        kept.append(fig)
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    yield kept
    for fig in kept:
        plots.plt.close(fig)


def _trace(n: int = 5000, stragglers: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``n`` elements over an hour from START (delays up to 2 min) and ``stragglers``
    arriving 250 h late: under 0.1% of the arrivals, far out."""
    rng = np.random.default_rng(0)
    e = START + np.sort(rng.integers(0, HOUR, n))
    a = e + rng.integers(0, 2 * MINUTE, n)
    a[:stragglers] = e[:stragglers] + STRAGGLER
    return e, a


def _covers_every_time_on_a_compressed_tail(ax, ax_t: plots.TimeAxis, times: np.ndarray) -> None:
    """The axis reaches the last time, and the body (to the 99.9th percentile) keeps at
    least 70% of the panel's width (the tail is compressed, not the body squeezed)."""
    lo, hi = ax.get_xlim()
    assert lo <= ax_t(times.min()) and hi >= ax_t(times.max()) - 1e-9
    assert ax.get_xscale() == "function"
    body = float(ax_t(np.percentile(times, 99.9)))
    px = ax.transData.transform([(lo, 0), (body, 0), (hi, 0)])[:, 0]
    assert (px[1] - px[0]) / (px[2] - px[0]) >= 0.7


def test_the_whole_trace_panel_shows_every_arrival(figures, tmp_path) -> None:
    """Finding 4: the whole-trace panel left off the last 0.1% of arrivals."""
    e, a = _trace()
    curve = perfect_curve(e, a)
    whole = plots.Elements(e, a, {"perfect": curve}, {"perfect": e < curve.before(a)},
                           (int(a.min()), int(a.max())))
    plots.event_vs_processing(tmp_path / "w.png", whole)
    ax = figures[0].axes[0]
    origin = int(min(e.min(), a.min()))
    _covers_every_time_on_a_compressed_tail(ax, plots.TimeAxis(origin, int(a.max()) - origin), a)


def test_the_stages_figure_shows_the_straggler_tail_compressed(figures, tmp_path) -> None:
    """stages.png: the 250 h straggler tail squeezed every stage's watermarks into the
    left edge; every time stays on the axis, the tail compressed."""
    e, a = _trace()
    times = np.unique(a)
    w = perfect_curve(e, a).at(times)
    plots.stage_watermarks(tmp_path / "s.png", times, {"in": (w, w), "out": (w, w - MINUTE)})
    origin = int(times.min())
    ax_t = plots.TimeAxis(origin, int(times.max()) - origin)
    for ax in figures[0].axes:
        _covers_every_time_on_a_compressed_tail(ax, ax_t, times)


def test_a_short_tail_stays_on_a_linear_axis(figures, tmp_path) -> None:
    """A tail shorter than a quarter of the body is not "compressed" (it would be
    stretched, labelled "×0"): the axis stays linear and still shows every arrival."""
    e, a = _trace(stragglers=0)
    a[:3] = a.max() + 10 * MINUTE  # 10 min past an hour's arrivals
    times = np.unique(a)
    w = perfect_curve(e, a).at(times)
    plots.stage_watermarks(tmp_path / "s.png", times, {"in": (w, w)})
    ax = figures[0].axes[0]
    assert ax.get_xscale() == "linear"
    assert not [t for t in ax.texts if "compressed" in t.get_text()]
    origin = int(min(times.min(), w.min()))
    assert ax.get_xlim()[1] >= plots.TimeAxis(origin, int(times.max()) - origin)(times.max())


def test_the_lag_figure_shows_the_tail_compressed(figures, tmp_path) -> None:
    """lags.png: the ramp after the last arrivals (stragglers' windows) took most of the
    panel; it stays, compressed."""
    e, a = _trace()
    times = np.linspace(a.min(), a.max(), 2000).astype(np.int64)  # sampled evenly, as
    lag = times - perfect_curve(e, a).at(times)  # the report's lag series: the arrivals
    plots.lags(tmp_path / "l.png", times, lag, np.zeros_like(lag), "sink", a)  # say where
    ax_t = plots.TimeAxis(int(times.min()), int(times.max() - times.min()))
    _covers_every_time_on_a_compressed_tail(figures[0].axes[0], ax_t, a)


def test_coinciding_strategies_stay_visible_and_named(figures, tmp_path) -> None:
    """Finding 4: strategies that coincide hid one another's lines."""
    e, a = _trace(stragglers=0)
    perfect = perfect_curve(e, a)
    same = StepSeries(perfect.times, perfect.values, perfect.initial)
    bounded = bounded_out_of_orderness_curve(e, a, bound=MINUTE)
    curves = {"perfect": perfect, "percentile:1": same, "bounded:1m": bounded}
    late = {k: e < c.before(a) for k, c in curves.items()}
    span = (int(a.min()), int(a.max()))
    plots.event_vs_processing(tmp_path / "w.png", plots.Elements(e, a, curves, late, span))
    lines = {ln.get_label(): ln for ln in figures[0].axes[0].get_lines()}
    first, second = lines["watermark: perfect (= percentile:1)"], lines[
        "watermark: percentile:1 (= perfect)"
    ]
    assert first.get_linestyle() != second.get_linestyle()
    assert first.get_linewidth() > second.get_linewidth()  # the one below shows round it
    assert "watermark: bounded:1m" in lines
    assert plots.coinciding({k: c.at(a) for k, c in curves.items()}) == [
        ["perfect", "percentile:1"]
    ]


def test_axes_carry_dates_when_times_are_real_dates(figures, tmp_path) -> None:
    """Finding 9: the demo's axes read "since start" from 1970-01-01; real dates are
    named on the axes, relative times are not."""
    e, a = _trace(stragglers=0)
    for shift, since in ((0, "since 2024-01-01T00:00:00Z"), (-START, "since start")):
        es, as_ = e + shift, a + shift
        el = plots.Elements(es, as_, {"perfect": perfect_curve(es, as_)}, {},
                            (int(as_.min()), int(as_.max())))
        plots.event_vs_processing(tmp_path / "w.png", el)
        ax = figures[-1].axes[0]
        assert since in ax.get_xlabel() and since in ax.get_ylabel()


def test_coinciding_systems_stay_visible_and_named(figures, tmp_path) -> None:
    """systems.png: the three systems' latency curves coincided (spark's hid beam's and
    flink's) and a few stragglers' windows squeezed them into the left edge."""
    from spark_backend.report import systems
    from theory import SECOND, Trace, chapter3
    from theory.experiments.systems import compare_systems

    trace = Trace.concat(chapter3.traces(1500, seed=3).values()).sorted_by_arrival()
    c = compare_systems(trace, bound=10 * SECOND, window_size=120 * SECOND,
                        flink_interval=systems.FLINK_INTERVAL)
    systems._latency_figure(tmp_path / "s.png", c)
    ax = figures[0].axes[0]
    assert ax.get_xscale() == "symlog"
    labels = [ln.get_label() for ln in ax.get_lines()]
    styles = [ln.get_linestyle() for ln in ax.get_lines()]
    assert len(set(styles)) == len(styles) == 3
    groups = plots.coinciding({k: np.sort(o.latency) for k, o in c.outcomes.items()})
    for group in groups:
        for name in group:
            assert any(lb.startswith(name + " (= ") for lb in labels), (name, labels)


# -- each figure's point, on the data it draws (issue 33) -----------------------------


def test_the_stages_figure_draws_each_stage_hold(figures, tmp_path) -> None:
    """stages.png's input and output watermarks coincided at its scale: it draws each
    stage's hold, input minus output watermark (s), non-zero exactly where the stage
    holds, zero where it holds nothing, nothing where a watermark is infinite."""
    from theory import MIN_TIMESTAMP

    times = START + np.arange(0, 20 * MINUTE, 10 * SECOND, dtype=np.int64)
    w = times - 30 * SECOND
    held = (times >= START + 5 * MINUTE) & (times < START + 8 * MINUTE)
    out = np.where(held, w - 45 * SECOND, w)
    out[0] = MIN_TIMESTAMP  # no output watermark yet
    plots.stage_watermarks(tmp_path / "s.png", times, {"free": (w, w), "held": (w, out)},
                           origin=START)
    free_ax, held_ax = figures[0].axes
    y_free = free_ax.get_lines()[0].get_ydata()
    y_held = held_ax.get_lines()[0].get_ydata()
    assert np.array_equal(y_free, np.zeros(times.size))
    assert np.isnan(y_held[0])
    assert np.array_equal(y_held[1:] != 0, held[1:]) and np.all(y_held[held] == 45.0)
    assert "no hold" in free_ax.get_title(loc="left")
    assert "45.0 s" in held_ax.get_title(loc="left")


def test_the_stages_figure_of_a_simulation_holds_where_its_watermarks_part(
    figures, tmp_path
) -> None:
    """On the chapter-3 pipeline: each panel's y is the stage's input minus output
    watermark, non-zero where they differ (the session stages hold), zero at the flatten
    stage."""
    from theory import chapter3, simulate

    result = simulate(chapter3.pipeline("bounded:30s"), chapter3.traces(2000, seed=1))
    times = result.times
    series = {n: (r.input_watermark.at(times), r.output_watermark.at(times))
              for n, r in result.stages.items()}
    plots.stage_watermarks(tmp_path / "s.png", times, series, origin=0)
    for ax, (name, (iw, ow)) in zip(figures[0].axes, series.items(), strict=True):
        y = ax.get_lines()[0].get_ydata()
        finite = ~np.isnan(y)
        assert np.array_equal(y[finite] != 0, (iw != ow)[finite]), name
        assert np.allclose(y[finite], (iw - ow)[finite] / 1e6), name
    holds = {n: bool(np.nanmax(ax.get_lines()[0].get_ydata()) > 0)
             for ax, n in zip(figures[0].axes, series, strict=True)}
    assert holds["mobile_sessions"] and holds["console_sessions"] and not holds["flatten"]


def _time_labels(fig) -> list[str]:
    """Every axis label of ``fig`` that is a time (not a duration or a count)."""
    labels = [lb for ax in fig.axes for lb in (ax.get_xlabel(), ax.get_ylabel())]
    return [lb for lb in labels if lb.startswith(("processing time", "event time"))]


def test_every_time_axis_names_the_one_origin(figures, tmp_path) -> None:
    """One origin for every figure, named on each time axis: the stages figure started
    at its earliest watermark (23:59) where the others started at 00:00."""
    from spark_backend.report import systems
    from theory import Trace, chapter3
    from theory.experiments.systems import compare_systems

    e, a = _trace(stragglers=0)
    e, a = e + 30 * SECOND, a + 30 * SECOND  # the data start after the origin
    curve = perfect_curve(e, a)
    el = plots.Elements(e, a, {"perfect": curve}, {}, (int(a.min()), int(a.max())))
    plots.event_vs_processing(tmp_path / "w.png", el, el, origin=START)
    times = np.unique(a)
    w = curve.at(times)
    plots.stage_watermarks(tmp_path / "s.png", times, {"in": (w, w - MINUTE)}, origin=START)
    plots.lags(tmp_path / "l.png", times, times - w, np.zeros_like(w), "in", origin=START)
    trace = Trace.concat(chapter3.traces(800, seed=3).values()).sorted_by_arrival()
    shifted = Trace(trace.event_time + START, trace.arrival_time + START, trace.key,
                    trace.value, trace.partition)
    c = compare_systems(shifted, bound=10 * SECOND, window_size=120 * SECOND)
    systems._latency_figure(tmp_path / "y.png", c, origin=START)
    labels = [lb for fig in figures for lb in _time_labels(fig)]
    assert len(labels) == 4 + 1 + 1 + 1  # two panels of two axes, then one axis each
    assert all("since 2024-01-01T00:00:00Z" in lb for lb in labels), labels
    stage_x = figures[1].axes[0].get_lines()[0].get_xdata()
    assert stage_x[0] == pytest.approx((times[0] - START) / 6e7)  # minutes from START
    assert "since start (t = 0 µs)" in plots.TimeAxis(0, HOUR).since


def test_a_tail_not_worth_compressing_stays_linear(figures, tmp_path) -> None:
    """lags.png said "tail compressed ×1.0": a tail that would be compressed less than
    twofold stays on a linear axis and nothing says "compressed"; a compressed one says
    from where and by a factor of at least two."""
    e, a = _trace(stragglers=0)
    a[:3] = a.max() + 16 * MINUTE  # a quarter of the hour's body past it: ×1.1
    times = np.linspace(a.min(), a.max(), 2000).astype(np.int64)
    lag = times - perfect_curve(e, a).at(times)
    plots.lags(tmp_path / "l.png", times, lag, np.zeros_like(lag), "sink", a)
    ax = figures[-1].axes[0]
    assert ax.get_xscale() == "linear"
    assert not [t for t in ax.texts if "compressed" in t.get_text()]
    e, a = _trace()  # 250 h stragglers
    times = np.linspace(a.min(), a.max(), 2000).astype(np.int64)
    lag = times - perfect_curve(e, a).at(times)
    plots.lags(tmp_path / "l.png", times, lag, np.zeros_like(lag), "sink", a)
    (text,) = [t.get_text() for t in figures[-1].axes[0].texts if "compressed" in t.get_text()]
    factor = float(re.search(r"compressed ×([\d,.]+)", text).group(1).replace(",", ""))
    assert factor >= plots.MIN_COMPRESSION and re.search(r"past [\d.]+ (min|h):", text), text


def test_a_legend_lists_only_what_its_panel_shows(figures, tmp_path) -> None:
    """The zoom's legend listed strategies whose lines lie outside it: each panel lists
    exactly the curves with a point within its limits."""
    e, a = _trace(stragglers=0)
    perfect = perfect_curve(e, a)
    behind = StepSeries(perfect.times, perfect.values - 20 * MINUTE, perfect.initial)
    curves = {"perfect": perfect, "behind": behind}
    whole = plots.Elements(e, a, curves, {}, (int(a.min()), int(a.max())))
    lo, hi = START + 30 * MINUTE, START + 40 * MINUTE
    shown = (a >= lo) & (a <= hi)
    zoom = plots.Elements(e[shown], a[shown], curves, {}, (lo, hi))
    plots.event_vs_processing(tmp_path / "w.png", whole, zoom)
    for ax, (p_lo, p_hi) in zip(figures[0].axes, (whole.span, zoom.span), strict=True):
        listed = {t.get_text() for t in ax.get_legend().get_texts()}
        y_lo, y_hi = ax.get_ylim()
        origin = int(min(e.min(), a.min()))
        for name, curve in curves.items():
            t = np.linspace(p_lo, p_hi, 5000).astype(np.int64)
            ax_t = plots.TimeAxis(origin, 1)
            ax_t.scale = 3.6e9 if ax is figures[0].axes[0] and ax_t.unit == "h" else 6e7
            y = ax_t(curve.at(t))
            inside = bool(np.any((y >= y_lo) & (y <= y_hi)))
            assert (f"watermark: {name}" in listed) == inside, (name, listed)
    zoom_listed = {t.get_text() for t in figures[0].axes[1].get_legend().get_texts()}
    assert "watermark: perfect" in zoom_listed and "watermark: behind" not in zoom_listed
    whole_listed = {t.get_text() for t in figures[0].axes[0].get_legend().get_texts()}
    assert "watermark: behind" in whole_listed


def test_the_propagation_figure_is_titled_a_model(figures, tmp_path) -> None:
    """propagation.png comes from a model, not the trace, and says so; its steady panel
    shows in-band latency growing with depth and out-of-band latency flat."""
    from theory.experiments.propagation import propagation

    rows = propagation(depths=(1, 5, 10), parallelisms=(1, 10), seed=0).rows
    plots.propagation(tmp_path / "p.png", rows, parallelism=10, depth=5)
    fig = figures[0]
    assert "model" in fig._suptitle.get_text() and "not from the trace" in fig._suptitle.get_text()
    steady = {ln.get_label(): ln.get_ydata() for ln in fig.axes[0].get_lines()}
    assert np.all(np.diff(steady["in-band"]) > 0)
    assert np.ptp(steady["out-of-band"]) == 0


def test_the_frontier_joins_the_strategies_on_it(figures, tmp_path) -> None:
    """frontier.png: the dashed line joins exactly the strategies on the frontier, by
    latency."""
    plots.frontier(tmp_path / "f.png", ["a", "b", "c", "d"], [3e6, 1e6, 2e6, 4e6],
                   [0.9, 0.5, 0.95, 0.9], [False, True, True, False])
    (line,) = figures[0].axes[0].get_lines()
    assert line.get_xdata().tolist() == [1.0, 2.0] and line.get_ydata().tolist() == [50, 95]


def test_the_systems_figure_plots_where_the_systems_differ(figures, tmp_path) -> None:
    """systems.png's right panel showed three coinciding curves: it plots, per window
    both fire, how much later each system fires it than the first (s), non-zero exactly
    where their fire times differ (an independent count from the outcomes)."""
    from spark_backend.report import systems
    from theory import Trace, chapter3
    from theory.experiments.systems import compare_systems

    trace = Trace.concat(chapter3.traces(3000, seed=3).values()).sorted_by_arrival()
    c = compare_systems(trace, bound=10 * SECOND, window_size=120 * SECOND,
                        flink_idle_timeout=60 * SECOND, inputs="partition")
    systems._latency_figure(tmp_path / "s.png", c, origin=0)
    right = figures[0].axes[1]
    ref = {(k, s): f for k, s, f in zip(c.outcomes["beam"].key.tolist(),
                                         c.outcomes["beam"].start.tolist(),
                                         c.outcomes["beam"].fire_time.tolist(), strict=True)}
    far = 0
    for scatter, name in zip(right.collections, ("flink", "spark"), strict=True):
        o = c.outcomes[name]
        want = sorted(
            (s + 120 * SECOND, f - ref[(k, s)])
            for k, s, f in zip(o.key.tolist(), o.start.tolist(), o.fire_time.tolist(),
                               strict=True)
            if f >= 0 and ref.get((k, s), -1) >= 0
        )
        xy = np.asarray(scatter.get_offsets())
        scale = 3.6e9 if "(h since" in right.get_xlabel() else 6e7
        got = sorted(zip(np.round(xy[:, 0] * scale).astype(np.int64).tolist(),
                         np.round(xy[:, 1] * 1e6).astype(np.int64).tolist(), strict=True))
        assert got == want, name
        assert any(d != 0 for _, d in want), name
        far += sum(abs(d) > 60 * SECOND for _, d in want)
    assert far  # Flink's idleness fires some windows minutes apart
