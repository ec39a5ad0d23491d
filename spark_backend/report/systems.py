"""The report's cross-system section: one trace through the beam, flink and spark
profiles (:func:`theory.experiments.systems.compare_systems`), a table per system, the
convention behind each difference, and the window latency per system.

Every system takes its bound from the first ``bounded:<duration>`` strategy; Flink's
periodic interval is 200 ms (its default) with ``withIdleness`` of
:data:`FLINK_IDLE_TIMEOUT`, and Spark's trigger 1 s. A trace with a ``partition`` column
is compared with each partition an input (``inputs="partition"``: per-input watermarks
combined by the minimum, an input that stops holding it except under Flink's idleness),
one with more than :data:`~theory.spark.trace.MAX_INPUTS` partitions or none as one
input. The comparison runs in numpy on the driver: ``analyze`` collects at most
:data:`MAX_ROWS` rows (the first by arrival) of a larger trace, and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from spark_backend.report import plots
from spark_backend.report.report import Report, seconds
from spark_backend.report.tables import with_units
from theory.arrays import sorted_unique
from theory.data.trace import Trace
from theory.experiments.systems import Comparison, check_systems, compare_systems
from theory.spark.trace import MAX_INPUTS
from theory.time import MILLISECOND, SECOND, parse_duration

__all__ = [
    "FLINK_IDLE_TIMEOUT",
    "MAX_ROWS",
    "bound_of",
    "fire_time_difference",
    "inputs_of",
    "systems_section",
    "trace_of",
]

LOG = logging.getLogger("watermarks")

#: The most rows ``analyze --systems`` collects to the driver.
MAX_ROWS: Final[int] = 2_000_000
FLINK_INTERVAL: Final[int] = 200 * MILLISECOND
SPARK_TRIGGER: Final[int] = 1 * SECOND
#: Flink's ``withIdleness`` in the report: an input without rows for a minute is idle.
FLINK_IDLE_TIMEOUT: Final[int] = 60 * SECOND


def bound_of(strategies: Sequence[str]) -> int:
    """The bound (µs) of the first ``bounded:<duration>`` strategy; ``ValueError`` if
    there is none."""
    for s in strategies:
        kind, _, arg = s.partition(":")
        if kind == "bounded" and arg:
            return parse_duration(arg)
    raise ValueError(
        "--systems needs a bounded:<duration> strategy (every system takes its bound from it), "
        f"got --strategies {','.join(strategies)}"
    )


def trace_of(df: Any, rows: int) -> tuple[Trace, str]:
    """The trace's event time, arrival time, key and partition (if it has them) on the
    driver (the first :data:`MAX_ROWS` by arrival if larger), and a note saying which
    rows."""
    cols = ["event_time", "arrival_time"] + [c for c in ("key", "partition") if c in df.columns]
    note = f"all {rows:,} rows"
    if rows > MAX_ROWS:
        df = df.orderBy("arrival_time").limit(MAX_ROWS)
        note = f"the first {MAX_ROWS:,} of {rows:,} rows by arrival"
    pdf = df.select(*cols).toPandas()
    n = len(pdf)
    key = pdf["key"].to_numpy() if "key" in pdf else np.zeros(n, dtype=np.int64)
    if key.dtype.kind not in "iu":
        key = key.astype(str).astype(object)
    trace = Trace(
        pdf["event_time"].to_numpy(np.int64),
        pdf["arrival_time"].to_numpy(np.int64),
        key,
        np.zeros(n, dtype=np.float64),
        pdf["partition"].to_numpy(np.int64) if "partition" in pdf else None,
    )
    return trace, note


def inputs_of(trace: Trace) -> tuple[str | None, str]:
    """``compare_systems``' ``inputs`` for ``trace`` (each partition an input if it has a
    partition column with at most :data:`MAX_INPUTS` values, else None: one input) and
    a phrase saying which."""
    if trace.partition is None:
        return None, "one input (the trace has no partition column)"
    k = int(sorted_unique(trace.partition).size)
    if k > MAX_INPUTS:
        return None, f"one input (its {k:,} partitions are more than {MAX_INPUTS} inputs)"
    return "partition", f"each of its {k} partitions an input"


def fire_time_difference(c: Comparison) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per system after the first (the reference): for each window both fired, its end
    and how much later this system fires it than the reference (µs; negative: earlier;
    0 where they fire alike), windows in (key, start) order."""
    w = c.windows()
    names = list(c.outcomes)
    order = np.lexsort((np.asarray(w["start"], np.int64), np.asarray(w["key"]).astype(str)))
    end = np.asarray(w["end"], dtype=np.int64)[order]
    ref = np.asarray(w[f"{names[0]}_fire_time"], dtype=np.int64)[order]
    out = {}
    for name in names[1:]:
        fire = np.asarray(w[f"{name}_fire_time"], dtype=np.int64)[order]
        both = (fire >= 0) & (ref >= 0)
        out[name] = (end[both], fire[both] - ref[both])
    return out


def _latency_figure(path: Path, c: Comparison, origin: int | None = None) -> Path:
    """Left: the distribution (ECDF) of window latency per system, in seconds; right:
    where the systems differ, per window, how much later each fires it than the first
    system (:func:`fire_time_difference`, s) against the window's end, in event time
    from ``origin`` (µs; default the earliest window end)."""
    fig, (ax, where) = plt.subplots(1, 2, figsize=(13, 4.5), dpi=110)
    drawn = False
    raw = {name: np.sort(np.asarray(o.latency)) for name, o in c.outcomes.items()}
    same = {n: g for g in plots.coinciding(raw) for n in g}  # identical: styled apart, named
    diff = fire_time_difference(c)
    ends = np.concatenate([o.end for o in c.outcomes.values()])
    start = plots.origin_of(ends) if origin is None else origin
    ax_t = plots.TimeAxis(start, int(ends.max() - ends.min()) if ends.size else 1)
    ref = next(iter(c.outcomes))
    for i, (name, lat) in enumerate(raw.items()):
        color = plots.COLORS[i % len(plots.COLORS)]
        if lat.size:
            others = [o for o in same.get(name, []) if o != name]
            ax.step(
                lat / 1e6, np.arange(1, lat.size + 1) / lat.size, where="post", color=color,
                ls=plots.STYLES[i % len(plots.STYLES)], lw=max(0.8, 2.4 - 0.5 * i),
                label=name + (f" (= {', '.join(others)})" if others else ""),
            )
            drawn = True
        if name in diff:
            end, d = diff[name]
            apart, far = int(np.count_nonzero(d)), int(np.count_nonzero(np.abs(d) > 1e6))
            where.scatter(
                ax_t(end), d / 1e6, s=4, color=color, alpha=0.6, rasterized=True,
                label=f"{name}: {apart:,} of {d.size:,} windows at another time, "
                f"{far:,} by over 1 s",
            )
    where.axhline(0, color="0.3", lw=0.8)
    ax.set_xscale("symlog", linthresh=1.0)  # above 1 s: a few stragglers' windows are far
    where.set_yscale("symlog", linthresh=1.0)
    labels = [
        (
            "window latency (s after the window's end, log above 1 s)",
            "fraction of windows fired",
            "When each system fires its windows",
        ),
        (
            f"event time of the window's end ({ax_t.unit} {ax_t.since})",
            f"fire time minus {ref}'s (s, log above 1 s)",
            f"Where the systems differ from {ref}, per window",
        ),
    ]
    for axis, (x, y, title) in zip((ax, where), labels, strict=True):
        axis.set(xlabel=x, ylabel=y, title=title)
        axis.grid(alpha=0.3)
        if drawn:
            axis.legend(fontsize=8)
        else:
            axis.text(0.5, 0.5, "no window fired", ha="center", transform=axis.transAxes)
    return plots.save_figure(fig, path)


#: The windows shown in the page (all are in ``systems_windows.csv``).
SHOWN_WINDOWS: Final[int] = 15


def _windows_table(report: Report, c: Comparison) -> None:
    """Which windows fire and when: per window, each system's latency and count."""
    w = c.windows()
    table: dict[str, list[object]] = {"key": w["key"], "window start": w["start"]}
    formats: dict[str, Callable[[object], str]] = {}
    for name in c.outcomes:
        fire = np.asarray(w[f"{name}_fire_time"], dtype=np.int64)
        end = np.asarray(w["end"], dtype=np.int64)
        table[f"{name} latency"] = np.where(fire >= 0, fire - end, np.nan).tolist()
        table[f"{name} count"] = w[f"{name}_count"]
        formats[f"{name}_latency_us"] = seconds
    latencies = [f"{name} latency" for name in c.outcomes]
    table = with_units(table, durations=latencies, times=["window start"])
    table = {k.replace(" ", "_"): v for k, v in table.items()}
    differ = w["same"].count(False)
    report.table(
        "systems_windows",
        "Which windows fire and when",
        table,
        f"Per window (key, start): how long after its end each system fires it "
        f"(– never, or no row of it was on time there) and with what count. {differ:,} of "
        f"{len(w['key']):,} windows differ between systems; they come first, and the page "
        f"shows the first {SHOWN_WINDOWS}.",
        formats,
        show_rows=SHOWN_WINDOWS,
    )


def systems_section(
    report: Report,
    trace: Trace,
    systems: Sequence[str],
    bound: int,
    window_size: int,
    note: str,
    *,
    origin: int | None = None,
) -> Comparison:
    """Compare ``systems`` on ``trace`` and add the tables and the figure (its times
    from ``origin``, µs: the report's; default the earliest fire time)."""
    names = check_systems(systems)
    inputs, how = inputs_of(trace)
    LOG.info("comparing %s on %d events, %s", ",".join(names), len(trace), how)
    c = compare_systems(
        trace,
        bound=bound,
        window_size=window_size,
        flink_interval=FLINK_INTERVAL,
        spark_trigger=SPARK_TRIGGER,
        flink_idle_timeout=FLINK_IDLE_TIMEOUT,
        inputs=inputs,
        systems=names,
    )
    t = c.table()
    report.table(
        "systems",
        "One trace through " + ", ".join(names),
        with_units(
            {
                "system": t["system"],
                "windows_fired": t["windows_fired"],
                "rows_dropped_late": t["rows_dropped"],
                "latency_p50": [v * 1e6 for v in t["latency_p50_s"]],  # type: ignore[operator]
                "latency_p90": [v * 1e6 for v in t["latency_p90_s"]],  # type: ignore[operator]
            },
            durations=["latency_p50", "latency_p90"],
        ),
        f"Per-key counts in fixed {window_size / 1e6:g} s windows, fired once at the "
        f"watermark, late rows dropped; bound {bound / 1e6:g} s (Beam max seen - bound, "
        "Flink BoundedOutOfOrderness every 200 ms with withIdleness "
        f"{FLINK_IDLE_TIMEOUT / 1e6:g} s, Spark withWatermark with a 1 s trigger and "
        f"multipleWatermarkPolicy=min); {note}; {how}: each input has its own watermark "
        "and the job's is their minimum.",
        {"latency_p50_us": seconds, "latency_p90_us": seconds},
    )
    _windows_table(report, c)
    a = c.attribution()
    if a["source"]:
        report.table(
            "systems_attribution",
            "Which convention causes each difference",
            {
                "from": a["source"],
                "to": a["target"],
                "convention switched": a["convention"],
                "to value": [str(v) for v in a["value"]],
                "windows it explains": a["removed_windows"],
                "rows it explains": a["removed_rows"],
                "windows left": a["windows_left"],
                "rows left": a["rows_left"],
            },
            "Starting from the first system's conventions, each is switched in turn to the "
            "second's: when the watermark moves (per element, periodic, per micro-batch), "
            "the watermark late rows are tested against (Spark: the previous batch's), "
            "milliseconds (Spark), the multiple-input policy, and idle handling (Flink's "
            "withIdleness leaves an input without rows out of the minimum; Beam and Spark "
            "let an input that stopped hold it, and Spark holds it at 0 until every input "
            "has sent data). A window differs if it fires at another time or with another "
            "count. After the last switch no difference is left.",
        )
    report.figure(
        "Window latency per system",
        lambda p: _latency_figure(p, c, origin),
        "systems.png",
        "How long after its end each window fires, per system (left), and where the "
        f"systems differ (right): per window both fire, how much later each fires it than "
        f"{names[0]}, against the window's end; 0 where they fire it alike. Sub-second "
        "differences come from when the watermark moves (Flink's 200 ms timer, Spark's 1 s "
        "trigger); minutes and hours from an input that stopped, which holds Beam's and "
        "Spark's watermark while Flink's withIdleness lets it move on.",
    )
    return c
