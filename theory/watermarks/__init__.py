"""Watermarks: source watermarks and their spec grammar, percentile watermarks, holds.

=======================  ==============================================================
``latch``                the latch rule (monotonic, regressions counted), the
                         ``SourceWatermark`` protocol, ``LatchedWatermark``
``source_trace``         a source trace's columns, checked and in arrival order
``perfect``              ingress, the whole-trace oracle, static partitions
``heuristic``            bounded out-of-orderness, dynamic partitions (idle timeout)
``percentile``           the percentile definition, rank rule, exact incremental form
``percentile_sweep``     the vectorised percentile curve (the measured hot path)
``percentile_sketch``    the bounded-memory percentile form (KLL sketches)
``percentile_source``    the percentile watermark at the source (the backlog)
``spec``                 the spec grammar (``bounded:30s``, ``percentile:0.9``, ...)
``holds``                the in-flight minimum of a stage's output buffer
``holdback``             which partition holds the static-partitions perfect watermark
                         back, as runs over processing time
``buckets``              one arrival-time bucket of a trace and its carry (the parallel
                         scan that Spark's analytics run per bucket)
``bucket_curves``        the source watermark curves of one bucket, given its carry
``backlog``              a bucket's source backlog and its percentile values
=======================  ==============================================================

Conventions of the source watermarks (all times int µs, docs/semantics.md, "Time" and "Source
watermarks"):

- A watermark ``W`` asserts that no more non-late data with event time ``< W`` will
  arrive (Beam's convention). Flink's ``<= W`` lives in :mod:`theory.flink.conventions`.
- Every watermark starts at ``MIN_TIMESTAMP`` and is latched monotonic
  (:mod:`~theory.watermarks.latch`).
- Elements are read in arrival (processing-time) order; ties keep their trace order (a
  stable sort). The watermark is recomputed and latched after every element; the value
  *at* processing time ``t`` is the one after the last element arriving at ``t``.
- Each generator has an incremental object (``observe`` / ``current`` / ``regressions``
  / ``advance_to``) and a vectorised ``*_curve(event_time, arrival_time, partition=None,
  ...)`` returning a :class:`~theory.series.StepSeries` whose step times are the unique
  arrival times (plus idle-expiry instants for ``dynamic_partitions_curve`` with a
  timeout; ``percentile_source_curve`` also steps at event times) and whose values are
  the latched watermark there. Both give identical answers.
- ``advance_to(t)`` declares that processing time has reached ``t`` and that every
  element arriving at or before ``t`` has been observed; later elements must arrive
  after ``t``.
"""
