"""The flink semantics profile, in µs, with Flink's ``<= W`` watermarks.

==========================  ===========================================================
``conventions``             ms <-> µs, Flink <-> core watermarks, Java's bounds, Flink's
                            bounded out-of-orderness value
``generation``              periodic emission and idleness (incremental and vectorised),
                            watermark schedules
``alignment``               watermark alignment: sources paused by ``max_allowed_drift``
``windows``                 assigners, the ``WindowOperator`` and a whole-stream runner
``valve``                   the ``StatusWatermarkValve`` (and its linear-scan reference)
==========================  ===========================================================
"""
