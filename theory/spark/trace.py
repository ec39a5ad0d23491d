"""The spark profile over a whole trace (vectorised): Spark's ``ProcessingTime`` trigger,
the watermark each batch uses, the rows it drops and when each window is emitted (all µs).

One input (the trace; or several, by a label per row, each with its own watermark and
the ``multipleWatermarkPolicy``), ``withWatermark(delay)``, a count per (window, key) in
append mode,
as :func:`theory.spark.run_microbatches` models batch by batch (``tests/theory`` checks
that both agree). Processing time is the trace's ``arrival_time``:

- **Triggers** (``ProcessingTimeExecutor``): trigger times are the multiples of
  ``trigger_interval`` since the epoch. A trigger starts a batch when rows arrived
  (``arrival_time <=`` the trigger time, not yet read) or, after a batch that moved the
  watermark, for one **no-data batch**; otherwise nothing runs. A batch lasts
  ``batch_duration`` (0 by default); the next trigger is the next multiple after the
  batch's trigger time, or the batch's end if it ran longer than that.
- The batch at ``t`` reads every row that arrived up to ``t``; its watermark, late rows
  and emission follow :mod:`theory.spark.microbatch`. The sink receives a window at the
  end of the batch that evicts it: ``emit_time = batch start + batch_duration``, and the
  window's latency is ``emit_time - window end``.

Windows are ``FixedWindows`` or ``SlidingWindows`` (``period <= size``); sessions are
modelled batch by batch only (:func:`~theory.spark.run_microbatches`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory.columns import check_bool, check_duration, key_column, same_length, time_column
from theory.spark.conventions import check_delay, check_policy, check_window
from theory.windowing.windows import FixedWindows, Sessions, SlidingWindows

__all__ = [
    "SparkTraceResult",
    "batch_profile",
    "combined_max",
    "input_codes",
    "spark_trace_profile",
    "trigger_schedule",
]


@dataclass(frozen=True)
class SparkTraceResult:
    """What :func:`spark_trace_profile` found (µs throughout).

    Per batch (in order): ``batch_start``, ``batch_end``, ``batch_watermark`` (the one it
    uses), ``batch_late_watermark`` (the previous batch's), ``batch_has_data``.
    Per row (in the trace's order): ``row_batch`` (the batch that read it) and
    ``row_dropped`` (at least one of its windows was late).
    Per window that took a row (sorted by key code, start): ``window_key``,
    ``window_start``, ``window_end``, ``window_count`` (non-late rows), ``emit_batch``
    (-1 if never emitted) and ``emit_time`` (-1 if never); :attr:`latency` is
    ``emit_time - window_end`` for the emitted ones."""

    batch_start: np.ndarray
    batch_end: np.ndarray
    batch_watermark: np.ndarray
    batch_late_watermark: np.ndarray
    batch_has_data: np.ndarray
    row_batch: np.ndarray
    row_dropped: np.ndarray
    window_key: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    window_count: np.ndarray
    emit_batch: np.ndarray
    emit_time: np.ndarray

    @property
    def emitted(self) -> np.ndarray:
        """Which windows were emitted (a bool mask over the windows)."""
        return self.emit_batch >= 0

    @property
    def latency(self) -> np.ndarray:
        """``emit_time - window_end`` (µs) of each emitted window."""
        m = self.emitted
        return self.emit_time[m] - self.window_end[m]

    @property
    def dropped_count(self) -> int:
        """How many rows had a window dropped as late."""
        return int(self.row_dropped.sum())


def trigger_schedule(
    arrival: np.ndarray,
    prefix_max: np.ndarray,
    interval: int,
    duration: int,
    delay: int,
    no_data_batches: bool = True,
    unit: int = 1000,
) -> tuple[list[int], list[int], list[int], list[int], list[bool]]:
    """The batches of a ``ProcessingTime(interval)`` trigger over arrival-sorted rows:
    start (µs), rows read so far (a cut), watermark, late watermark (µs), has data.
    ``prefix_max`` is the running max of the event times and ``delay`` the delay, both in
    ``unit`` µs (1000: Spark's ms; 1: µs); the watermark starts at 0 and is
    ``(max - delay) * unit``. Vectorised when batches end before the next trigger
    (``duration <= interval``); else one Python step per batch (:func:`_schedule_loop`)."""
    if duration > interval:
        return _schedule_loop(arrival, prefix_max, interval, duration, delay, no_data_batches, unit)
    n = arrival.size
    if n == 0:
        return [], [], [], [], []
    boundary = -(-arrival // interval) * interval  # the trigger that reads each row
    new = np.ones(n, dtype=bool)
    new[1:] = boundary[1:] != boundary[:-1]
    d_start = boundary[new]
    d_cut = np.append(np.flatnonzero(new)[1:], n)
    g = np.maximum(prefix_max[d_cut - 1] - delay, 0) * unit  # the watermark after batch k
    d_wm = np.concatenate(([0], g[:-1]))
    # a no-data batch one interval after a data batch that moved the watermark, unless
    # data arrives by then
    gap = np.append(d_start[1:] > d_start[:-1] + interval, True)
    nd = (g > d_wm) & gap if no_data_batches else np.zeros(d_start.size, dtype=bool)
    m = d_start.size + int(nd.sum())
    pos = np.arange(d_start.size) + np.concatenate(([0], np.cumsum(nd)[:-1]))
    starts = np.empty(m, dtype=np.int64)
    cuts = np.empty(m, dtype=np.int64)
    wms = np.empty(m, dtype=np.int64)
    data = np.zeros(m, dtype=bool)
    starts[pos], cuts[pos], wms[pos], data[pos] = d_start, d_cut, d_wm, True
    nd_pos = pos[nd] + 1
    starts[nd_pos], cuts[nd_pos], wms[nd_pos] = d_start[nd] + interval, d_cut[nd], g[nd]
    lates = np.concatenate(([0], wms[:-1]))
    return starts.tolist(), cuts.tolist(), wms.tolist(), lates.tolist(), data.tolist()


def _schedule_loop(
    arrival: np.ndarray,
    prefix_max: np.ndarray,
    interval: int,
    duration: int,
    delay: int,
    no_data_batches: bool = True,
    unit: int = 1000,
) -> tuple[list[int], list[int], list[int], list[int], list[bool]]:
    """:func:`trigger_schedule` one batch at a time, for any batch duration: a batch that
    runs past the next trigger delays it to its end. Each step is O(log n)."""
    n = arrival.size
    starts: list[int] = []
    cuts: list[int] = []
    wms: list[int] = []
    lates: list[int] = []
    data: list[bool] = []
    if n == 0:
        return starts, cuts, wms, lates, data
    t = -(-int(arrival[0]) // interval) * interval  # the first trigger with data
    cut, global_ms, prev_wm = 0, 0, 0
    while True:
        new_cut = int(np.searchsorted(arrival, t, side="right"))
        wm = global_ms * unit
        if new_cut > cut:
            has = True
        elif no_data_batches and starts and wm > wms[-1]:
            has = False
        elif cut < n:  # idle until the trigger that finds the next row
            t = max(t - t % interval + interval, -(-int(arrival[cut]) // interval) * interval)
            continue
        else:
            break
        starts.append(t)
        cuts.append(new_cut)
        wms.append(wm)
        lates.append(prev_wm)
        data.append(has)
        if has:
            global_ms = max(global_ms, int(prefix_max[new_cut - 1]) - delay)
        cut, prev_wm = new_cut, wm
        t = max(t - t % interval + interval, t + duration)
    return starts, cuts, wms, lates, data


#: The most inputs the whole-trace profile combines (each costs a pass over the rows).
MAX_INPUTS = 256


def input_codes(inputs: object, rows: int) -> np.ndarray | None:
    """Each row's input as a code ``0..k-1`` (None for one input): ``inputs`` is None or
    one label per row (ValueError for another length or more than :data:`MAX_INPUTS`)."""
    if inputs is None:
        return None
    labels = np.asarray(inputs)
    same_length("event_time", rows, inputs=labels)
    _, codes = np.unique(labels, return_inverse=True)
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    if codes.size and int(codes.max()) >= MAX_INPUTS:
        raise ValueError(f"inputs: at most {MAX_INPUTS} inputs, got {int(codes.max()) + 1}")
    return codes


def combined_max(event: np.ndarray, codes: np.ndarray | None, policy: str) -> np.ndarray:
    """Per row (in arrival order), the ``policy`` (min or max) over the inputs of each
    input's running maximum event time so far, an input with none yet counting as 0 (as
    Spark populates it); with one input (``codes`` None) the running maximum.
    Non-decreasing. ``codes`` are ``0..k-1``."""
    if event.size == 0:
        return event.copy()
    if codes is None:
        return np.maximum.accumulate(event)
    per_input = [
        np.maximum.accumulate(np.where(codes == p, event, 0)) for p in range(int(codes.max()) + 1)
    ]
    return np.minimum.reduce(per_input) if policy == "min" else np.maximum.reduce(per_input)


def _window_index(
    win: FixedWindows | SlidingWindows, et: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray, int]:
    """(element, or None for one window per row; each window's index ``(start - offset)
    // step``; the step) of each row's windows."""
    if isinstance(win, FixedWindows):
        return None, (et - win.offset) // win.size, win.size  # event times >= 0
    a = win.assign_array(et)
    return a.element, (a.start - win.offset) // win.period, win.period


def _key_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(key of each code, code of each row): an int key's offset from the least when the
    range is small (no sort; some codes may be unused), else the rank among the distinct
    keys."""
    if keys.dtype.kind in "iu" and keys.size:
        lo, hi = int(keys.min()), int(keys.max())
        if hi - lo <= 4 * keys.size + 1024:
            codes = keys.astype(np.int64)  # a copy, shifted in place
            codes -= lo
            return np.arange(lo, hi + 1, dtype=keys.dtype), codes
    distinct, inverse = np.unique(keys, return_inverse=True)
    return distinct, inverse.reshape(-1).astype(np.int64)


def _first_and_count(
    group: np.ndarray, late: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per group with a live (not late) entry, in group order: the index of its first live
    entry and its number of live entries. Entries are in arrival order, so the first is in
    the group's earliest batch."""
    if n_groups <= 4 * group.size + 1024:  # dense: late entries go to an extra group
        g = group.copy()
        g[late] = n_groups
        counts = np.bincount(g, minlength=n_groups + 1)[:n_groups]
        present = np.flatnonzero(counts)
        first = np.empty(n_groups + 1, dtype=np.int64)
        # assigned in reverse, so that each group keeps its first occurrence
        first[g[::-1]] = np.arange(g.size - 1, -1, -1, dtype=np.int64)
        return first[present], counts[present]
    live = np.flatnonzero(~late)
    srt = live[np.argsort(group[live], kind="stable")]
    g_sorted = group[srt]
    head = np.ones(g_sorted.size, dtype=bool)
    head[1:] = g_sorted[1:] != g_sorted[:-1]
    return srt[head], np.diff(np.append(np.flatnonzero(head), g_sorted.size))


def spark_trace_profile(
    event_time: np.ndarray,
    arrival_time: np.ndarray,
    key: np.ndarray,
    *,
    window: FixedWindows | SlidingWindows,
    delay: int,
    trigger_interval: int,
    batch_duration: int = 0,
    no_data_batches: bool = True,
    inputs: object = None,
    multiple_watermark_policy: str = "min",
) -> SparkTraceResult:
    """The spark profile over a whole trace (see the module docstring); columns in µs,
    ``key`` any 1-d array (ints or strings), event times ``>= 0``. ``inputs`` (one label
    per row, or None for one input) splits the trace into inputs, each with its own
    ``withWatermark(delay)``, combined by ``multiple_watermark_policy`` (min or max; an
    input with no data yet counts as 0)."""
    et = time_column(event_time, "event_time")
    at = time_column(arrival_time, "arrival_time")
    keys = key_column(key)
    same_length("event_time", et.size, arrival_time=at, key=keys)
    if et.size and int(et.min()) < 0:
        i = int(np.argmax(et < 0))
        raise ValueError(f"event_time[{i}]={int(et[i])} µs is before the epoch (spark profile)")
    win = check_window(window, "append")
    if isinstance(win, Sessions):
        raise ValueError(
            "window: the whole-trace spark profile takes FixedWindows or SlidingWindows; "
            "run sessions batch by batch with theory.spark.run_microbatches"
        )
    delay = check_delay(delay)
    interval = check_duration(trigger_interval, "trigger_interval", allow_zero=False)
    duration = check_duration(batch_duration, "batch_duration")
    check_bool(no_data_batches, "no_data_batches")
    policy = check_policy(multiple_watermark_policy)
    codes = input_codes(inputs, et.size)
    return batch_profile(
        et, at, keys, win, delay, interval, duration, no_data_batches, unit=1000,
        late_previous=True, inputs=codes, policy=policy,
    )


def batch_profile(
    et: np.ndarray,
    at: np.ndarray,
    keys: np.ndarray,
    win: FixedWindows | SlidingWindows,
    delay: int,
    interval: int,
    duration: int,
    no_data_batches: bool = True,
    *,
    unit: int = 1000,
    late_previous: bool = True,
    inputs: np.ndarray | None = None,
    policy: str = "min",
) -> SparkTraceResult:
    """:func:`spark_trace_profile` on checked columns, with two of Spark's conventions as
    switches (for :mod:`theory.experiments.systems`): ``unit`` 1000 truncates event
    times and the delay to ms (Spark), 1 keeps µs; ``late_previous`` filters late rows
    against the previous batch's watermark (Spark), else against the batch's own.
    ``inputs`` (an input code per row, or None for one input) gives each input its own
    watermark, combined by ``policy`` (``multipleWatermarkPolicy`` min or max; an input
    with no data yet counts as 0, as Spark populates it)."""
    n = et.size
    presorted = n < 2 or bool((at[1:] >= at[:-1]).all())
    order = None if presorted else np.argsort(at, kind="stable")
    if order is not None:  # work in arrival order; per-row outputs are mapped back
        et, at, keys = et[order], at[order], keys[order]
        inputs = None if inputs is None else inputs[order]
    prefix = combined_max(et // unit, inputs, policy)  # times >= 0: truncation is floor
    starts, cuts, wms, lates, data = trigger_schedule(
        at, prefix, interval, duration, delay // unit, no_data_batches, unit
    )
    b_start = np.asarray(starts, dtype=np.int64)
    b_wm = np.asarray(wms, dtype=np.int64)
    b_late = np.asarray(lates, dtype=np.int64)
    # batch b reads the rows cuts[b-1]:cuts[b]
    row_batch = np.repeat(np.arange(len(cuts), dtype=np.int64), np.diff(cuts, prepend=0))

    el, w_index, step = _window_index(win, et)
    w_end_all = w_index * step  # in place from here: a 10M-row trace allocates little
    w_end_all += win.offset + win.size
    a_batch = row_batch if el is None else row_batch[el]
    late = w_end_all <= (b_late if late_previous else b_wm)[a_batch]
    row_dropped = np.zeros(n, dtype=bool)
    row_dropped[late if el is None else el[late]] = True

    key_of_code, key_codes = _key_codes(keys)
    k = key_codes if el is None else key_codes[el]
    low = int(w_index.min()) if w_index.size else 0
    span = int(w_index.max()) - low + 1 if w_index.size else 1
    group = k * span
    group += w_index
    group -= low
    heads, counts = _first_and_count(group, late, key_of_code.size * span)
    w_end, w_first = w_end_all[heads], a_batch[heads]
    w_start = w_end - win.size
    emit = np.maximum(w_first, np.searchsorted(b_wm, w_end, side="left"))
    never = emit >= b_wm.size
    emit[never] = -1
    emit_time = np.where(never, -1, b_start[np.maximum(emit, 0)] + duration) if emit.size else emit
    if order is not None:
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n, dtype=np.int64)
        row_batch, row_dropped = row_batch[inverse], row_dropped[inverse]
    return SparkTraceResult(
        batch_start=b_start,
        batch_end=b_start + duration,
        batch_watermark=b_wm,
        batch_late_watermark=b_late,
        batch_has_data=np.asarray(data, dtype=bool),
        row_batch=row_batch,
        row_dropped=row_dropped,
        window_key=key_of_code[k[heads]],
        window_start=w_start,
        window_end=w_end,
        window_count=np.asarray(counts, dtype=np.int64),
        emit_batch=emit.astype(np.int64),
        emit_time=np.asarray(emit_time, dtype=np.int64),
    )
