"""The source-watermark spec grammar: ``perfect``, ``bounded:30s``, ``percentile:0.9``, ...

:data:`SPEC_MEANINGS` says what each form means (the command line's help prints it).

:func:`make_source_watermark` parses a spec into a :class:`SourceWatermarkSpec`, which
builds the vectorised curve of a trace or a fresh incremental generator, in the core
(Beam) convention (µs). The specs are the strategies of the simulator, the experiments
and the ``watermarks`` command line.
"""

from __future__ import annotations

from dataclasses import dataclass

from numpy.typing import ArrayLike

from theory.columns import check_duration
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, parse_duration
from theory.watermarks.heuristic import (
    BoundedOutOfOrderness,
    DynamicPartitionsWatermark,
    bounded_out_of_orderness_curve,
    dynamic_partitions_curve,
)
from theory.watermarks.latch import LatchedWatermark
from theory.watermarks.percentile import check_p
from theory.watermarks.percentile_source import PercentileSourceWatermark, percentile_source_curve
from theory.watermarks.perfect import (
    IngressWatermark,
    PerfectWatermark,
    StaticPartitionsWatermark,
    ingress_curve,
    perfect_curve,
    perfect_oracle_curve,
    static_partitions_curve,
)

__all__ = ["SPEC_MEANINGS", "SourceWatermarkSpec", "make_source_watermark"]

#: Every spec form and what it means, in the order help texts list them.
SPEC_MEANINGS: tuple[tuple[str, str], ...] = (
    ("perfect", "min(now, least event time still to arrive): knows every event that has "
     "happened, never passes the clock, never passed by data"),
    ("perfect:oracle", "the least event time still to arrive, uncapped: knows future events "
     "too and can run ahead of processing time (research only)"),
    ("ingress", "ingress timestamping: event time := arrival time, watermark now + 1 µs"),
    ("static", "static set of partitions known in full: min over partitions of the least "
     "unread event time, capped at now (equals perfect whatever the partitioning)"),
    ("bounded:<duration>", "heuristic: max event time seen - duration"),
    ("flink-bounded:<duration>", "Flink's BoundedOutOfOrdernessWatermarks (max seen - "
     "duration - 1 ms in Flink's <= convention, converted)"),
    ("flink-bounded:<duration>:idle=<timeout>", "the same per partition, emitted every "
     "200 ms with Flink's withIdleness(timeout): a partition without rows for longer is "
     "left out of the minimum (StatusWatermarkValve) until it emits again"),
    ("dynamic", "dynamic set of partitions: min over partitions seen of their largest event "
     "time seen"),
    ("dynamic:idle=<duration>", "the same, ignoring partitions idle for longer than duration"),
    ("percentile:<p>", "the (1 - p) quantile of the events that happened but have not "
     "arrived (p in (0, 1]; 1 = perfect); perfect where there are none"),
    ("percentile:<p>:hold", "the same, but holding (no perfect fallback) where there are none"),
)

_SPEC_FORMS = (
    ", ".join(form for form, _ in SPEC_MEANINGS)
    + "; durations like 500ms, 30s, 2m, 1h or integer µs; p in (0, 1]"
)


@dataclass(frozen=True)
class SourceWatermarkSpec:
    """A parsed source-watermark spec; its curves and objects use the core convention."""

    spec: str
    kind: str
    bound: int | None = None
    idle_timeout: int | None = None
    p: float | None = None
    hold: bool = False

    def curve(
        self, event_time: ArrayLike, arrival_time: ArrayLike, partition: ArrayLike | None = None
    ) -> StepSeries:
        """The vectorised watermark (µs) of this spec over a trace.

        For ``ingress`` the event times are ignored (elements are re-stamped with their
        arrival times; see :func:`~theory.watermarks.perfect.ingress_timestamps`).
        """
        if self.kind == "perfect":
            return perfect_curve(event_time, arrival_time, partition)
        if self.kind == "oracle":
            return perfect_oracle_curve(event_time, arrival_time, partition)
        if self.kind == "ingress":
            return ingress_curve(arrival_time)
        if self.kind == "static":
            return static_partitions_curve(event_time, arrival_time, partition)
        if self.kind == "bounded":
            assert self.bound is not None
            return bounded_out_of_orderness_curve(event_time, arrival_time, bound=self.bound)
        if self.kind == "flink-bounded" and self.idle_timeout is not None:
            assert self.bound is not None
            return _flink_idle_curve(
                event_time, arrival_time, partition, self.bound, self.idle_timeout
            )
        if self.kind == "flink-bounded":
            assert self.bound is not None
            # the flink profile is a layer above the core generators: imported on use
            from theory.flink.conventions import (
                flink_bounded_out_of_orderness_curve,
                flink_to_core,
            )

            c = flink_bounded_out_of_orderness_curve(event_time, arrival_time, bound=self.bound)
            return StepSeries(c.times, flink_to_core(c.values), MIN_TIMESTAMP)
        if self.kind == "percentile":
            assert self.p is not None
            return percentile_source_curve(
                event_time, arrival_time, partition, p=self.p, hold=self.hold
            )
        return dynamic_partitions_curve(
            event_time, arrival_time, partition, idle_timeout=self.idle_timeout
        )

    def incremental(
        self,
        event_time: ArrayLike | None = None,
        arrival_time: ArrayLike | None = None,
        partition: ArrayLike | None = None,
    ) -> LatchedWatermark:
        """A fresh incremental generator. ``perfect``, ``perfect:oracle``, ``static`` and
        ``percentile`` know their trace in advance and need ``event_time`` and
        ``arrival_time`` (and ``partition``)."""
        if self.kind in ("perfect", "oracle", "static", "percentile"):
            if event_time is None or arrival_time is None:
                raise ValueError(
                    f"source watermark {self.spec!r} knows its trace in advance: "
                    "pass event_time and arrival_time to incremental()"
                )
            if self.kind in ("perfect", "oracle"):
                return PerfectWatermark(event_time, arrival_time, oracle=self.kind == "oracle")
            if self.kind == "percentile":
                assert self.p is not None
                return PercentileSourceWatermark(event_time, arrival_time, self.p, hold=self.hold)
            return StaticPartitionsWatermark.from_trace(event_time, arrival_time, partition)
        if self.kind == "ingress":
            return IngressWatermark()
        if self.kind == "bounded":
            assert self.bound is not None
            return BoundedOutOfOrderness(self.bound)
        if self.kind == "flink-bounded" and self.idle_timeout is not None:
            raise ValueError(
                f"source watermark {self.spec!r} has no incremental form: its idleness "
                "is computed over the whole trace (curve())"
            )
        if self.kind == "flink-bounded":
            from theory.flink.conventions import FlinkBoundedOutOfOrderness, FlinkCoreView

            assert self.bound is not None
            return FlinkCoreView(FlinkBoundedOutOfOrderness(self.bound))
        return DynamicPartitionsWatermark(self.idle_timeout)


def make_source_watermark(spec: str) -> SourceWatermarkSpec:
    """Parse a spec: ``perfect``, ``perfect:oracle`` (kind ``oracle``), ``ingress``,
    ``static``, ``bounded:30s``, ``flink-bounded:30s``, ``flink-bounded:30s:idle=1m``,
    ``dynamic``, ``dynamic:idle=1m``, ``percentile:0.9`` or
    ``percentile:0.9:hold`` (:mod:`~theory.watermarks.percentile_source`; ``hold``: no
    perfect fallback). A bad spec raises ValueError naming the spec; a non-string,
    TypeError."""
    if not isinstance(spec, str):
        raise TypeError(f"bad source watermark spec {spec!r}: expected a string ({_SPEC_FORMS})")
    text = spec.strip()
    name, _, arg = text.partition(":")
    try:
        if name in ("perfect", "ingress", "static", "dynamic") and not arg and ":" not in text:
            return SourceWatermarkSpec(spec, name)
        if text == "perfect:oracle":
            return SourceWatermarkSpec(spec, "oracle")
        if name == "flink-bounded" and ":idle=" in arg:
            bound_text, _, idle = arg.partition(":idle=")
            bound = check_duration(
                parse_duration(bound_text), f"the bound of {spec!r}", maximum=MAX_TIMESTAMP
            )
            timeout = check_duration(
                parse_duration(idle), f"the idle timeout of {spec!r}", allow_zero=False
            )
            return SourceWatermarkSpec(spec, name, bound=bound, idle_timeout=timeout)
        if name in ("bounded", "flink-bounded") and arg:
            bound = check_duration(
                parse_duration(arg), f"the bound of {spec!r}", maximum=MAX_TIMESTAMP
            )
            return SourceWatermarkSpec(spec, name, bound=bound)
        if name == "dynamic" and arg.startswith("idle="):
            return SourceWatermarkSpec(spec, name, idle_timeout=parse_duration(arg[5:]))
        if name == "percentile" and arg:
            p, hold = _parse_percentile(arg)
            return SourceWatermarkSpec(spec, name, p=p, hold=hold)
    except ValueError as err:
        raise ValueError(f"bad source watermark spec {spec!r}: {err}") from None
    raise ValueError(f"bad source watermark spec {spec!r}: expected one of {_SPEC_FORMS}")


#: Flink's default auto-watermark interval (µs): ``flink-bounded:<d>:idle=<t>`` emits
#: every this often.
FLINK_INTERVAL = 200_000


def _flink_idle_curve(
    event_time: ArrayLike,
    arrival_time: ArrayLike,
    partition: ArrayLike | None,
    bound: int,
    idle_timeout: int,
) -> StepSeries:
    """Flink's job watermark (core convention, µs) with each partition a periodic
    bounded source with ``withIdleness`` (:func:`theory.experiments.idleness.
    flink_idle_watermarks`); one input without a partition column."""
    import numpy as np

    # the flink profile is a layer above the core generators: imported on use
    from theory.experiments.idleness import flink_idle_watermarks

    e = np.asarray(event_time, dtype=np.int64)
    a = np.asarray(arrival_time, dtype=np.int64)
    order = np.argsort(a, kind="stable")
    part = np.zeros(e.size, np.int64) if partition is None else np.asarray(partition)
    codes = np.unique(part, return_inverse=True)[1].reshape(-1).astype(np.int64)
    times, values = flink_idle_watermarks(
        e[order], a[order], codes[order], bound=bound, interval=FLINK_INTERVAL,
        idle_timeout=idle_timeout,
    )
    return StepSeries.from_events(times, values, MIN_TIMESTAMP)  # the last at one time wins


def _parse_percentile(arg: str) -> tuple[float, bool]:
    """``<p>`` or ``<p>:hold`` (after ``percentile:``) as ``(p, hold)``; ValueError else."""
    value, colon, mode = arg.partition(":")
    if colon and mode != "hold":
        raise ValueError(f"unknown percentile option {mode!r} (only 'hold')")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"p must be a number in (0, 1], got {value!r}") from None
    return check_p(number), bool(colon)
