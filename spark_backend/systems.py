"""The report's cross-system section: one trace through the beam, flink and spark
profiles (:func:`theory.experiments.systems.compare_systems`), a table per system, the
convention behind each difference, and the window latency per system.

Every system takes its bound from the first ``bounded:<duration>`` strategy; Flink's
periodic interval is 200 ms (its default) and Spark's trigger 1 s. The comparison runs in
numpy on the driver: ``analyze`` collects at most :data:`MAX_ROWS` rows (the first by
arrival) of a larger trace, and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from spark_backend import plots
from spark_backend.report import Report, seconds
from theory.data.trace import Trace
from theory.experiments.systems import Comparison, check_systems, compare_systems
from theory.time import MILLISECOND, SECOND, parse_duration

__all__ = ["MAX_ROWS", "bound_of", "systems_section", "trace_of"]

LOG = logging.getLogger("watermarks")

#: The most rows ``analyze --systems`` collects to the driver.
MAX_ROWS: Final[int] = 2_000_000
FLINK_INTERVAL: Final[int] = 200 * MILLISECOND
SPARK_TRIGGER: Final[int] = 1 * SECOND


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
    """The trace's event time, arrival time and key on the driver (the first
    :data:`MAX_ROWS` by arrival if larger), and a note saying which rows."""
    cols = ["event_time", "arrival_time"] + (["key"] if "key" in df.columns else [])
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
    )
    return trace, note


def _latency_figure(path: Path, c: Comparison) -> Path:
    """The distribution (ECDF) of window latency per system, in seconds."""
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    drawn = False
    raw = {name: np.sort(np.asarray(o.latency)) for name, o in c.outcomes.items()}
    same = {n: g for g in plots.coinciding(raw) for n in g}  # identical: styled apart, named
    for i, (name, lat) in enumerate(raw.items()):
        if lat.size:
            others = [o for o in same.get(name, []) if o != name]
            ax.step(
                lat / 1e6, np.arange(1, lat.size + 1) / lat.size, where="post",
                ls=plots.STYLES[i % len(plots.STYLES)], lw=max(0.8, 2.4 - 0.5 * i),
                label=name + (f" (= {', '.join(others)})" if others else ""),
            )
            drawn = True
    # log-scaled above 1 s: a few stragglers' windows stretch the axis far
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("window latency (s after the window's end, log above 1 s)")
    ax.set_ylabel("fraction of windows fired")
    ax.set_title("When each system fires its windows")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no window fired", ha="center", transform=ax.transAxes)
    return plots.save_figure(fig, path)


def systems_section(
    report: Report,
    trace: Trace,
    systems: Sequence[str],
    bound: int,
    window_size: int,
    note: str,
) -> Comparison:
    """Compare ``systems`` on ``trace`` and add the tables and the figure."""
    names = check_systems(systems)
    LOG.info("comparing %s on %d events", ",".join(names), len(trace))
    c = compare_systems(
        trace,
        bound=bound,
        window_size=window_size,
        flink_interval=FLINK_INTERVAL,
        spark_trigger=SPARK_TRIGGER,
        systems=names,
    )
    t = c.table()
    report.table(
        "systems",
        "One trace through " + ", ".join(names),
        {
            "system": t["system"],
            "windows fired": t["windows_fired"],
            "rows dropped late": t["rows_dropped"],
            "latency p50": [v * 1e6 for v in t["latency_p50_s"]],  # type: ignore[operator]
            "latency p90": [v * 1e6 for v in t["latency_p90_s"]],  # type: ignore[operator]
        },
        f"Per-key counts in fixed {window_size / 1e6:g} s windows, fired once at the "
        f"watermark, late rows dropped; bound {bound / 1e6:g} s (Beam max seen - bound, "
        "Flink BoundedOutOfOrderness every 200 ms, Spark withWatermark with a 1 s "
        f"trigger); {note}.",
        {"latency p50": seconds, "latency p90": seconds},
    )
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
            "the watermark late rows are tested against (Spark: the previous batch's), and "
            "milliseconds (Spark). A window differs if it fires at another time or with "
            "another count. After the last switch no difference is left.",
        )
    report.figure(
        "Window latency per system",
        lambda p: _latency_figure(p, c),
        "systems.png",
        "How long after its end each window fires, per system.",
    )
    return c
