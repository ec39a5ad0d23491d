"""theory: the Dataflow model's theory of watermarks (*Streaming Systems*, chapter 3).

All event times and processing times are int64 **microseconds** since the Unix epoch. A
watermark ``W`` asserts that no more non-late data with event time ``< W`` will arrive
(Beam's convention; Flink's ``<= W`` is converted at the edge, in :mod:`theory.flink`).

Import the public names from here (``from theory import FixedWindows, simulate``); the
exports are resolved lazily, so ``import theory`` loads nothing else. The map of the
package, one idea a folder:

==========================  ===========================================================
``theory.time``             µs constants, checks and conversions, duration strings
``theory.series``           ``StepSeries``: right-continuous step functions of time
``theory.columns``          the one home of column and scalar argument checks
``theory.arrays``           vectorised int64 kernels shared by the curves (cover-min, ...)
``theory.structures``       ``OrderStatisticList``, ``IndexedMinHeap``, ``Frontier``
``theory.wavelet``          batched k-th smallest in array suffixes (a wavelet matrix)
``theory.data``             traces: schema and rules, parsing, validation, I/O, the
                            generators' specs and numpy generators
``theory.windowing``        windows, ``WindowingStrategy``, triggers, scripts, the
                            grouping engine (incremental), its vectorised paths
                            (non-merging windows, sessions; panes as columns), and
                            ``run_script``, which picks between them
``theory.watermarks``       source watermarks (perfect, heuristic), the spec grammar,
                            percentile watermarks (exact, sketch), hold series, the
                            per-bucket curves of an arrival-time-bucketed trace
``theory.pipeline``         the stage graph, stages, the simulator, metrics, diagnosis
                            (processing-time watermarks), the chapter-3 pipeline
``theory.flink``            the flink profile: conventions, periodic generation and
                            idleness, alignment, window operators, the valve
``theory.spark``            the spark profile: micro-batch watermarks, late rows and
                            emission (``run_microbatches``), state-API timers, the
                            whole-trace profile
``theory.dataflow``         the dataflow profile: central aggregator, Pub/Sub estimator
                            and its simulation
``theory.experiments``      trade-off, propagation; intervals over seeds and bootstrap
                            intervals over windows
``theory.progress``         ``Progress``: a text progress bar for long work (every CLI)
``theory.memory``           opt-in: glibc keeps freed memory in a block (large runs)
==========================  ===========================================================
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

# name -> module that defines it (a module itself where the name is the module's last part)
_EXPORTS: dict[str, str] = {
    # time
    **dict.fromkeys(
        (
            "MIN_TIMESTAMP",
            "MAX_TIMESTAMP",
            "END_OF_GLOBAL_WINDOW",
            "MILLISECOND",
            "SECOND",
            "MINUTE",
            "HOUR",
            "DAY",
            "parse_duration",
        ),
        "theory.time",
    ),
    "StepSeries": "theory.series",
    # windowing
    **dict.fromkeys(
        (
            "FixedWindows",
            "SlidingWindows",
            "Sessions",
            "GlobalWindows",
            "IntervalWindow",
            "WindowOverflowError",
        ),
        "theory.windowing.windows",
    ),
    **dict.fromkeys(
        ("WindowingStrategy", "AccumulationMode", "TimestampCombiner"),
        "theory.windowing.strategy",
    ),
    **dict.fromkeys(
        (
            "Trigger",
            "DefaultTrigger",
            "AfterWatermark",
            "AfterProcessingTime",
            "AfterCount",
            "AfterAny",
            "AfterAll",
            "AfterEach",
            "OrFinally",
            "Repeatedly",
            "Always",
            "Never",
        ),
        "theory.windowing.triggers",
    ),
    **dict.fromkeys(
        ("Script", "ElementEvent", "WatermarkEvent", "ProcessingTimeEvent"),
        "theory.windowing.script",
    ),
    **dict.fromkeys(("GroupByWindowEngine", "Pane"), "theory.windowing.engine"),
    "run_script": "theory.windowing.runner",
    # watermarks
    "make_source_watermark": "theory.watermarks.spec",
    **dict.fromkeys(("perfect_curve", "perfect_oracle_curve"), "theory.watermarks.perfect"),
    "PercentileWatermark": "theory.watermarks.percentile",
    "SketchPercentileWatermark": "theory.watermarks.percentile_sketch",
    # pipeline
    **dict.fromkeys(
        ("Pipeline", "Source", "ParDo", "GroupByWindow", "Flatten"), "theory.pipeline.stages"
    ),
    "Processing": "theory.pipeline.processing",
    "simulate": "theory.pipeline.simulator",
    "diagnose": "theory.pipeline.diagnosis",
    "stage_metrics": "theory.pipeline.metrics",
    "chapter3": "theory.pipeline.chapter3",
    # data
    "Trace": "theory.data.trace",
    "read_trace": "theory.data.io",
    "generate_trace": "theory.data.generators",
    "scale_to_us": "theory.data.units",
    # profiles
    **dict.fromkeys(("StatusWatermarkValve", "StreamStatus"), "theory.flink.valve"),
    **dict.fromkeys(("MicroBatch", "run_microbatches"), "theory.spark.microbatch"),
    "spark_trace_profile": "theory.spark.trace",
    "compare_systems": "theory.experiments.systems",
    "grouping_pipeline": "theory.experiments.tradeoff",
    "Firing": "theory.experiments.first_panes",
    **dict.fromkeys(
        ("IntervalTable", "over_seeds", "bootstrap_windows"), "theory.experiments.uncertainty"
    ),
    "TrackingEstimator": "theory.dataflow.pubsub",
    "CentralAggregator": "theory.dataflow.aggregator",
}

__all__ = [
    "DAY",
    "END_OF_GLOBAL_WINDOW",
    "HOUR",
    "MAX_TIMESTAMP",
    "MILLISECOND",
    "MINUTE",
    "MIN_TIMESTAMP",
    "SECOND",
    "AccumulationMode",
    "AfterAll",
    "AfterAny",
    "AfterCount",
    "AfterEach",
    "AfterProcessingTime",
    "AfterWatermark",
    "Always",
    "CentralAggregator",
    "DefaultTrigger",
    "ElementEvent",
    "Firing",
    "FixedWindows",
    "Flatten",
    "GlobalWindows",
    "GroupByWindow",
    "GroupByWindowEngine",
    "IntervalTable",
    "IntervalWindow",
    "MicroBatch",
    "Never",
    "OrFinally",
    "Pane",
    "ParDo",
    "PercentileWatermark",
    "Pipeline",
    "Processing",
    "ProcessingTimeEvent",
    "Repeatedly",
    "Script",
    "Sessions",
    "SketchPercentileWatermark",
    "SlidingWindows",
    "Source",
    "StatusWatermarkValve",
    "StepSeries",
    "StreamStatus",
    "TimestampCombiner",
    "Trace",
    "TrackingEstimator",
    "Trigger",
    "WatermarkEvent",
    "WindowOverflowError",
    "WindowingStrategy",
    "bootstrap_windows",
    "chapter3",
    "compare_systems",
    "diagnose",
    "generate_trace",
    "grouping_pipeline",
    "make_source_watermark",
    "over_seeds",
    "parse_duration",
    "perfect_curve",
    "perfect_oracle_curve",
    "read_trace",
    "run_microbatches",
    "run_script",
    "scale_to_us",
    "simulate",
    "spark_trace_profile",
    "stage_metrics",
]


def lazy_getattr(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) resolving ``exports`` (public name -> the
    module defining it; a module itself where the name is the module's last part) on first
    use and caching the value in ``namespace`` (the package's ``globals()``). Shared by
    the packages whose ``__init__`` must load nothing else; not part of the API."""

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(module_name)
        value = module if module_name.rpartition(".")[2] == name else getattr(module, name)
        namespace[name] = value
        return value

    return __getattr__


#: Resolve a public name on first use, then cache it in the module.
__getattr__ = lazy_getattr("theory", _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static checkers see the eager imports; runtime stays lazy
    from theory.data.generators import generate_trace
    from theory.data.io import read_trace
    from theory.data.trace import Trace
    from theory.data.units import scale_to_us
    from theory.dataflow.aggregator import CentralAggregator
    from theory.dataflow.pubsub import TrackingEstimator
    from theory.experiments.first_panes import Firing
    from theory.experiments.systems import compare_systems
    from theory.experiments.tradeoff import grouping_pipeline
    from theory.experiments.uncertainty import IntervalTable, bootstrap_windows, over_seeds
    from theory.flink.valve import StatusWatermarkValve, StreamStatus
    from theory.pipeline import chapter3
    from theory.pipeline.diagnosis import diagnose
    from theory.pipeline.metrics import stage_metrics
    from theory.pipeline.processing import Processing
    from theory.pipeline.simulator import simulate
    from theory.pipeline.stages import Flatten, GroupByWindow, ParDo, Pipeline, Source
    from theory.series import StepSeries
    from theory.spark.microbatch import MicroBatch, run_microbatches
    from theory.spark.trace import spark_trace_profile
    from theory.time import (
        DAY,
        END_OF_GLOBAL_WINDOW,
        HOUR,
        MAX_TIMESTAMP,
        MILLISECOND,
        MIN_TIMESTAMP,
        MINUTE,
        SECOND,
        parse_duration,
    )
    from theory.watermarks.percentile import PercentileWatermark
    from theory.watermarks.percentile_sketch import SketchPercentileWatermark
    from theory.watermarks.perfect import perfect_curve, perfect_oracle_curve
    from theory.watermarks.spec import make_source_watermark
    from theory.windowing.engine import GroupByWindowEngine, Pane
    from theory.windowing.runner import run_script
    from theory.windowing.script import ElementEvent, ProcessingTimeEvent, Script, WatermarkEvent
    from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
    from theory.windowing.triggers import (
        AfterAll,
        AfterAny,
        AfterCount,
        AfterEach,
        AfterProcessingTime,
        AfterWatermark,
        Always,
        DefaultTrigger,
        Never,
        OrFinally,
        Repeatedly,
        Trigger,
    )
    from theory.windowing.windows import (
        FixedWindows,
        GlobalWindows,
        IntervalWindow,
        Sessions,
        SlidingWindows,
        WindowOverflowError,
    )
