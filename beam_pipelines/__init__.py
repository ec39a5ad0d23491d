"""beam_pipelines: Apache Beam integration of the watermark model.

The public names load lazily (``import beam_pipelines`` imports neither Beam nor
google-cloud-pubsub; the pytest plugin relies on it):

=========================================  ===============================================
``to_theory``, ``to_beam``                 windowing strategies, Beam <-> theory
                                           (:mod:`beam_pipelines.convert`)
``from_trace``, ``trace_script``,          TestStreams from traces and scripts, tagged
``to_test_stream``, ``from_test_stream``   inputs with their own watermarks
                                           (:mod:`beam_pipelines.teststream`)
``trace_watermarks``                       every transform's watermarks on the direct
                                           runner (:mod:`beam_pipelines.tracing`)
``BoundedOutOfOrdernessEstimatorProvider``,  watermark estimators for splittable DoFns
``ProcessingTimeLagEstimatorProvider``,    (:mod:`beam_pipelines.estimators`)
``PercentileEstimatorProvider``
``ReadFromPubSubWithTrackingWatermark``    Pub/Sub read with the base/tracking watermark
                                           (:mod:`beam_pipelines.pubsub_sdf`)
``query_metrics``                          a result's metrics past FnApiRunner's
                                           recursion limit (:mod:`beam_pipelines.metrics`)
=========================================  ===============================================

The test kit is :mod:`beam_pipelines.testing` (assertions, Hypothesis strategies) and the
pytest plugin :mod:`beam_pipelines.pytest_plugin` (fixtures); while the kit builds and
runs a pipeline, Beam's repeated DoFn and option introspection is answered once
(:mod:`beam_pipelines.construction_cache`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from theory import lazy_getattr

if TYPE_CHECKING:
    from beam_pipelines.convert import to_beam, to_theory
    from beam_pipelines.estimators import (
        BoundedOutOfOrdernessEstimatorProvider,
        PercentileEstimatorProvider,
        ProcessingTimeLagEstimatorProvider,
    )
    from beam_pipelines.metrics import query_metrics
    from beam_pipelines.pubsub_sdf import ReadFromPubSubWithTrackingWatermark
    from beam_pipelines.teststream import (
        from_test_stream,
        from_trace,
        to_test_stream,
        trace_script,
    )
    from beam_pipelines.tracing import trace_watermarks

_EXPORTS: dict[str, str] = {
    "to_beam": "beam_pipelines.convert",
    "to_theory": "beam_pipelines.convert",
    "from_trace": "beam_pipelines.teststream",
    "trace_script": "beam_pipelines.teststream",
    "to_test_stream": "beam_pipelines.teststream",
    "from_test_stream": "beam_pipelines.teststream",
    "trace_watermarks": "beam_pipelines.tracing",
    "query_metrics": "beam_pipelines.metrics",
    "BoundedOutOfOrdernessEstimatorProvider": "beam_pipelines.estimators",
    "ProcessingTimeLagEstimatorProvider": "beam_pipelines.estimators",
    "PercentileEstimatorProvider": "beam_pipelines.estimators",
    "ReadFromPubSubWithTrackingWatermark": "beam_pipelines.pubsub_sdf",
}

__all__ = [
    "BoundedOutOfOrdernessEstimatorProvider",
    "PercentileEstimatorProvider",
    "ProcessingTimeLagEstimatorProvider",
    "ReadFromPubSubWithTrackingWatermark",
    "from_test_stream",
    "from_trace",
    "query_metrics",
    "to_beam",
    "to_test_stream",
    "to_theory",
    "trace_script",
    "trace_watermarks",
]


__getattr__ = lazy_getattr("beam_pipelines", _EXPORTS, globals())
