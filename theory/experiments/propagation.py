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
from functools import partial

import numpy as np

from theory.columns import check_count, check_duration, check_positive
from theory.dataflow.aggregator import CentralAggregator
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


def _hop(
    design: InBand, sent: np.ndarray, parallelism: int, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times matrix [upstream, downstream] of one all-to-all hop."""
    stretch = 1.0 + design.hop_jitter * rng.exponential(1.0, (sent.size, parallelism))
    return sent[:, None] + np.round(design.hop_delay * stretch).astype(np.int64)


def in_band_times(
    design: InBand, depth: int, parallelism: int, t0: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Per stage (sources first), when each task's input/emission reaches W1 (vectorised:
    a task's valve advances when the last of its channels has delivered W1)."""
    times = [_source_emissions(design, parallelism, t0, rng)]
    for _ in range(depth):
        times.append(_hop(design, times[-1], parallelism, rng).max(axis=0))
    return times


def in_band_times_by_valve(
    design: InBand, depth: int, parallelism: int, t0: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """The same as :func:`in_band_times`, event by event through real valves (small
    workloads; a test shows the two agree)."""
    emitted = _source_emissions(design, parallelism, t0, rng)
    times = [emitted]
    for _ in range(depth):
        arrivals = _hop(design, emitted, parallelism, rng)
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


def run_in_band(
    design: InBand, depth: int, parallelism: int, scenario: str, rng: np.random.Generator
) -> Outcome:
    """Propagation latency and traffic of the in-band design on one workload."""
    _check_workload(depth, parallelism, scenario)
    t0 = 10 * SECOND
    msgs = in_band_messages_per_second(design, depth, parallelism)
    if scenario == "stale_holder":
        return Outcome("in-band", depth, parallelism, scenario, math.nan, msgs)
    times = in_band_times(design, depth, parallelism, t0, rng)
    latency = float(times[-1].max() - t0)
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
        restarted = in_band_times(design, depth, parallelism, t0 + design.restart_delay, rng)
        latency = float(restarted[-1].max() - t0)
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
    designs = (partial(run_in_band, in_band), partial(run_out_of_band, out_of_band))
    rows = []
    for scenario in scenarios:
        for depth in depths:
            for p in parallelisms:
                for run in designs:
                    # The same seeds at every depth: the source phases are shared, so the
                    # cells differ by what depth itself does.
                    rngs = [np.random.default_rng([seed, p, t]) for t in range(trials)]
                    rows.append(_median_cell([run(depth, p, scenario, g) for g in rngs]))
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
