"""PySparkRunner in streaming (``--streaming``): micro-batches with watermarks per transform.

Architecture (the batch runner's machinery, driven batch by batch)
-----------------------------------------------------------------
1. **Sources** (:mod:`.sources`): each ``TestStream`` is read from the proto by the driver
   and becomes a data input of the stage Beam's fusion puts it in; ``Combine.PerKey`` is
   opened (no combiner lifting in streaming). Then the batch runner's plan (Beam's own
   fusion) gives the fused stages.
2. **Micro-batches** (:mod:`.driver`): under TestStream each event is one batch and a
   test clock starting at 0 moves only by the TestStream's processing-time events
   (whole milliseconds; Beam's AfterProcessingTime takes whole seconds); without one, a
   real clock. With ``--test_stream_batches=instant`` a batch takes every event of one
   processing time instead (a clock step, then elements, then watermarks: what Beam
   runs one by one gives the same panes), so a replayed trace runs one batch per
   distinct arrival time. A TestStream of several output tags is one source per tag
   (``label[tag]``), each with its own watermark. Each batch runs the fused stages on
   Spark with the batch runner's bundle machinery
   (:func:`spark_backend.runner.bundles.run_partition`), skipping stages with no input.
3. **GroupByKey and Combine** (:mod:`.grouping`): theory's Beam-exact
   :class:`~theory.windowing.engine.GroupByWindowEngine` runs inside Spark tasks, one per
   key partition, its state kept between batches in a persisted key-partitioned RDD. The
   driver computes each GroupByKey's input and output watermark and hands them to the
   tasks; it reads back only each partition's hold and next timers.
4. **Watermarks** (:mod:`.watermarks`): theory's stage graph over the pipeline's
   transforms, with every GroupByKey's ``state:pending-windows`` hold, latched as
   DESIGN.md defines; a source that sends nothing keeps its watermark. The result's
   ``watermarks()`` and ``why(label, at)`` read it (:mod:`.result`).

Divergences from BundleBasedDirectRunner, each tested: pane timestamps cross Beam's
windowed-value coder, which keeps whole milliseconds (a pane at a window's
``max_timestamp`` = end − 1 µs comes out at end − 1 ms), as on every portable runner.
The engine's output watermark is Beam Python's (not latched; it decides holds and
timing); the tracker's, which ``watermarks()`` shows and downstream stages read, is
latched as DESIGN.md says.

Not yet supported (refused before any Spark work, naming the transform): stateful DoFns
and timers, side inputs, splittable DoFns and unbounded reads; checkpoints.
``--max_batches`` stops after that many batches.
"""

from __future__ import annotations

from spark_backend.runner.streaming.result import StreamingPipelineResult

__all__ = ["StreamingPipelineResult"]
