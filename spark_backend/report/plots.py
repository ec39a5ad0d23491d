"""The report's figures, drawn with matplotlib (Agg) and saved as PNG.

Every axis is in human units: minutes (or hours, for long traces) since one origin,
which each time axis names (``origin=``: the report passes one for all its figures;
without it, the data's earliest time); durations in seconds. Input times are µs. Each
function writes one PNG and returns its path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from theory.experiments.propagation import Outcome
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, format_timestamp

#: The colour cycle: the n-th line of a figure in ``COLORS[n]``.
COLORS = _COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


#: Epoch µs from which times are taken as real dates (1990-01-01): axes then name the start.
_REAL_DATES = 631_152_000_000_000

#: Line styles that keep coinciding watermarks visible (each over the others).
STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 2)))


class TimeAxis:
    """Maps µs to a readable unit relative to ``origin``: minutes, or hours past 3 h.
    :attr:`since` names the origin: its ISO-8601 UTC date when times are real dates."""

    def __init__(self, origin: int, span: int) -> None:
        if origin >= _REAL_DATES:
            origin -= origin % 60_000_000  # a real date: from the whole minute
        self.origin = origin
        hours = span / 3.6e9
        self.scale, self.unit = (3.6e9, "h") if hours > 3 else (6e7, "min")

    def __call__(self, t: np.ndarray) -> np.ndarray:
        return (np.asarray(t, dtype=np.float64) - self.origin) / self.scale

    @property
    def since(self) -> str:
        """``"since 2024-01-01T00:00:00Z"``, or ``"since start (t = 0 µs)"`` for relative
        times."""
        if self.origin >= _REAL_DATES:
            return f"since {format_timestamp(self.origin)}"
        return f"since start (t = {self.origin:,} µs)"


def origin_of(*times: np.ndarray) -> int:
    """The earliest of ``times`` (µs; 0 when all are empty): a figure's default origin."""
    lows = [int(np.min(t)) for t in times if np.size(t)]
    return min(lows, default=0)


def coinciding(curves: Mapping[str, np.ndarray]) -> list[list[str]]:
    """Groups (two or more) of strategies whose sampled curves are identical, in order."""
    groups: dict[bytes, list[str]] = {}
    for name, values in curves.items():
        groups.setdefault(np.asarray(values, dtype=np.int64).tobytes(), []).append(name)
    return [g for g in groups.values() if len(g) > 1]


#: The least factor by which a processing-time tail is compressed: a tail that would be
#: compressed less stays on a linear axis (a "×1.0" compression says nothing).
MIN_COMPRESSION = 2.0


def _tail_scale(ax: Any, right: float, hi: float, unit: str = "") -> None:
    """A broken processing-time axis: linear up to ``right``, the tail to ``hi``
    compressed into the last fifth of the panel, so every arrival stays visible; the
    axis says from where and by what factor. Nothing when the factor would be below
    :data:`MIN_COMPRESSION`."""
    if hi <= right:
        return
    width = max(right - ax.get_xlim()[0], 1e-9)
    k = 0.25 * width / (hi - right)
    if 1 / k < MIN_COMPRESSION:  # the tail fits beside the body: a linear axis shows it
        return

    def forward(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return np.where(x <= right, x, right + (x - right) * k)

    def inverse(y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        return np.where(y <= right, y, right + (y - right) / k)

    lo = ax.get_xlim()[0]
    ax.set_xscale("function", functions=(forward, inverse))
    ticks = [t for t in MaxNLocator(6).tick_values(lo, right) if lo <= t <= right]
    tail = [t for t in MaxNLocator(3).tick_values(right, hi) if right < t <= hi]
    ax.set_xticks(ticks + tail[-2:])
    ax.axvline(right, color="0.3", lw=0.8, ls=(0, (2, 2)))
    ax.text(
        right, 0.02, f" past {right:,.4g} {unit}: compressed ×{1 / k:,.{0 if k < 0.1 else 1}f} →",
        transform=ax.get_xaxis_transform(),
        fontsize=7, color="0.3",
    )


def _show_all(ax: Any, ax_t: TimeAxis, arrivals: np.ndarray, lo: int, hi: int) -> None:
    """The processing-time axis over ``[lo, hi]`` (µs) showing every arrival: when the
    last 0.1% of the arrivals (stragglers) would stretch it by more than 5%, the tail
    beyond their 99.9th percentile goes on a compressed part of the axis, not cut."""
    shown = arrivals[(arrivals >= lo) & (arrivals <= hi)]
    right = int(min(hi, np.percentile(shown, 99.9))) if shown.size > 1000 else hi
    x = ax_t(np.array([lo, hi]))
    ax.set_xlim(x[0], x[1])
    if right < hi and (hi - right) > 0.05 * (right - lo):
        _tail_scale(ax, float(ax_t(np.array([right]))[0]), float(x[1]), ax_t.unit)


def _finite_steps(series: StepSeries, t_end: int) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of a step function for plotting, dropping infinite values."""
    t = np.append(series.times, t_end)
    v = np.append(series.values, series.final())
    ok = (v > MIN_TIMESTAMP) & (v < MAX_TIMESTAMP)
    return t[ok], v[ok]


@dataclass(frozen=True)
class Elements:
    """Elements to draw (µs), each strategy's watermark over them and which are late.

    ``curves`` and ``late`` are keyed by strategy; ``late[name]`` is a mask over the
    elements. ``span`` is the processing-time range ``(lo, hi)`` shown."""

    event_time: np.ndarray
    arrival_time: np.ndarray
    curves: Mapping[str, StepSeries]
    late: Mapping[str, np.ndarray]
    span: tuple[int, int]


def _draw_elements(
    ax: Any, el: Elements, ax_t: TimeAxis, max_points: int, seed: int
) -> None:
    """One panel: the elements, the curves, the late marks, and a legend of what is
    visible in it."""
    n = el.event_time.size
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, max_points, replace=False)) if n > max_points else np.arange(n)
    ax.scatter(
        ax_t(el.arrival_time[idx]),
        ax_t(el.event_time[idx]),
        s=3,
        c="0.6",
        alpha=0.5,
        label="elements",
        rasterized=True,
    )
    lo, hi = el.span
    same = {n: g for g in coinciding(_sampled(el.curves, lo, hi)) for n in g}
    for i, (name, curve) in enumerate(el.curves.items()):
        color = _COLORS[i % len(_COLORS)]
        t, v = _finite_steps(curve, hi)
        others = [o for o in same.get(name, []) if o != name]
        label = f"watermark: {name}" + (f" (= {', '.join(others)})" if others else "")
        ax.step(
            ax_t(t),
            ax_t(v),
            where="post",
            color=color,
            lw=2.6 - 0.35 * (i % 5),
            ls=STYLES[i % len(STYLES)],
            label=label,
        )
        mask = el.late.get(name)
        if mask is not None and mask.any():
            sel = idx[mask[idx]]
            ax.scatter(
                ax_t(el.arrival_time[sel]),
                ax_t(el.event_time[sel]),
                s=9,
                marker="x",
                color=color,
                label=f"late under {name} ({int(mask.sum()):,} shown)",
            )
    x = ax_t(np.array([lo, hi]))
    diagonal = np.linspace(x[0], x[1], 500)  # many points: it follows a broken axis
    ax.plot(diagonal, diagonal, ls=":", c="k", lw=0.8, label="event time = processing time")
    _show_all(ax, ax_t, el.arrival_time, lo, hi)
    ev = el.event_time[(el.arrival_time >= lo) & (el.arrival_time <= hi)]
    if ev.size:
        y = ax_t(np.percentile(ev, [0.5, 100]))
        pad = 0.05 * max(y[1] - y[0], 1e-9)
        ax.set_ylim(y[0] - pad, y[1] + pad)
    ax.set_xlabel(f"processing time ({ax_t.unit} {ax_t.since})")
    ax.set_ylabel(f"event time ({ax_t.unit} {ax_t.since})")
    visible = [(h, lb) for h, lb in zip(*ax.get_legend_handles_labels(), strict=True)
               if shows(ax, h)]
    if visible:
        ax.legend(*zip(*visible, strict=True), loc="upper left", fontsize=7)
    ax.grid(alpha=0.3)


def _in_view(ax: Any, x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> bool:
    """Whether any box ``[x0, x1] x [y0, y1]`` (data units, either order) meets the
    panel's limits."""
    (xa, xb), (ya, yb) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    hit = (
        (np.minimum(x0, x1) <= xb) & (np.maximum(x0, x1) >= xa)
        & (np.minimum(y0, y1) <= yb) & (np.maximum(y0, y1) >= ya)
    )
    return bool(np.any(hit))


def shows(ax: Any, artist: Any) -> bool:
    """Whether any part of a line (its segments; a step line's steps) or any point of a
    scatter lies within the panel's limits: what its legend lists."""
    if hasattr(artist, "get_offsets"):
        pts = np.asarray(artist.get_offsets(), dtype=np.float64).reshape(-1, 2)
        return _in_view(ax, pts[:, 0], pts[:, 0], pts[:, 1], pts[:, 1])
    x = np.asarray(artist.get_xdata(), dtype=np.float64)
    y = np.asarray(artist.get_ydata(), dtype=np.float64)
    if x.size == 0:
        return False
    if artist.get_drawstyle() == "steps-post":  # (x_i, y_i) -> (x_i+1, y_i) -> ...
        x, y = np.repeat(x, 2)[1:], np.repeat(y, 2)[:-1]
    if x.size == 1:
        return _in_view(ax, x, x, y, y)
    ok = ~(np.isnan(x[:-1]) | np.isnan(x[1:]) | np.isnan(y[:-1]) | np.isnan(y[1:]))
    return _in_view(ax, x[:-1][ok], x[1:][ok], y[:-1][ok], y[1:][ok])


def _sampled(
    curves: Mapping[str, StepSeries], lo: int, hi: int, points: int = 2000
) -> dict[str, np.ndarray]:
    """Every curve at ``points`` evenly spaced times over ``[lo, hi]`` (µs)."""
    t = np.linspace(lo, hi, points).astype(np.int64)
    return {name: c.at(t) for name, c in curves.items()}


def event_vs_processing(
    path: Path,
    whole: Elements,
    zoom: Elements | None = None,
    *,
    max_points: int = 20_000,
    seed: int = 0,
    origin: int | None = None,
) -> Path:
    """Figure 3.1/3.10 style: elements as points (processing time vs event time), each
    strategy's watermark as a step line, and each strategy's late elements marked; the
    whole trace, and beside it a ``zoom`` on a short span where the strategies differ.
    Times from ``origin`` (µs; default the earliest element time). A legend lists only
    what is visible in its panel."""
    if origin is None:
        origin = origin_of(whole.event_time, whole.arrival_time)
    panels = [whole] if zoom is None else [whole, zoom]
    fig, axes = plt.subplots(1, len(panels), figsize=(9 * len(panels), 6.5), dpi=100)
    axes = np.atleast_1d(axes)
    for k, (ax, el) in enumerate(zip(axes, panels, strict=True)):
        lo, hi = el.span
        ax_t = TimeAxis(origin, max(hi - origin, 1)) if k == 0 else _zoom_axis(origin, hi - lo)
        _draw_elements(ax, el, ax_t, max_points, seed)
        ax.set_title("the whole trace" if k == 0 else f"zoom: {(hi - lo) / 6e7:.0f} minutes")
    fig.suptitle("Elements, watermarks and late data")
    return save_figure(fig, path)


def _zoom_axis(origin: int, span: int) -> TimeAxis:
    """Minutes since the start, whatever the span (a zoom is short)."""
    ax_t = TimeAxis(origin, span)
    ax_t.scale, ax_t.unit = 6e7, "min"
    return ax_t


def stage_watermarks(
    path: Path,
    times: np.ndarray,
    series: Mapping[str, tuple[np.ndarray, np.ndarray]],
    title: str = "Watermark hold per stage",
    *,
    origin: int | None = None,
) -> Path:
    """Book figure 3.5's point, one panel per stage: the stage's hold, its input minus
    its output watermark (s), over processing time from ``origin`` (µs; default the
    earliest of ``times``). ``series`` maps stage -> (input, output) watermarks sampled
    at ``times`` (µs); where either is infinite (before the stage's first watermark,
    after the end) nothing is drawn. Every time is shown: a straggler tail goes on a
    compressed part of the axis."""
    start = origin_of(times) if origin is None else origin
    ax_t = TimeAxis(start, int(times.max() - times.min()))  # the unit fits the span shown
    fig, axes = plt.subplots(
        len(series), 1, figsize=(10, 1.9 * len(series)), dpi=110, sharex=True, squeeze=False
    )
    for i, (ax, (stage, (iw, ow))) in enumerate(zip(axes[:, 0], series.items(), strict=True)):
        held = stage_hold(iw, ow)
        x = ax_t(times)
        color = _COLORS[i % len(_COLORS)]
        ax.step(x, held, where="post", color=color, lw=1.2, label="input - output watermark")
        ax.fill_between(x, 0, np.nan_to_num(held), step="post", color=color, alpha=0.25)
        top = float(np.nanmax(held)) if np.isfinite(held).any() else 0.0
        what = f"holds up to {top:,.1f} s" if top > 0 else "no hold: output = input"
        ax.set_title(f"{stage}: {what}", fontsize=9, loc="left")
        ax.set_ylabel("hold (s)", fontsize=8)
        ax.set_ylim(-0.04 * max(top, 1.0), max(top * 1.1, 1.0))  # a zero line shows
        ax.grid(alpha=0.3)
        _show_all(ax, ax_t, times, int(times.min()), int(times.max()))
    axes[-1, 0].set_xlabel(f"processing time ({ax_t.unit} {ax_t.since})")
    fig.suptitle(title)
    return save_figure(fig, path)


def stage_hold(input_watermark: np.ndarray, output_watermark: np.ndarray) -> np.ndarray:
    """A stage's hold (s): input minus output watermark (µs) where both are finite,
    NaN elsewhere."""
    iw = np.asarray(input_watermark, dtype=np.int64)
    ow = np.asarray(output_watermark, dtype=np.int64)
    finite = (iw > MIN_TIMESTAMP) & (iw < MAX_TIMESTAMP) & (ow > MIN_TIMESTAMP) & (
        ow < MAX_TIMESTAMP
    )
    return np.where(finite, (iw - np.where(finite, ow, iw)) / 1e6, np.nan)


def lags(
    path: Path,
    times: np.ndarray,
    event_lag: np.ndarray,
    processing_lag: np.ndarray,
    stage: str,
    arrivals: np.ndarray | None = None,
    *,
    origin: int | None = None,
) -> Path:
    """Figure 3.15 style: event-time lag and processing-time lag (seconds) over time
    from ``origin`` (µs; default the earliest of ``times``). The processing-time axis
    past the 99.9th percentile of ``arrivals`` (µs; default ``times``) is compressed
    when that tail is long: every time is shown."""
    start = origin_of(times) if origin is None else origin
    ax_t = TimeAxis(start, int(times.max()) - start)
    fig, ax = plt.subplots(figsize=(10, 4), dpi=110)
    ax.plot(ax_t(times), event_lag / 1e6, lw=1.2, label="event-time lag")
    ax.plot(ax_t(times), processing_lag / 1e6, lw=1.2, label="processing-time lag")
    ax.set_xlabel(f"processing time ({ax_t.unit} {ax_t.since})")
    # log-scaled above 1 s: a minutes-long stuck stage stays visible beside lags of days
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylabel("lag (s, log above 1 s)")
    ax.set_title(f"Event-time and processing-time lag at {stage}")
    shown = times if arrivals is None else arrivals
    _show_all(ax, ax_t, shown, int(times.min()), int(times.max()))
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def frontier(
    path: Path,
    names: Sequence[str],
    latency: Sequence[float],
    completeness: Sequence[float],
    on_frontier: Sequence[bool],
) -> Path:
    """Latency (median, s) against completeness at first firing, one point per strategy,
    with the Pareto frontier joined."""
    lat = np.asarray(latency, dtype=np.float64) / 1e6
    comp = np.asarray(completeness, dtype=np.float64) * 100
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    labels: dict[tuple[float, float], list[str]] = {}
    for i, name in enumerate(names):
        ax.scatter(
            lat[i],
            comp[i],
            s=60,
            color=_COLORS[i % len(_COLORS)],
            marker="o" if on_frontier[i] else "s",
            zorder=3,
        )
        labels.setdefault((float(lat[i]), float(comp[i])), []).append(name)
    for (x, y), same in labels.items():  # strategies at one point share a label
        ax.annotate(" = ".join(same), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    sel = np.flatnonzero(np.asarray(on_frontier))
    order = sel[np.argsort(lat[sel])]
    ax.plot(lat[order], comp[order], ls="--", c="0.4", lw=1, label="Pareto frontier")
    if np.all(lat > 0) and lat.max() / max(lat.min(), 1e-9) > 50:
        ax.set_xscale("log")
    ax.set_xlabel("window latency, median (s after window end)")
    ax.set_ylabel("completeness at first firing (%)")
    ax.set_title("Latency vs completeness")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Lay out, write and close ``fig`` (one home for every figure of the report)."""
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


#: The propagation scenarios drawn, one latency panel each (``stale_holder`` has no
#: in-band counterpart; its out-of-band latency is in the table).
PROPAGATION_SCENARIOS = ("steady", "idle_partition", "worker_failure")


#: The propagation figure's title: it draws a model's runs, not the trace.
MODEL_TITLE = "A model of watermark propagation (seeded simulation, not from the trace)"


def propagation(path: Path, rows: Sequence[Outcome], parallelism: int, depth: int) -> Path:
    """A model, titled so (:data:`MODEL_TITLE`): one latency panel per scenario of
    :data:`PROPAGATION_SCENARIOS` (steady, an idle partition, a worker failure):
    propagation latency against depth (a tick per depth run) at ``parallelism``, per
    design, on one shared log scale; a latency that never ends (``inf``) is marked at
    the top. Last panel: watermark messages per second against parallelism at ``depth``
    (the same in every scenario), log-log."""
    fig, axes = plt.subplots(
        1, len(PROPAGATION_SCENARIOS) + 1, figsize=(16, 4.4), dpi=110,
        gridspec_kw={"width_ratios": [1] * len(PROPAGATION_SCENARIOS) + [1.3]},
    )
    lat_axes, traffic = axes[:-1], axes[-1]
    depths = sorted({r.depth for r in rows})
    for i, design in enumerate(("in-band", "out-of-band")):
        color = _COLORS[i]
        for ax, scenario in zip(lat_axes, PROPAGATION_SCENARIOS, strict=True):
            mine = sorted(
                (r.depth, r.latency)
                for r in rows
                if r.design == design and r.scenario == scenario and r.parallelism == parallelism
            )
            finite = [(d, v / 1e3) for d, v in mine if np.isfinite(v)]
            ax.plot([d for d, _ in finite], [v for _, v in finite], "o-", color=color,
                    label=design)
            for d, v in mine:
                if np.isinf(v):
                    ax.annotate("never", (d, 1.0), xycoords=("data", "axes fraction"),
                                ha="center", va="top", color=color, fontsize=8)
        steady = [r for r in rows if r.design == design and r.scenario == "steady"]
        by_p = sorted((r.parallelism, r.messages_per_second) for r in steady if r.depth == depth)
        traffic.plot([p for p, _ in by_p], [v for _, v in by_p], "o-", color=color,
                     label=design)
    lows = [r.latency / 1e3 for r in rows if np.isfinite(r.latency) and r.latency > 0]
    highs = max(lows, default=1.0)
    for ax, scenario in zip(lat_axes, PROPAGATION_SCENARIOS, strict=True):
        ax.set_yscale("log")
        ax.set_ylim(min(lows, default=1.0) / 2, highs * 2)
        ax.set_xticks(depths)
        ax.set_xlabel("pipeline depth (stages)")
        ax.set_title(scenario.replace("_", " "))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    lat_axes[0].set_ylabel(f"propagation latency, median (ms), parallelism {parallelism}")
    traffic.set_xscale("log")
    traffic.set_yscale("log")
    traffic.set_xlabel("parallelism (tasks per stage)")
    traffic.set_ylabel("watermark messages per second")
    traffic.set_title(f"Traffic at depth {depth} (steady)")
    traffic.grid(alpha=0.3, which="both")
    traffic.legend(fontsize=8)
    fig.suptitle(MODEL_TITLE)
    return save_figure(fig, path)
