"""PySparkRunner in streaming (``--streaming``): micro-batches with watermarks per transform.

Architecture (the batch runner's machinery, driven batch by batch)
-----------------------------------------------------------------
0. **Start** (:mod:`.run`): the streaming run's own checks (:mod:`.checks`, after the
   batch checks), then the sources, the plan and the driver; a TestStream's elements
   are taken from the pipeline object as columns (:mod:`.elements`).
1. **Sources** (:mod:`.sources`): each ``TestStream`` is read from the proto by the driver
   (or from the TestStreamService its endpoint names, :mod:`.event_service`) and
   becomes a data input of the stage Beam's fusion puts it in (an element that carries
   its own window, Beam's ``WindowedValueHolder``, keeps it: its windows' coder is put on
   every PCollection inheriting them); a ``Combine.PerKey``
   is lifted only where its panes stay the same (non-merging windows, END_OF_WINDOW,
   Beam's liftable triggers: :mod:`.lifting`), else opened. Then the batch runner's plan
   (Beam's own fusion) gives the fused stages, the lean ones as in batch; a lean stage
   reading a TestStream takes its elements as a columnar batch in the same task.
   ``PySparkRunner(fast_paths=False)`` lifts nothing and runs no stage lean (the
   reference).
2. **Micro-batches** (:mod:`.driver`): under TestStream each event is one batch and a
   test clock starting at 0 moves only by the TestStream's processing-time events
   (whole milliseconds; Beam's AfterProcessingTime takes whole seconds); without one, a
   real clock. With ``--test_stream_batches=instant`` a batch takes every event of one
   processing time instead (a clock step, then elements, then watermarks: what Beam
   runs one by one gives the same panes), so a replayed trace runs one batch per
   distinct arrival time. A TestStream of several output tags is one source per tag
   (``label[tag]``), each with its own watermark. Each batch runs the fused stages on
   Spark with the batch runner's bundle machinery
   (:func:`spark_backend.runner.stages.bundles.run_partition`), skipping stages with no input.
3. **GroupByKey and Combine** (:mod:`.grouping`): theory's Beam-exact
   :class:`~theory.windowing.engine.GroupByWindowEngine` runs inside Spark tasks, one per
   key partition, its state kept between batches in a persisted key-partitioned RDD. The
   driver computes each GroupByKey's input and output watermark and hands them to the
   tasks; it reads back only each partition's hold and next timers.
4. **Stateful DoFns** (:mod:`.keyed_state`): a stage starts at every stateful DoFn;
   its keyed input and its partitions' state (Beam's user state as the SDK's
   ``StateServicer`` holds it, and the pending timers) meet in one task per key
   partition, the state kept between batches as the GroupByKeys' is. Event-time timers
   fire when the input watermark reaches them, processing-time timers when the clock
   does, in Beam's direct runner's order; a pending timer's hold timestamp holds the
   transform's output watermark (``state:timers``). The state contract for checkpoints
   is in :mod:`.keyed_state`'s docstring.
5. **Unbounded splittable DoFns** (:mod:`.unbounded`): one bundle per batch; a
   checkpointed restriction comes back as a residual kept by the driver (the source's
   position) and resumed in a later batch, after its ``defer_remainder`` delay; its
   ``WatermarkEstimator``'s watermark is the transform's ``source:watermark-estimator``
   hold. The run goes on while residuals remain (``--max_batches`` or ``cancel`` stop
   it). No bundle finalizer is called (see :mod:`.driver`): acks follow the driver's
   commit through the reader's resume, never precede it.
6. **Side inputs** (:mod:`.side_views`, :mod:`.pushback`): a ParDo with side inputs
   starts its stage. The driver keeps each side PCollection's contents per window (it
   collects the side chunks of each batch; it never reads a main input) and tells the
   tasks, per side input, its output watermark and the windows with a pane. A main
   element in window ``W`` runs when ``window_mapping(W)`` is ready (a pane, or the side
   watermark at the window's end: then an empty view or the default), else it waits in
   the partition's state, holding the ParDo's output watermark (``state:side-input``).
   With the default trigger the view is every side element of the window
   (BundleBasedDirectRunner's); with any other trigger the side elements go through
   theory's engine and each pane replaces the view (Beam's model: the "slowly changing"
   side input). A side input does not hold a ParDo's input watermark (Beam's runners).
   The views and the waiting elements are checkpointed; the shape records each view
   (access pattern, WindowFn, trigger kind).
7. **Watermarks** (:mod:`.watermarks`): theory's stage graph over the pipeline's
   transforms, with every GroupByKey's ``state:pending-windows`` hold, every stateful
   DoFn's ``state:timers`` and every SDF's ``source:watermark-estimator``, latched as
   docs/semantics.md defines; a source that sends nothing keeps its watermark. While a stateful
   or splittable DoFn's batch runs, ``buffer:in-flight`` keeps its output watermark
   where it was. The result's ``watermarks()`` and ``why(label, at)`` read it
   (:mod:`.result`), shown as a table and with composite labels resolved (:mod:`.observe`);
   ``result.metrics()`` has each GroupByKey's and Combine's ``droppedDueToLateness``
   (:mod:`spark_backend.runner.grouping.late_data`).

Divergences from BundleBasedDirectRunner, each tested: pane timestamps cross Beam's
windowed-value coder, which keeps whole milliseconds (a pane at a window's
``max_timestamp`` = end − 1 µs comes out at end − 1 ms), as on every portable runner.
The engine's output watermark is Beam Python's (not latched; it decides holds and
timing); the tracker's, which ``watermarks()`` shows and downstream stages read, is
latched as docs/semantics.md says. Stateful DoFns: a pending timer holds the output watermark
here (the Fn API's hold timestamp), not on BundleBasedDirectRunner (a TODO in Beam's
``direct_userstate.py``), so a timer's output may be on time downstream here and late
there; timers and their outputs carry whole milliseconds (Beam's timer coder).

5. **Checkpoints** (:mod:`.checkpoint`, ``--checkpoint_dir``): after every batch, each
   keyed step's per-partition state (saved by its tasks: GroupByKey engines, user
   state and timers), an unbounded read's residuals, the watermarks and holds, the
   sources' positions (:mod:`.positions`), the processing clock, the metrics and the batch
   number are committed atomically; a restart of the same pipeline resumes after the last
   commit. The directory records the pipeline's shape (:mod:`.shape`: labels, URNs,
   coders); another shape is refused naming the first difference. Nothing in it is
   unpickled: its files are JSON documents of :mod:`.codec`, which names the runner's
   state classes only.
6. **Batch sinks** (:mod:`.sinks`): :class:`beam_pipelines.sinks.WriteBatchesToText`
   writes each batch's output under ``batch-N/``, committed atomically before the
   checkpoint, so a replayed batch replaces its output.
7. **Stopping**: ``result.cancel()`` at a batch boundary; ``wait_until_finish(duration)``
   returns after ``duration`` ms; ``--max_batches N`` stops after N batches of this run;
   ``--drain`` (or ``result.drain()``) stops the sources, puts every watermark at
   ``MAX_TIMESTAMP`` in one last batch (every pending window fires), then ends; in that
   batch each unbounded read's residuals run once more, truncated by the DoFn's
   ``truncate`` as in Beam's drain (the Pub/Sub reader sends its last acks there).

Divergence of side inputs, tested: a triggered side input's view is its latest pane from
the first pane on; BundleBasedDirectRunner instead blocks its main elements until the side
input's watermark passes the window's end (the global window: the side input's end) and
then reads every element of every pane.

Not yet supported (refused before any Spark work, naming the transform): side inputs on a
stateful or splittable DoFn, ``Read`` (a splittable DoFn reads instead), map and
multimap state, a splittable DoFn with state, Beam's batch file sink (``iobase.Write``). A
splittable DoFn must checkpoint itself: the runner does not split a running bundle. User
state is garbage-collected when the input watermark passes its window's end plus the
allowed lateness (Beam's rule; BundleBasedDirectRunner keeps it). No bundle finalizer is called.
"""

from __future__ import annotations

from spark_backend.runner.streaming.result import StreamingPipelineResult

__all__ = ["StreamingPipelineResult"]
