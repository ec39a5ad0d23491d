"""In-band (Flink) against out-of-band (Dataflow) watermark propagation, on one workload.

The workload: ``parallelism`` source partitions feed ``depth`` stages of ``parallelism``
tasks each, every stage shuffled all-to-all from the one before. At ``t0`` every source
partition's watermark steps from ``W0`` to ``W1``. All times are µs.

**In-band** (:class:`InBand`): a source task emits its watermark at its periodic ticks
(``emit_interval``, a random phase per task), so it sends ``W1`` at its first tick at or
after ``t0``. Each message reaches every downstream task after ``hop_delay``, stretched by
``1 + hop_jitter * Exp(1)`` per channel. A task's :class:`~theory.flink.valve.StatusWatermarkValve`
advances once the last of its ``parallelism`` input channels has delivered ``W1``, and the
task forwards at once. *Propagation latency* is the time from ``t0`` until every task of
the last stage has ``W1`` as its input watermark.

**Out-of-band** (:class:`OutOfBand`): every task reports to a
:class:`~theory.dataflow.aggregator.CentralAggregator` every ``report_interval`` (random phase).
The aggregator computes every stage's input watermark centrally, as the minimum of the
upstream stages' reported holds, so once the last source report carrying ``W1`` is in,
``aggregator_latency`` later the whole graph reflects it, whatever the depth.

*Messages per second* is the steady-state watermark traffic while the sources advance
continuously: in-band, a source task sends ``parallelism`` messages per tick and every
other task's valve advances on each of its ``parallelism`` inputs' updates, forwarding
each advance to ``parallelism`` channels; out-of-band, one report per task per interval.

Scenarios (a string): ``steady``; ``idle_partition`` (one source partition has no data:
in-band it keeps emitting its old watermark and holds everything until ``idle_timeout``
marks it idle, or forever without one; out-of-band its reader still reports, knowing the
partition is idle); ``worker_failure`` (one task of the middle stage dies at ``t0``: in-band
the job restarts after ``restart_delay``; out-of-band its lease expires, the range is held
while unowned, and is reassigned after ``reassign_delay``); ``stale_holder`` (as worker
failure, and the dead task is a zombie that keeps reporting a too-high watermark under its
old epoch: out-of-band the aggregator rejects it; in-band there is no such actor, ``n/a``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from theory.columns import check_count, check_duration, check_positive
from theory.dataflow.aggregator import CentralAggregator
from theory.experiments.html import html_table
from theory.flink.valve import StatusWatermarkValve, StreamStatus
from theory.time import MILLISECOND, SECOND

SCENARIOS = ("steady", "idle_partition", "worker_failure", "stale_holder")

W0 = 0
W1 = 1_000 * SECOND


@dataclass(frozen=True)
class InBand:
    """Flink-style design parameters (µs)."""

    emit_interval: int = 200 * MILLISECOND
    hop_delay: int = 1 * MILLISECOND
    hop_jitter: float = 0.5
    idle_timeout: int | None = 10 * SECOND
    restart_delay: int = 10 * SECOND

    def __post_init__(self) -> None:
        check_duration(self.emit_interval, "emit_interval", allow_zero=False)
        check_duration(self.hop_delay, "hop_delay")
        check_duration(self.restart_delay, "restart_delay")
        if self.idle_timeout is not None:
            check_duration(self.idle_timeout, "idle_timeout", allow_zero=False)
        check_positive(self.hop_jitter, "hop_jitter", allow_zero=True)


@dataclass(frozen=True)
class OutOfBand:
    """Dataflow-style design parameters (µs)."""

    report_interval: int = 1 * SECOND
    aggregator_latency: int = 100 * MILLISECOND
    lease_duration: int = 10 * SECOND
    reassign_delay: int = 1 * SECOND

    def __post_init__(self) -> None:
        check_duration(self.report_interval, "report_interval", allow_zero=False)
        check_duration(self.aggregator_latency, "aggregator_latency")
        check_duration(self.lease_duration, "lease_duration", allow_zero=False)
        check_duration(self.reassign_delay, "reassign_delay")


@dataclass(frozen=True)
class Outcome:
    """One design's result on one workload: latency (µs, ``inf`` when it never
    propagates), steady-state messages per second, and counted rejections."""

    design: str
    depth: int
    parallelism: int
    scenario: str
    latency: float
    messages_per_second: float
    rejected_reports: int = 0
    safe: bool = True


def _check_workload(depth: int, parallelism: int, scenario: str) -> None:
    """The workload's bounds keep the vectorised hops (parallelism² arrival times per hop)
    and the valve replay within memory and time."""
    if check_count(depth, "depth", minimum=1) > 1_000:
        raise ValueError(f"depth must be in [1, 1000], got {depth}")
    if check_count(parallelism, "parallelism", minimum=1) > 100_000:
        raise ValueError(f"parallelism must be in [1, 100000], got {parallelism}")
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; use one of {', '.join(SCENARIOS)}")


def _source_emissions(
    design: InBand, parallelism: int, t0: int, rng: np.random.Generator
) -> np.ndarray:
    """When each source task first emits W1: its first periodic tick at or after t0."""
    phase = rng.integers(0, design.emit_interval, parallelism)
    return t0 + (phase - t0) % design.emit_interval


def _last_arrivals(
    design: InBand, sent: np.ndarray, parallelism: int, rng: np.random.Generator
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]:
    """One all-to-all hop, sampled exactly without drawing its parallelism² delays.

    The arrival on channel (i, j) is ``sent[i] + round(d + c·E)`` with ``d = hop_delay``,
    ``c = d·hop_jitter`` and ``E ~ Exp(1)``; task j's valve advances at the last of its
    channels. Every arrival from a task that sent last is at least ``T = max(sent) + d``,
    so only the channels above ``T`` matter: channel (i, j) is above it with probability
    ``q_i = exp(-(T - sent[i] - d) / c)``, and then (memoryless) at ``T + round(c·E')``.
    So the last arrival at j is ``T + round(c·X_j)``, ``X_j`` the largest of ``N_j``
    fresh Exp(1) draws and ``N_j`` the number of channels into j above ``T``: the
    channels are drawn row by row with geometric skips (about
    ``parallelism·(1 + ln parallelism)`` draws, not parallelism²), ``X_j`` by inverting
    ``F^N``. Returns the last arrival per downstream task (µs), the channels above ``T``
    as (upstream, downstream) index arrays, and ``X`` (for :func:`_arrival_matrix`)."""
    top = int(sent.max())
    threshold = top + design.hop_delay
    c = design.hop_delay * design.hop_jitter
    if c == 0:
        rows = np.repeat(np.flatnonzero(sent == top), parallelism)
        cols = np.tile(np.arange(parallelism), rows.size // parallelism)
        return np.full(parallelism, threshold, np.int64), (rows, cols), np.zeros(parallelism)
    q = np.exp(-(top - sent).astype(np.float64) / c)
    rows, cols = _bernoulli_successes(q, parallelism, rng)
    n = np.bincount(cols, minlength=parallelism)  # >= 1: the top rows are always above
    x = -np.log1p(-(rng.random(parallelism) ** (1.0 / n)))
    return threshold + np.round(c * x).astype(np.int64), (rows, cols), x


def _bernoulli_successes(
    q: np.ndarray, width: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The successes of independent Bernoulli(q[i]) trials on the grid
    ``len(q) × width``, as (row, column) index arrays, by geometric skips drawn in
    rounds for all rows at once (about ``width·sum(q) + len(q)`` draws)."""
    rows = np.flatnonzero(q > 0)
    pos = np.full(rows.size, -1, np.int64)  # each active row's last column so far
    out_r, out_c = [], []
    while rows.size:
        qr = q[rows]
        left = width - 1 - pos  # columns still to draw, >= 1
        mean = left * qr
        m = np.minimum(np.ceil(mean + 3.0 * np.sqrt(mean) + 2.0).astype(np.int64), left)
        gaps = rng.geometric(np.repeat(qr, m))
        # a gap past the row's end is as good as any (and a tiny q's may overflow int64)
        gaps[(gaps < 1) | (gaps > width)] = width + 1
        csum = np.cumsum(gaps)
        ends = np.cumsum(m)
        before = np.concatenate(([0], csum[ends[:-1] - 1]))
        at = csum - np.repeat(before - pos, m)  # the columns, ascending within a row
        keep = at < width
        out_r.append(np.repeat(rows, m)[keep])
        out_c.append(at[keep])
        last = at[ends - 1]
        more = last < width - 1  # the row's draws ran out before its last column
        rows, pos = rows[more], last[more]
    if not out_r:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(out_r), np.concatenate(out_c)


def _arrival_matrix(
    design: InBand,
    sent: np.ndarray,
    last: np.ndarray,
    above: tuple[np.ndarray, np.ndarray],
    x: np.ndarray,
    fill: np.random.Generator,
) -> np.ndarray:
    """The hop's full arrival matrix [upstream, downstream] (µs), the rest drawn from
    ``fill`` given :func:`_last_arrivals`' draws, so that its law is that of independent
    ``sent[i] + round(d + c·E)`` and each column's maximum is ``last``: the channels below
    ``T`` have E truncated to ``[0, (T - sent[i] - d) / c]``; those above are
    ``T + round(c·E')``, one of them (at random) at ``X_j``, the others with E' below it."""
    p, d = last.size, design.hop_delay
    c = d * design.hop_jitter
    top = int(sent.max())
    if c == 0:
        return np.repeat(sent[:, None] + d, p, axis=1).astype(np.int64)
    a = ((top - sent) / c)[:, None]
    e = -np.log1p(fill.random((sent.size, p)) * np.expm1(-a))
    out = sent[:, None] + np.round(d + c * e).astype(np.int64)
    rows, cols = above
    xj = x[cols]
    e2 = -np.log1p(fill.random(cols.size) * np.expm1(-xj))
    out[rows, cols] = top + d + np.round(c * e2).astype(np.int64)
    pick = fill.permutation(cols.size)
    chosen = np.empty(p, np.int64)
    chosen[cols[pick]] = pick  # (the last write per column wins: a random one)
    out[rows[chosen], np.arange(p)] = last
    return out


def in_band_times(
    design: InBand, depth: int, parallelism: int, t0: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Per stage (sources first), when each task's input/emission reaches W1 (vectorised:
    a task's valve advances when the last of its channels has delivered W1; see
    :func:`_last_arrivals`). The first k hops draw the same numbers whatever ``depth``."""
    times = [_source_emissions(design, parallelism, t0, rng)]
    for _ in range(depth):
        times.append(_last_arrivals(design, times[-1], parallelism, rng)[0])
    return times


def in_band_times_by_valve(
    design: InBand,
    depth: int,
    parallelism: int,
    t0: int,
    rng: np.random.Generator,
    fill: np.random.Generator | None = None,
) -> list[np.ndarray]:
    """The same as :func:`in_band_times` (the same draws from ``rng``), event by event
    through real valves, every channel's arrival drawn (the rest from ``fill``); for
    small workloads (a test shows the two agree)."""
    fill = np.random.default_rng(0) if fill is None else fill
    emitted = _source_emissions(design, parallelism, t0, rng)
    times = [emitted]
    for _ in range(depth):
        hop = _last_arrivals(design, emitted, parallelism, rng)
        arrivals = _arrival_matrix(design, emitted, *hop, fill)
        stage = np.empty(parallelism, dtype=np.int64)
        for j in range(parallelism):
            valve = StatusWatermarkValve(parallelism)
            for i in range(parallelism):
                valve.input_watermark(i, W0)
            for i in np.argsort(arrivals[:, j], kind="stable").tolist():
                out = valve.input_watermark(i, W1)
                if W1 in out:
                    stage[j] = arrivals[i, j]
        times.append(stage)
        emitted = stage
    return times


def in_band_messages_per_second(design: InBand, depth: int, parallelism: int) -> float:
    """Steady-state in-band watermark messages per second (see the module docstring)."""
    p = float(parallelism)
    # Sources send each tick to p channels; each of the (depth - 1) forwarding stages has
    # p tasks whose valves advance on each of p input updates, each advance sent to p
    # channels. The last stage forwards to no one.
    per_tick = p * p + (depth - 1) * p * p * p
    return per_tick / (design.emit_interval / SECOND)


class _InBandTrial:
    """One seeded trial's in-band propagation times up to ``depth`` hops, drawn once and
    shared by every scenario and smaller depth (the first k hops draw the same numbers
    whatever the depth): ``first`` from ``t0``, ``restart`` from ``t0 + restart_delay``
    (worker failure), each from its own stream spawned from ``rng``."""

    T0 = 10 * SECOND

    def __init__(
        self, design: InBand, depth: int, parallelism: int, rng: np.random.Generator
    ) -> None:
        self.design, self.depth, self.parallelism = design, depth, parallelism
        self._rngs = rng.spawn(2)
        self._times: dict[int, list[np.ndarray]] = {}

    def times(self, which: int) -> list[np.ndarray]:
        """Per stage, when each task reaches W1 (µs): 0 the first run, 1 the restart."""
        got = self._times.get(which)
        if got is None:
            t0 = self.T0 + (self.design.restart_delay if which else 0)
            got = in_band_times(self.design, self.depth, self.parallelism, t0, self._rngs[which])
            self._times[which] = got
        return got


def run_in_band(
    design: InBand, depth: int, parallelism: int, scenario: str, rng: np.random.Generator
) -> Outcome:
    """Propagation latency and traffic of the in-band design on one workload."""
    _check_workload(depth, parallelism, scenario)
    return _in_band_outcome(design, depth, scenario, _InBandTrial(design, depth, parallelism, rng))


def _in_band_outcome(design: InBand, depth: int, scenario: str, trial: _InBandTrial) -> Outcome:
    """The in-band outcome at ``depth`` (<= the trial's) under ``scenario``."""
    parallelism, t0 = trial.parallelism, trial.T0
    msgs = in_band_messages_per_second(design, depth, parallelism)
    if scenario == "stale_holder":
        return Outcome("in-band", depth, parallelism, scenario, math.nan, msgs)
    latency = float(trial.times(0)[depth].max() - t0)
    if scenario == "idle_partition":
        if design.idle_timeout is None:
            latency = math.inf  # the silent channel holds its old watermark forever
        else:
            # Emit-based idleness: inactivity starts counting at the first periodic emit
            # without data, and idleness is declared at the first emit after the timeout.
            ticks = math.ceil(design.idle_timeout / design.emit_interval) + 1
            idle_at = t0 + ticks * design.emit_interval
            latency = max(latency, float(idle_at - t0 + depth * design.hop_delay))
    elif scenario == "worker_failure":
        # A failed task stops the job; everything restarts and sources re-emit.
        latency = float(trial.times(1)[depth].max() - t0)
    return Outcome("in-band", depth, parallelism, scenario, latency, msgs)


def run_out_of_band(
    design: OutOfBand, depth: int, parallelism: int, scenario: str, rng: np.random.Generator
) -> Outcome:
    """Propagation latency and traffic of the out-of-band design on one workload, driving
    a real :class:`~theory.dataflow.aggregator.CentralAggregator` for the failure scenarios."""
    _check_workload(depth, parallelism, scenario)
    t0 = 10 * SECOND
    msgs = depth * parallelism / (design.report_interval / SECOND) + parallelism / (
        design.report_interval / SECOND
    )
    r = design.report_interval
    phase = rng.integers(0, r, parallelism)
    source_reports = t0 + (phase - t0) % r  # the first source report carrying W1
    latency = float(source_reports.max() - t0 + design.aggregator_latency)
    rejected = 0
    safe = True
    if scenario in ("worker_failure", "stale_holder"):
        extra, rejected, safe = _failed_range(design, t0, rng, zombie=scenario == "stale_holder")
        latency = max(latency, float(extra - t0 + design.aggregator_latency))
    return Outcome("out-of-band", depth, parallelism, scenario, latency, msgs, rejected, safe)


def _failed_range(
    design: OutOfBand, t0: int, rng: np.random.Generator, *, zombie: bool
) -> tuple[int, int, bool]:
    """Drive the aggregator through a failed (or zombie) holder of one middle-stage range;
    return when the range first reports W1 again, the rejected reports, and safety (the
    range never went above its true watermark, W0 until the new holder reports)."""
    agg = CentralAggregator(["range"], ["old", "new"])
    r = design.report_interval
    last_report = t0 - int(rng.integers(0, r))
    epoch = agg.assign(
        range_id="range", worker="old", now=last_report - 1, lease_duration=design.lease_duration
    )
    agg.report(worker="old", range_id="range", epoch=epoch, watermark=W0, now=last_report)
    agg.renew(
        range_id="range",
        worker="old",
        epoch=epoch,
        now=last_report,
        lease_duration=design.lease_duration,
    )
    expiry = last_report + design.lease_duration
    new_epoch_at = expiry + design.reassign_delay
    safe = True
    t = last_report + r
    while t < new_epoch_at:  # the holder is dead: its lease runs out, the range is held
        agg.expire(t)
        safe = safe and agg.range_watermark("range") <= W0
        t += r
    agg.expire(new_epoch_at)
    new_epoch = agg.assign(
        range_id="range", worker="new", now=new_epoch_at, lease_duration=design.lease_duration
    )
    first = new_epoch_at + int(rng.integers(0, r))
    if zombie:
        # The old holder comes back from a partition, still believing it holds the range,
        # and claims progress under its old epoch, before and after the new holder reports.
        agg.report(worker="old", range_id="range", epoch=epoch, watermark=W1 + SECOND, now=first)
    agg.report(worker="new", range_id="range", epoch=new_epoch, watermark=W1, now=first)
    if zombie:
        agg.report(
            worker="old", range_id="range", epoch=epoch, watermark=W1 + SECOND, now=first + r
        )
    safe = safe and agg.range_watermark("range") == W1
    return first, sum(agg.rejected.values()), safe


@dataclass(frozen=True)
class PropagationTable:
    """Median over trials of every (design, depth, parallelism, scenario)."""

    rows: list[Outcome]

    def table(self) -> dict[str, list[object]]:
        """The rows as a column table."""
        names = list(Outcome.__dataclass_fields__)
        return {n: [getattr(r, n) for r in self.rows] for n in names}

    def _repr_html_(self) -> str:
        """:meth:`table` as HTML (a notebook shows it)."""
        return html_table(self.table(), "propagation: median over trials")


def propagation(
    depths: Sequence[int] = (1, 5, 20),
    parallelisms: Sequence[int] = (1, 10, 100, 1000),
    scenarios: Sequence[str] = SCENARIOS,
    *,
    in_band: InBand = InBand(),
    out_of_band: OutOfBand = OutOfBand(),
    trials: int = 9,
    seed: int = 0,
) -> PropagationTable:
    """Run both designs over the grid; each cell is the median of ``trials`` seeded runs."""
    check_count(trials, "trials", minimum=1)
    for scenario in scenarios:
        for depth in depths:
            for p in parallelisms:
                _check_workload(depth, p, scenario)
    deepest = max(depths, default=1)
    # The same seeds at every depth and scenario: the in-band trials are drawn once per
    # parallelism at the deepest depth, so the cells differ by what depth itself does.
    in_band_trials = {
        p: [_InBandTrial(in_band, deepest, p, np.random.default_rng([seed, p, t]))
            for t in range(trials)]
        for p in parallelisms
    }  # fmt: skip
    rows = []
    for scenario in scenarios:
        for depth in depths:
            for p in parallelisms:
                rows.append(
                    _median_cell(
                        [_in_band_outcome(in_band, depth, scenario, t) for t in in_band_trials[p]]
                    )
                )
                rngs = [np.random.default_rng([seed, p, t]) for t in range(trials)]
                rows.append(
                    _median_cell(
                        [run_out_of_band(out_of_band, depth, p, scenario, g) for g in rngs]
                    )
                )
    return PropagationTable(rows)


def _median_cell(outs: list[Outcome]) -> Outcome:
    """One cell from its trials: the median latency and rejections, the (fixed) traffic,
    and safe only if every trial was."""
    first = outs[0]
    return Outcome(
        first.design,
        first.depth,
        first.parallelism,
        first.scenario,
        float(np.median([o.latency for o in outs])),
        first.messages_per_second,
        int(np.median([o.rejected_reports for o in outs])),
        all(o.safe for o in outs),
    )


__all__ = [
    "SCENARIOS",
    "InBand",
    "OutOfBand",
    "Outcome",
    "PropagationTable",
    "StreamStatus",
    "in_band_times",
    "in_band_times_by_valve",
    "propagation",
    "run_in_band",
    "run_out_of_band",
]
