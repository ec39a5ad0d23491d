"""The report's figures (issue 13 findings 4 and 9, and the stages figure's straggler
tail): every arrival on the processing-time axis (a compressed tail, not a cut),
coinciding strategies kept visible and named, dates on the axes when times are real
dates. No Spark: the figures are drawn from numpy curves and inspected before saving."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spark_backend.report import plots
from theory.series import StepSeries
from theory.time import HOUR, MINUTE
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
    origin = int(min(times.min(), (w - MINUTE).min()))
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
