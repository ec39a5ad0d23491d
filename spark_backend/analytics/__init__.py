"""Watermark analytics of a trace on Spark, exact: the same numbers as :mod:`theory`.

Everything here is computed from a trace DataFrame (columns of :mod:`theory.data.schema`;
times are bigint µs) and agrees exactly with theory's vectorised numpy results on the
same rows; ``tests/spark_backend/analytics/test_analytics.py`` shows it.

How it scales: :func:`prepare` cuts processing time into *buckets*, contiguous
arrival-time ranges with about the same number of rows, one Spark partition each,
persisted. Every scan over time (suffix minimum, prefix maximum, latching) is then a
*parallel scan*: a tiny per-bucket summary is combined on the driver into per-bucket
carries, which go back (in the task closure) to theory's numpy kernels of each bucket
(:mod:`theory.watermarks.bucket_curves`, in ``mapInArrow``). No window function ever
sees all rows in one partition.

Strategies (source watermarks; a watermark ``W`` says "no more data with event time < W"),
with a step per unique arrival time ``t``, the value after every element arriving at
``t`` was read, as :mod:`theory.watermarks` defines them:

- ``perfect``: ``W(t) = min(t, min event_time of the elements arriving after t)`` =
  :func:`theory.watermarks.perfect.perfect_curve` (never ahead of the clock);
  ``perfect:oracle``: uncapped (MAX_TIMESTAMP once none is left) =
  :func:`theory.watermarks.perfect.perfect_oracle_curve`.
- ``bounded:<duration>``: ``max event_time seen - bound`` (>= MIN_TIMESTAMP) =
  :func:`theory.watermarks.heuristic.bounded_out_of_orderness_curve`.
- ``percentile:<p>``, p in (0, 1]: exactly
  :func:`theory.watermarks.percentile_source.percentile_source_curve`, the order statistic of rank
  ``floor((n - 1) * (1 - p))`` of the *backlog* ``A(t) = {event_time <= t <
  arrival_time}``, or the perfect watermark where it is empty, latched; its curve also
  steps at event times. ``percentile:<p>:hold`` has no fallback. Exact, no sketch: per
  bucket a wavelet-matrix order-statistics scan (:mod:`theory.wavelet`).
- ``static`` (= ``perfect``) and ``flink-bounded:<d>`` (Flink's bounded watermark
  converted) per bucket too; ``dynamic[:idle=<d>]`` and ``flink-bounded:<d>:idle=<t>``
  in one pass over the whole trace (``sequential``).

An element is *late* under a strategy when ``event_time < W.before(arrival_time)``, the
watermark just before it arrived (:meth:`theory.series.StepSeries.before`).

Small results come back as pandas DataFrames (µs, counts); curves as Spark DataFrames
(lazy) with :meth:`WatermarkAnalysis.curve` / :meth:`WatermarkAnalysis.sample` to collect.

The package, one idea a module (import the public names from here):

==============  ===================================================================
``strategies``  ``Strategy``, ``parse_strategy``: the specs, and how Spark computes each
``layout``      ``prepare``, ``ArrivalLayout``: bucket planning, the one shuffle, carries
``passes``      the Python pass over the buckets and the table it yields
``sequential``  the strategies computed in one pass over the whole trace
``analysis``    ``analyze``, ``WatermarkAnalysis``: late counts, curves, values at times
``windows``     fixed windows fired by each watermark: completeness, latency
``holdback``    ``holdback``: which partition or key holds the perfect watermark back
``frames``      small helpers between Spark, Arrow and pandas
==============  ===================================================================
"""

from __future__ import annotations

from spark_backend.analytics.analysis import WatermarkAnalysis, analyze
from spark_backend.analytics.holdback import holdback
from spark_backend.analytics.layout import ArrivalLayout, prepare
from spark_backend.analytics.strategies import Strategy, parse_strategy

__all__ = [
    "ArrivalLayout",
    "Strategy",
    "WatermarkAnalysis",
    "analyze",
    "holdback",
    "parse_strategy",
    "prepare",
]
