"""The spark semantics profile: Spark Structured Streaming's watermark rules, in µs.

==========================  ===========================================================
``conventions``             ms truncation, the output modes and policies, which windows
                            Spark expresses (and Spark's refusals)
``microbatch``              ``run_microbatches``: batch by batch, the watermark each
                            batch uses, the rows it drops, what the sink receives
``timers``                  the state APIs' event-time timer rules
``trace``                   the whole-trace profile (vectorised): triggers, emission
                            times, late rows and latency
==========================  ===========================================================
"""

from theory.spark.microbatch import BatchClock, MicroBatch, batch_watermarks, run_microbatches

__all__ = ["BatchClock", "MicroBatch", "batch_watermarks", "run_microbatches"]
