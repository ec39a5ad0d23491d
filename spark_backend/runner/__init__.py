"""PySparkRunner: Beam pipelines on PySpark (batch, and streaming), with Beam's exact semantics.

Select it with ``--runner=spark_backend.PySparkRunner`` or
``beam.Pipeline(runner=PySparkRunner())``; ``--spark_master`` (alias
``--spark_master_url``) and repeatable ``--spark_conf KEY=VALUE`` choose the cluster
(:mod:`~spark_backend.runner.plan.options`; the session comes from
:func:`spark_backend.session.session.get_session`).

The package, plan -> stages -> execution (each sub-package's docstring maps its modules):

==================  ==============================================================
``runner``          ``PySparkRunner``: checks, plans and runs a pipeline
``errors``          the errors a Beam author sees
``plan``            the options, the check of a pipeline, Beam's fused stages
``stages``          task side: a fused stage over one partition, on Beam's bundle
                    processor or the lean path
``grouping``        GroupByKey: the shuffle, then windows, timestamps and panes
``batch``           driver side: a plan's stages as Spark jobs, and the result
``streaming``       ``--streaming``: micro-batches with watermarks per transform
==================  ==============================================================

Architecture (as Beam's portable Flink and Spark runners are built)
-------------------------------------------------------------------
1. **Check** (:mod:`.plan.options`, :mod:`.plan.validate`): options, then every leaf
   transform of the pipeline proto, before any Spark work. An unknown kind raises
   :class:`UnsupportedTransformError` naming label and URN; nothing falls back or is
   dropped. Which kinds run, and by which modules, batch and streaming, is one table
   (:mod:`.plan.translation_table`), from URN to translation.
2. **Plan** (:mod:`.plan.plan`): Beam's own phases of FnApiRunner (combiner lifting, SDF
   expansion, GroupByKey expansion, flatten sinking, greedy fusion) turn the proto into
   fused stages, and Beam's execution context builds each stage's
   ``ProcessBundleDescriptor``. Fusion is exactly FnApiRunner's: each stage boundary
   is a coder crossing that rounds timestamps to milliseconds, so another boundary
   would change the output.
3. **Execute** (:mod:`.batch.executor`, driver): one Spark job per stage, in Beam's order.
   Every PCollection crossing stages is an RDD of chunks encoded with the pipeline's own
   coders. Spark does what a runner owns: the GroupByKey shuffle on coder bytes
   (:mod:`.grouping.group_by_key`; keys hashed with crc32, the same in every process), the lifted
   Combine's merge (a GroupByKey after the partial combine), partitioning of stateful
   input by key, side-input materialisation (collected and broadcast), retries.
4. **Bundles** (:mod:`.stages.bundles`, task side): a partition is one bundle run by Beam's
   ``SdkWorker`` over in-memory data channels (FnApiRunner's embedded worker), so
   DoFn lifecycle, parameters, tagged outputs, windowing, state and timers are Beam's
   own code. Timers and SDF residuals run in further bundles of the same task; the
   restrictions Beam's SplitAndSize produced are spread one per record over tasks.
   **Lean stages** (:mod:`.stages.lean`): a stage made only of known transforms -- plain
   ParDos (Map/FlatMap/Filter and DoFns that ask for no timestamp, window, pane, state,
   side input), WindowInto, a lifted combine's phases, Flatten -- runs without the
   bundle processor: columnar batches (:mod:`.stages.lean.batch`), the user's function in a
   tight loop (:mod:`.stages.lean.pardo`), windows assigned on the int64 µs column
   (:mod:`.stages.lean.windows`), the partial combine of built-in CombineFns on int values by
   numpy (:mod:`.stages.lean.combine`), outputs written in Beam's coder bytes without a Beam
   object per element (:mod:`.stages.lean.encode`). ``StageSpec.path`` and the result's
   ``stage_paths`` say which path ran each stage, ``Plan.reasons`` why a stage is not
   lean; ``PySparkRunner(fast_paths=False)`` runs every stage on Beam's bundles.
5. **Grouping** (:mod:`.grouping.group_by_key`): after the shuffle, windows, merged sessions,
   timestamps (TimestampCombiner) and panes are assigned by theory's
   ``GroupByWindowEngine`` (:mod:`.grouping.engine`, the fast path) for Fixed, Sliding
   and Sessions windows under the default trigger or a bare ``AfterWatermark()``, a
   whole partition per call; by Beam's batch trigger driver (what FnApiRunner's
   ``GroupingBuffer`` runs, the reference) otherwise or with
   ``PySparkRunner(fast_paths=False)``. ``Plan.paths`` and the result's ``paths`` say
   which path grouped each GroupByKey. Both give FnApiRunner's outputs (tested). On the
   engine's path the shuffle carries columns (:mod:`.grouping.keyed_columns`: key and value
   bytes, coder-rounded µs; written by lean stages, Beam's bytes decoded once) and
   each partition is grouped by one numpy sort (:mod:`.grouping.columns`), the output
   written in Beam's bytes from the value bytes; ``Plan.columnar`` and the result's
   ``columnar`` name those GroupByKeys.
   Stages that share no data run at the same time (:mod:`.batch.schedule`).
6. **Result** (:mod:`.batch.result`): the run happens in a driver thread under a Spark job
   group (``cancel``, ``wait_until_finish(duration)``). Metrics come back as records
   of each stage's output, not accumulators, so a retried task's metrics count once.

Why Beam's machinery and not hand-translated RDD code: exactness comes with it (every
DoFn feature and windowing rule is Beam's own code; the differential suite compares
with FnApiRunner and caught the one divergence, an extra stage boundary rounding
timestamps), and once user DoFns run, the per-element cost is Beam's either way. A
hand-written ``map`` + ``reduceByKey`` of the windowed combine is faster than this
generic path (``bench/runner.py``), which is where fast paths
for known WindowFns and CombineFns pay: the lean stages and the grouping path (theory's
engine in place of Beam's trigger driver) are built, and this generic path stays the
reference and the fallback for everything else. Spark Connect
is refused: it has no RDDs.

Streaming (``--streaming``, TestStream sources, micro-batches with watermarks per
transform, GroupByKey decided by theory's engine) is :mod:`spark_backend.runner.streaming`;
a batch run refuses TestStream as streaming-only.

Not yet supported (refused or untested): processing-time timers
(refused), time-sorted input (refused); runner-initiated
(dynamic) splits of a running restriction; a stateful DoFn fused after
other transforms runs its stage as one task (FnApiRunner's fusion puts it there, and a
key-partitioning boundary before it would round timestamps, see above).
"""

from __future__ import annotations

from spark_backend.runner.batch.result import PySparkPipelineResult
from spark_backend.runner.errors import PipelineFailedError, UnsupportedTransformError
from spark_backend.runner.plan.options import PySparkRunnerOptions
from spark_backend.runner.runner import PySparkRunner

__all__ = [
    "PipelineFailedError",
    "PySparkPipelineResult",
    "PySparkRunner",
    "PySparkRunnerOptions",
    "UnsupportedTransformError",
]
