"""One trace through the beam, flink and spark profiles, and which convention causes
each difference (all times µs).

Every system here runs the same job: one input or several, each with a bounded
out-of-orderness watermark (``bound``: Beam's ``max seen - bound``, Flink's
``BoundedOutOfOrdernessWatermarks``, Spark's ``withWatermark(delay)``), a count per key in
fixed windows fired once at the watermark, late rows dropped (no allowed lateness).

``<`` against ``<=`` causes no difference: Flink's watermark means no more ``ts <= W``
and its generator emits ``max - bound - 1``, which is Beam's and Spark's ``max - bound``
under ``ts < W``; converted to that core convention at the edge
(:mod:`theory.flink.conventions`; ``tests/theory/experiments/test_compare_systems.py``
checks Flink's conventions against its own ``<=`` window operator) the three fire a window
at the same test, ``W >= end``, and drop a row at the same test, ``end <= W``. What differs are
:class:`Conventions`:

- ``timing``: when the watermark moves: after every arrival instant (``element``, Beam),
  at periodic timers (``periodic``, Flink's ``autoWatermarkInterval``), or at the end of
  each micro-batch of a ``ProcessingTime`` trigger, used from the next batch (``batch``,
  Spark; a window is emitted at the end of the batch that evicts it);
- ``late_filter``: late rows are tested against the watermark in force when they are read
  (``current``) or against the previous batch's (``previous-batch``, Spark);
- ``millis``: the watermark is whole milliseconds (Spark truncates event times and the
  delay) or µs;
- with several inputs (``inputs``: one per row, e.g. the trace's partitions), each input
  has its own watermark (its max seen - bound; an input with no data yet counts as 0, as
  Spark populates it, which no window of event times ``>= 0`` can pass either) and the
  job's is their ``policy``: ``min`` (Beam's Flatten, Flink's channels, Spark's default
  ``multipleWatermarkPolicy``) or ``max`` (Spark's other choice);
- ``idle_timeout``: how an input that sends nothing is handled. None (Beam's bounded
  estimator behind a Flatten, Spark, Flink by default): an input that stopped holds the
  minimum forever, and one with no data yet holds it at its start (Spark: at 0, measured
  on Spark 4.3; Beam, Flink: at ``MIN``; the same for event times ``>= 0``). A duration:
  Flink's ``withIdleness(idle_timeout)``, where an input without rows for longer is left
  out of the minimum until it emits again (:mod:`theory.experiments.idleness`; it needs
  the ``periodic`` timing and the ``min`` policy; with one input it changes nothing).

:func:`profile_under` runs the job under any conventions (vectorised);
:func:`compare_systems` runs the three systems' conventions, tabulates them, and for each
pair switches the conventions one at a time from the first system's to the second's,
counting the differences (windows fired at another time or with another count, rows
dropped by one and not the other) left after each switch. The last switch leaves 0.
``tests/theory/experiments/test_compare_systems.py`` checks each system's conventions
against its own profile (``theory.simulate``, ``theory.flink.run_flink_windows``,
``theory.spark.trace.spark_trace_profile``) on the chapter-3 trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final

import numpy as np

from theory.arrays import sorted_unique
from theory.columns import check_duration, key_column, same_length, time_column
from theory.data.trace import Trace
from theory.experiments.html import html_table
from theory.experiments.idleness import flink_idle_watermarks
from theory.spark.conventions import check_policy
from theory.spark.trace import batch_profile, combined_max, input_codes
from theory.time import MILLISECOND, SECOND
from theory.windowing.windows import FixedWindows

__all__ = [
    "SWITCH_ORDER",
    "SYSTEMS",
    "Comparison",
    "Conventions",
    "Outcome",
    "Step",
    "check_systems",
    "compare_systems",
    "differences",
    "profile_under",
    "system_conventions",
]

TIMINGS: Final[tuple[str, ...]] = ("element", "periodic", "batch")
LATE_FILTERS: Final[tuple[str, ...]] = ("current", "previous-batch")
#: The order in which :func:`compare_systems` switches conventions.
#: ``idle_timeout`` goes last when the target system has idleness (Flink), first when it
#: has none, so that idleness is only ever combined with Flink's periodic timing.
SWITCH_ORDER: Final[tuple[str, ...]] = (
    "timing",
    "late_filter",
    "millis",
    "policy",
    "idle_timeout",
)


@dataclass(frozen=True)
class Conventions:
    """How a system computes and applies its watermark (see the module docstring).
    ``interval`` is the periodic interval or the trigger interval (µs, unused for
    ``element``); ``batch_duration`` how long a micro-batch runs (µs); ``policy``
    combines several inputs' watermarks; ``idle_timeout`` (µs, or None for none) is
    Flink's ``withIdleness``."""

    timing: str
    interval: int = 0
    batch_duration: int = 0
    late_filter: str = "current"
    millis: bool = False
    policy: str = "min"
    idle_timeout: int | None = None

    def __post_init__(self) -> None:
        check_policy(self.policy)
        if self.timing not in TIMINGS:
            raise ValueError(f"unknown timing {self.timing!r}: expected one of {TIMINGS}")
        if self.late_filter not in LATE_FILTERS:
            raise ValueError(
                f"unknown late_filter {self.late_filter!r}: expected one of {LATE_FILTERS}"
            )
        if self.late_filter == "previous-batch" and self.timing != "batch":
            raise ValueError("late_filter='previous-batch' needs timing='batch'")
        check_duration(self.interval, "interval", allow_zero=self.timing == "element")
        check_duration(self.batch_duration, "batch_duration")
        if self.idle_timeout is not None:
            check_duration(self.idle_timeout, "idle_timeout", allow_zero=False)
            if self.timing != "periodic" or self.policy != "min":
                raise ValueError(
                    "idle_timeout (Flink's withIdleness) needs timing='periodic' and "
                    "policy='min': idleness is checked at Flink's periodic timers and "
                    "feeds its valve's minimum"
                )


#: The systems compared, in their default order.
SYSTEMS: Final[tuple[str, ...]] = ("beam", "flink", "spark")


def check_systems(systems: object) -> list[str]:
    """``systems`` as a list of distinct names of :data:`SYSTEMS` (``ValueError`` naming an
    unknown or repeated one; a comma-separated string is accepted)."""
    if isinstance(systems, str):
        systems = [s.strip() for s in systems.split(",") if s.strip()]
    if not isinstance(systems, Sequence) or not systems:
        raise ValueError(f"systems must name at least one of {SYSTEMS}, got {systems!r}")
    names = [str(s) for s in systems]
    for n in names:
        if n not in SYSTEMS:
            raise ValueError(f"unknown system {n!r}: expected some of {SYSTEMS}")
    if len(set(names)) != len(names):
        raise ValueError(f"systems repeats a name: {names}")
    return names


def system_conventions(
    *,
    flink_interval: int = 200 * MILLISECOND,
    spark_trigger: int = 1 * SECOND,
    spark_batch_duration: int = 0,
    spark_policy: str = "min",
    flink_idle_timeout: int | None = None,
) -> dict[str, Conventions]:
    """The conventions of ``beam``, ``flink`` and ``spark`` with these settings."""
    return {
        "beam": Conventions("element"),
        "flink": Conventions("periodic", flink_interval, idle_timeout=flink_idle_timeout),
        "spark": Conventions(
            "batch",
            spark_trigger,
            spark_batch_duration,
            "previous-batch",
            millis=True,
            policy=spark_policy,
        ),
    }


@dataclass(frozen=True)
class Outcome:
    """The job's result under some conventions: per window that took a non-late row
    (sorted by key, start) its ``count`` and ``fire_time`` (-1 if it never fired), and per
    row of the trace whether it was ``dropped`` late."""

    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    fire_time: np.ndarray
    dropped: np.ndarray

    @property
    def latency(self) -> np.ndarray:
        """``fire_time - end`` (µs) of the windows that fired."""
        fired = self.fire_time >= 0
        return self.fire_time[fired] - self.end[fired]


def _windows(
    key: np.ndarray, start: np.ndarray, size: int, live: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(key, start, count, first row) per distinct (key, start) of the live rows, sorted;
    rows are in arrival order, so the first row is the earliest."""
    idx = np.flatnonzero(live)
    if idx.size == 0:
        e = np.zeros(0, np.int64)
        return key[:0], e, e, e
    order = np.lexsort((idx, start[idx], key[idx]))
    k, s = key[idx][order], start[idx][order]
    head = np.ones(k.size, dtype=bool)
    head[1:] = (k[1:] != k[:-1]) | (s[1:] != s[:-1])
    first = idx[order][head]
    counts = np.diff(np.append(np.flatnonzero(head), k.size))
    return k[head], s[head], counts.astype(np.int64), first


def profile_under(
    event_time: np.ndarray,
    arrival_time: np.ndarray,
    key: np.ndarray,
    conventions: Conventions,
    *,
    bound: int,
    window_size: int,
    inputs: object = None,
) -> Outcome:
    """The job of the module docstring under ``conventions``: ``bound`` and
    ``window_size`` in µs, event times ``>= 0``; ``inputs`` (one label per row, or None
    for one input) splits the trace into inputs combined by ``conventions.policy``."""
    et = time_column(event_time, "event_time")
    at = time_column(arrival_time, "arrival_time")
    keys = key_column(key)
    same_length("event_time", et.size, arrival_time=at, key=keys)
    if et.size and int(et.min()) < 0:
        raise ValueError("event_time: the comparison takes event times >= 0")
    b = check_duration(bound, "bound")
    size = check_duration(window_size, "window_size", allow_zero=False)
    codes = input_codes(inputs, et.size)
    c = conventions
    if c.timing == "batch":
        r = batch_profile(
            et,
            at,
            keys,
            FixedWindows(size),
            b,
            c.interval,
            c.batch_duration,
            unit=1000 if c.millis else 1,
            late_previous=c.late_filter == "previous-batch",
            inputs=codes,
            policy=c.policy,
        )
        return Outcome(
            r.window_key, r.window_start, r.window_end, r.window_count, r.emit_time, r.row_dropped
        )
    order = np.argsort(at, kind="stable")
    e_s, a_s = et[order], at[order]
    c_s = None if codes is None else codes[order]
    instants, values = _watermark_steps(e_s, a_s, c_s, c, b)
    # a row is tested against the watermark of the last instant strictly before it
    before = np.searchsorted(instants, a_s, side="left") - 1
    start = e_s - e_s % size
    end = start + size
    w_before = np.where(before >= 0, values[np.maximum(before, 0)], np.iinfo(np.int64).min)
    late = end <= w_before
    k_w, s_w, counts, _ = _windows(keys[order], start, size, ~late)
    e_w = s_w + size
    fire_at = np.searchsorted(values, e_w, side="left")
    fire_time = (
        np.where(fire_at < instants.size, instants[np.minimum(fire_at, instants.size - 1)], -1)
        if instants.size
        else np.full(e_w.size, -1, dtype=np.int64)
    )
    dropped = np.empty(et.size, dtype=bool)
    dropped[order] = late
    return Outcome(k_w, s_w, e_w, counts, fire_time.astype(np.int64), dropped)


def _watermark_steps(
    e_s: np.ndarray, a_s: np.ndarray, codes: np.ndarray | None, c: Conventions, bound: int
) -> tuple[np.ndarray, np.ndarray]:
    """The instants (µs, non-decreasing) at which the watermark of ``element`` or
    ``periodic`` timing moves, and its value there (core convention, non-decreasing);
    rows in arrival order."""
    unit = 1000 if c.millis else 1
    if c.idle_timeout is not None and codes is not None:
        return flink_idle_watermarks(
            e_s // unit * unit,
            a_s,
            codes,
            bound=bound // unit * unit,
            interval=c.interval,
            idle_timeout=c.idle_timeout,
        )
    seen = combined_max(e_s // unit, codes, c.policy)
    if c.timing == "element":
        instants = sorted_unique(a_s)
    else:
        # the timers after arrivals: Flink's fire at interval, 2 * interval, ...
        instants = sorted_unique(np.maximum(-(-a_s // c.interval), 1) * c.interval)
    last_read = np.searchsorted(a_s, instants, side="right") - 1
    return instants, (seen[last_read] - bound // unit) * unit


def _by_window(o: Outcome) -> dict[tuple[object, int], tuple[int, int]]:
    keys = zip(o.key.tolist(), o.start.tolist(), strict=True)
    return dict(zip(keys, zip(o.fire_time.tolist(), o.count.tolist(), strict=True), strict=True))


def _order(w: tuple[object, int]) -> tuple[str, object, int]:
    """A sort key for (key, start) whatever the key's type (ints before strings)."""
    k = w[0]
    return (type(k).__name__, k, w[1])


def differences(a: Outcome, b: Outcome) -> tuple[int, int]:
    """(windows, rows) that differ: a window in one and not the other, or fired at
    another time or with another count; a row dropped by one and not the other.
    Vectorised: both outcomes' windows sorted together by (key, start), a window in both
    is two neighbours."""
    key = np.concatenate([a.key, b.key])
    if key.dtype.kind not in "iu":
        key = np.unique(key, return_inverse=True)[1].reshape(-1)
    start = np.concatenate([a.start, b.start])
    fire = np.concatenate([a.fire_time, b.fire_time])
    count = np.concatenate([a.count, b.count])
    order = np.lexsort((start, key))
    k, s, f, c = key[order], start[order], fire[order], count[order]
    both = (k[1:] == k[:-1]) & (s[1:] == s[:-1])  # each outcome has a window once
    equal = both & (f[1:] == f[:-1]) & (c[1:] == c[:-1])
    windows = key.size - int(both.sum()) - int(equal.sum())
    rows = int(np.count_nonzero(a.dropped != b.dropped))
    return windows, rows


@dataclass(frozen=True)
class Step:
    """One switch on the way from system ``source`` to ``target``: the convention
    switched, its new value, and the differences with ``target`` left after it."""

    source: str
    target: str
    convention: str
    value: object
    windows_left: int
    rows_left: int


@dataclass(frozen=True)
class Comparison:
    """The systems' outcomes, a summary table, and the attribution steps."""

    outcomes: dict[str, Outcome] = field(repr=False)  # arrays: not shown in a repr
    conventions: dict[str, Conventions]
    steps: list[Step] = field(repr=False)

    def table(self) -> dict[str, list[object]]:
        """Per system: windows fired, rows dropped, latency p50/p90 (s)."""
        t: dict[str, list[object]] = {
            "system": [],
            "windows_fired": [],
            "rows_dropped": [],
            "latency_p50_s": [],
            "latency_p90_s": [],
        }
        for name, o in self.outcomes.items():
            lat = o.latency / SECOND
            t["system"].append(name)
            t["windows_fired"].append(int(np.count_nonzero(o.fire_time >= 0)))
            t["rows_dropped"].append(int(o.dropped.sum()))
            t["latency_p50_s"].append(float(np.median(lat)) if lat.size else float("nan"))
            t["latency_p90_s"].append(float(np.quantile(lat, 0.9)) if lat.size else float("nan"))
        return t

    def _repr_html_(self) -> str:
        """:meth:`table` as HTML (a notebook shows it)."""
        return html_table(self.table(), "one trace through each system's conventions")

    def windows(self) -> dict[str, list[object]]:
        """Which windows fire and when, per window that took a non-late row in some
        system: ``key``, ``start``, ``end`` (µs), per system ``<name>_fire_time`` (µs,
        -1 if it never fired or took no row there) and ``<name>_count`` (0 if none), and
        ``same`` (every system fired it at one time with one count). Windows that differ
        come first, then the rest, each part sorted by (key, start)."""
        per = {name: _by_window(o) for name, o in self.outcomes.items()}
        ends: dict[tuple[object, int], int] = {}
        for o in self.outcomes.values():
            ends.update(
                zip(zip(o.key.tolist(), o.start.tolist(), strict=True), o.end.tolist(), strict=True)
            )
        rows = [(w, [p.get(w, (-1, 0)) for p in per.values()]) for w in sorted(ends, key=_order)]
        rows.sort(key=lambda r: len(set(r[1])) == 1)  # stable: differing windows first
        t: dict[str, list[object]] = {"key": [], "start": [], "end": []}
        for name in per:
            t[f"{name}_fire_time"] = []
            t[f"{name}_count"] = []
        t["same"] = []
        for w, got in rows:
            t["key"].append(w[0])
            t["start"].append(w[1])
            t["end"].append(ends[w])
            for name, (fire, count) in zip(per, got, strict=True):
                t[f"{name}_fire_time"].append(fire)
                t[f"{name}_count"].append(count)
            t["same"].append(len(set(got)) == 1)
        return t

    def attribution(self) -> dict[str, list[object]]:
        """The steps as a column table: for each pair, the differences each switch
        removed (``removed_windows``, ``removed_rows``) and those left after it."""
        t: dict[str, list[object]] = {
            k: []
            for k in (
                "source",
                "target",
                "convention",
                "value",
                "removed_windows",
                "removed_rows",
                "windows_left",
                "rows_left",
            )
        }
        prev: dict[tuple[str, str], tuple[int, int]] = {}
        for s in self.steps:
            pair = (s.source, s.target)
            w0, r0 = prev.get(pair, differences(self.outcomes[s.source], self.outcomes[s.target]))
            t["source"].append(s.source)
            t["target"].append(s.target)
            t["convention"].append(s.convention)
            t["value"].append(s.value)
            t["removed_windows"].append(w0 - s.windows_left)
            t["removed_rows"].append(r0 - s.rows_left)
            t["windows_left"].append(s.windows_left)
            t["rows_left"].append(s.rows_left)
            prev[pair] = (s.windows_left, s.rows_left)
        return t


def _switch_order(goal: Conventions) -> tuple[str, ...]:
    """:data:`SWITCH_ORDER`, with ``idle_timeout`` first when ``goal`` has none."""
    if goal.idle_timeout is not None:
        return SWITCH_ORDER
    return ("idle_timeout", *(n for n in SWITCH_ORDER if n != "idle_timeout"))


def compare_systems(
    trace: Trace,
    *,
    bound: int,
    window_size: int,
    flink_interval: int = 200 * MILLISECOND,
    spark_trigger: int = 1 * SECOND,
    spark_batch_duration: int = 0,
    spark_policy: str = "min",
    flink_idle_timeout: int | None = None,
    inputs: str | None = None,
    systems: Sequence[str] = SYSTEMS,
) -> Comparison:
    """``trace`` through the ``systems``' conventions (beam, flink, spark) with one
    ``bound`` (µs) and ``window_size`` (µs) fixed windows; for each pair, in the order
    given, the conventions switched one at a time (:data:`SWITCH_ORDER`) from the first
    system's to the second's, with the differences left after each switch (0 after the
    last). ``inputs="partition"`` makes each of the trace's partitions an input (their
    watermarks combined by min, or by ``spark_policy`` on Spark); None: one input.
    ``flink_idle_timeout`` (µs) gives Flink ``withIdleness`` (None: none, Flink's
    default), which matters with several inputs only."""
    if inputs not in (None, "partition"):
        raise ValueError(f"inputs must be None or 'partition', got {inputs!r}")
    if inputs == "partition" and trace.partition is None:
        raise ValueError("inputs='partition': the trace has no partition column")
    labels = trace.partition if inputs == "partition" else None
    every = system_conventions(
        flink_interval=flink_interval,
        spark_trigger=spark_trigger,
        spark_batch_duration=spark_batch_duration,
        spark_policy=spark_policy,
        flink_idle_timeout=flink_idle_timeout,
    )
    names = check_systems(systems)
    convs = {n: every[n] for n in names}
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]

    def run(c: Conventions) -> Outcome:
        return profile_under(
            trace.event_time,
            trace.arrival_time,
            trace.key,
            c,
            bound=bound,
            window_size=window_size,
            inputs=labels,
        )

    outcomes = {name: run(c) for name, c in convs.items()}
    steps: list[Step] = []
    for source, target in pairs:
        current = convs[source]
        goal = convs[target]
        for name in _switch_order(goal):
            if name == "timing":
                new = replace(
                    current,
                    timing=goal.timing,
                    interval=goal.interval,
                    batch_duration=goal.batch_duration,
                    late_filter="current" if goal.timing != "batch" else current.late_filter,
                )
                value: object = f"{goal.timing}" + (
                    f" every {goal.interval} µs" if goal.interval else ""
                )
            elif name == "idle_timeout":
                new = replace(current, idle_timeout=goal.idle_timeout)
                value = (
                    "none (a stopped input holds)"
                    if goal.idle_timeout is None
                    else f"withIdleness {goal.idle_timeout} µs"
                )
            else:
                new = replace(current, **{name: getattr(goal, name)})
                value = getattr(goal, name)
            if new == current:
                continue
            current = new
            w, r = differences(run(current), outcomes[target])
            steps.append(Step(source, target, name, value, w, r))
    return Comparison(outcomes, convs, steps)
