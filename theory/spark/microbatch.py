"""Spark Structured Streaming's micro-batches, batch by batch: watermarks, late rows and
what the sink receives, for a windowed count per key (all times µs).

:func:`run_microbatches` follows Spark 4.3's ``MicroBatchExecution``, ``WatermarkTracker``
and the stateful aggregation operators (checked against real Spark by
``tests/structured_oracle/test_structured.py``):

- **Triggers.** Trigger ``i`` reads batch ``i`` of every input that still has one (one
  file per trigger per input, as ``maxFilesPerTrigger=1`` under ``Trigger.AvailableNow``);
  an empty batch is still a batch. When the data is exhausted and the watermark has moved
  past the one the last batch used, Spark runs one **no-data batch** (unless
  ``no_data_batches=False``, ``spark.sql.streaming.noDataMicroBatches.enabled``).
- **Watermark.** Every input (one ``withWatermark`` each) tracks ``max(event ms) - delay
  ms`` over the rows of its batches, late rows included, and only moves up. An input that
  has read no row yet counts as **0** from the first batch on (Spark's "populate 0" rule:
  under ``min`` it holds the global watermark at 0 until it sends data). The global
  watermark is the ``min`` (or ``max``) of the inputs', starts at 0 and only moves up. It
  is computed at the end of a batch and used by the **next** one.
- **Late rows.** A batch filters late rows against the **previous** batch's watermark:
  a row's window is dropped when its end is ``<= that watermark``. Spark counts
  (``numRowsDroppedByWatermark``) the *aggregated* rows it drops: the state store's
  operator filters after the shuffle and the partial merge, so it sees one row per
  (window, key) of the whole batch, every input included (for sessions one per (key,
  ``[t, t + gap)``)): 4 late rows in 2 groups count as 2, and a group late in two inputs
  counts once (measured: the issue's "one partition per input" does not hold).
- **Emission.** Append mode emits (and evicts) each window whose end is ``<= the batch's
  watermark``, with its final count. Update mode emits every window that took rows in the
  batch, with its running count, then evicts the windows whose end is ``<= the batch's
  watermark``. Session windows merge in state per key when they overlap or touch (Spark
  refuses them in update mode).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from theory.columns import check_bool, check_timestamp
from theory.spark.conventions import (
    check_delay,
    check_output_mode,
    check_policy,
    check_window,
    spark_millis,
)
from theory.windowing.windows import Sessions

__all__ = [
    "BatchClock",
    "Emitted",
    "MicroBatch",
    "Row",
    "batch_watermarks",
    "check_inputs",
    "run_microbatches",
    "sort_emitted",
]

#: One input row: ``(key, event_time_µs)``.
Row = tuple[Hashable, int]
#: One sink row: ``(window_start_µs, window_end_µs, key, count)``.
Emitted = tuple[int, int, Hashable, int]


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch Spark runs.

    ``watermark`` (µs) is the one the batch uses for eviction, as its progress reports it;
    ``late_watermark`` the previous batch's, against which its rows were filtered.
    ``dropped`` is Spark's ``numRowsDroppedByWatermark`` (late (window, key) groups);
    ``dropped_rows`` the input rows with at least one window dropped, in input order;
    ``emitted`` the sink rows in (start, end, key) order; ``has_data`` is False for a
    no-data batch."""

    batch_id: int
    watermark: int
    late_watermark: int
    dropped: int
    dropped_rows: tuple[Row, ...]
    emitted: tuple[Emitted, ...]
    has_data: bool

    def observed(self) -> tuple[int, int, int, tuple[Emitted, ...]]:
        """What real Spark reports of this batch: ``(batch_id, watermark, dropped,
        emitted)``."""
        return (self.batch_id, self.watermark, self.dropped, self.emitted)


def sort_emitted(rows: list[Emitted]) -> tuple[Emitted, ...]:
    return tuple(sorted(rows, key=lambda r: (r[0], r[1], repr(r[2]))))


def check_inputs(inputs: object) -> list[list[list[Row]]]:
    """``inputs`` as lists, every row checked: ``ValueError`` naming input, batch and row
    for a row that is not ``(key, event_time)``, a ``None`` key or a negative time."""
    if not isinstance(inputs, Sequence) or isinstance(inputs, (str, bytes)) or not inputs:
        raise ValueError("inputs must be a non-empty list of inputs (each a list of batches)")
    out: list[list[list[Row]]] = []
    for j, batches in enumerate(inputs):
        if not isinstance(batches, Sequence) or isinstance(batches, (str, bytes)):
            raise TypeError(f"inputs[{j}] must be a list of batches, got {batches!r}")
        checked: list[list[Row]] = []
        for i, rows in enumerate(batches):
            if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes, tuple)):
                raise TypeError(f"inputs[{j}][{i}] must be a list of rows, got {rows!r}")
            checked.append(
                [_check_row(row, f"inputs[{j}][{i}][{r}]") for r, row in enumerate(rows)]
            )
        out.append(checked)
    return out


def _check_row(row: object, where: str) -> Row:
    if not isinstance(row, tuple) or len(row) != 2:
        raise ValueError(f"{where}: a row must be (key, event_time_µs), got {row!r}")
    key, ts = row
    if key is None:
        raise ValueError(f"{where}: the row has no key (None)")
    if ts is None:
        raise ValueError(f"{where}: the row has no event time (None)")
    hash(key)
    t = check_timestamp(ts, f"{where} event time")
    if t < 0:
        raise ValueError(
            f"{where}: event time {t} µs is before the epoch; the spark profile takes "
            "event times >= 0 (Spark's window arithmetic and its 0 watermark floor)"
        )
    return (key, t)


class _State:
    """The aggregation state store: counts per (key, start, end), or per key a sorted
    list of disjoint sessions ``[start, end, count]``."""

    def __init__(self, window: Sessions | object) -> None:
        self.sessions = isinstance(window, Sessions)
        self.counts: dict[tuple[Hashable, int, int], int] = {}

    def add(self, partial: dict[tuple[Hashable, int, int], int]) -> set[tuple[Hashable, int, int]]:
        """Merge non-late partial aggregates; returns the updated (key, start, end)."""
        if not self.sessions:
            for k, c in partial.items():
                self.counts[k] = self.counts.get(k, 0) + c
            return set(partial)
        touched: set[tuple[Hashable, int, int]] = set()
        by_key: dict[Hashable, list[tuple[int, int, int]]] = {}
        for (key, s, e), c in partial.items():
            by_key.setdefault(key, []).append((s, e, c))
        for key, new in by_key.items():
            old = [(s, e, c) for (k, s, e), c in self.counts.items() if k == key]
            for s, e, _ in old:
                del self.counts[(key, s, e)]
            new_starts = {(s, e) for s, e, _ in new}
            for s, e, c, has_new in _merge_sessions(old, new, new_starts):
                self.counts[(key, s, e)] = c
                if has_new:
                    touched.add((key, s, e))
        return touched

    def evict(self, watermark: int) -> list[Emitted]:
        """Remove and return the windows whose end is ``<= watermark``."""
        out = [(s, e, k, c) for (k, s, e), c in self.counts.items() if e <= watermark]
        for s, e, k, _ in out:
            del self.counts[(k, s, e)]
        return out


def _merge_sessions(
    old: list[tuple[int, int, int]],
    new: list[tuple[int, int, int]],
    new_windows: set[tuple[int, int]],
) -> list[tuple[int, int, int, bool]]:
    """Spark's ``MergingSessionsIterator`` over state and new sessions of one key, sorted
    by start: a session joins the running one when it overlaps or touches it (``start <=
    end``: unlike Beam's strict overlap, measured on Spark 4.3).
    Returns ``(start, end, count, has_new_rows)``."""
    tagged = sorted(
        [(s, e, c, False) for s, e, c in old]
        + [(s, e, c, (s, e) in new_windows) for s, e, c in new]
    )
    out: list[tuple[int, int, int, bool]] = []
    for s, e, c, n in tagged:
        if out and s <= out[-1][1]:
            ps, pe, pc, pn = out[-1]
            out[-1] = (ps, max(pe, e), pc + c, pn or n)
        else:
            out.append((s, e, c, n))
    return out


def _partial(rows: list[Row], window: object) -> dict[tuple[Hashable, int, int], list[int]]:
    """A batch's rows (all inputs) aggregated as the state operator sees them: (key,
    start, end) -> the indexes of its rows (sessions: per row ``[t, t + gap)``)."""
    groups: dict[tuple[Hashable, int, int], list[int]] = {}
    for i, (key, t) in enumerate(rows):
        if isinstance(window, Sessions):
            windows = [(t, t + window.gap)]
        else:
            windows = [(w.start, w.end) for w in window.assign(t)]  # type: ignore[attr-defined]
        for s, e in windows:
            groups.setdefault((key, s, e), []).append(i)
    return groups


@dataclass(frozen=True)
class BatchClock:
    """When a micro-batch runs and against what: its ``watermark`` (µs, for eviction and
    timers), the previous batch's (``late_watermark``, µs, for late rows) and whether it
    reads data (``has_data``; False for a no-data batch)."""

    batch_id: int
    watermark: int
    late_watermark: int
    has_data: bool


def batch_watermarks(
    inputs: Sequence[Sequence[Sequence[Row]]],
    *,
    delay: int,
    multiple_watermark_policy: str = "min",
    no_data_batches: bool = True,
) -> list[BatchClock]:
    """The micro-batches Spark runs for ``inputs`` and their watermarks (the rules of the
    module docstring: per input ``max(event ms) - delay ms``, "populate 0", the policy,
    used from the next batch; one no-data batch if the watermark moved at the end)."""
    delay_ms = spark_millis(check_delay(delay))
    policy = check_policy(multiple_watermark_policy)
    check_bool(no_data_batches, "no_data_batches")
    data = check_inputs(inputs)
    input_wm: list[int | None] = [None] * len(data)
    global_ms = 0
    prev_wm = 0
    out: list[BatchClock] = []
    n = max(len(b) for b in data)
    for i in range(n):
        wm = global_ms * 1000
        out.append(BatchClock(i, wm, prev_wm, True))
        for j, batches in enumerate(data):
            rows = batches[i] if i < len(batches) else []
            if rows:  # EventTimeWatermarkExec saw rows: max(event ms) - delay, moving up
                candidate = max(spark_millis(t) for _, t in rows) - delay_ms
                old = input_wm[j]
                input_wm[j] = candidate if old is None else max(old, candidate)
            elif input_wm[j] is None:
                input_wm[j] = 0  # Spark's "populate 0" for an input with no data yet
        values = [w for w in input_wm if w is not None]
        chosen = min(values) if policy == "min" else max(values)
        global_ms = max(global_ms, chosen)
        prev_wm = wm
    if no_data_batches and global_ms * 1000 > prev_wm:
        out.append(BatchClock(n, global_ms * 1000, prev_wm, False))
    return out


def run_microbatches(
    inputs: Sequence[Sequence[Sequence[Row]]],
    *,
    delay: int,
    window: object,
    output_mode: str = "append",
    multiple_watermark_policy: str = "min",
    no_data_batches: bool = True,
) -> list[MicroBatch]:
    """The micro-batches Spark runs for ``inputs`` (each a list of batches of ``(key,
    event_time_µs)`` rows), each input with ``withWatermark(delay)``, unioned, counted per
    (window, key) in ``output_mode``; see the module docstring for the rules. ``window``
    is a theory ``FixedWindows``, ``SlidingWindows`` (period <= size) or ``Sessions``."""
    mode = check_output_mode(output_mode)
    win = check_window(window, mode)
    data = check_inputs(inputs)
    clocks = batch_watermarks(
        data,
        delay=delay,
        multiple_watermark_policy=multiple_watermark_policy,
        no_data_batches=no_data_batches,
    )
    state = _State(win)
    out: list[MicroBatch] = []
    for clock in clocks:
        i, wm = clock.batch_id, clock.watermark
        dropped = 0
        rows = [r for batches in data if i < len(batches) for r in batches[i]]
        live: dict[tuple[Hashable, int, int], int] = {}
        late: set[int] = set()
        for (key, s, e), idx in _partial(rows, win).items():
            if e <= clock.late_watermark:
                dropped += 1
                late.update(idx)
            else:
                live[(key, s, e)] = len(idx)
        rows_dropped = [rows[r] for r in sorted(late)]
        updated = state.add(live)
        if mode == "update":
            emitted = [(s, e, k, state.counts[(k, s, e)]) for k, s, e in updated]
            state.evict(wm)
        else:
            emitted = state.evict(wm)
        out.append(
            MicroBatch(
                i,
                wm,
                clock.late_watermark,
                dropped,
                tuple(rows_dropped),
                sort_emitted(emitted),
                clock.has_data,
            )
        )
    return out
