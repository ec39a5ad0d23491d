"""The *Streaming Systems* chapter-3 pipeline as a Beam module.

=========================================  ===============================================
``python -m beam_pipelines.chapter3``      the command line (:mod:`.cli`)
``build``, ``batch_sources``,              the pipeline's transforms, exactly the pipeline
``streaming_sources``, ``SessionLengths``, ``theory.chapter3`` simulates (:mod:`.pipeline`)
``MeanPerWindow``
``read_chapter3_trace``,                   the input: one trace with a ``platform``
``write_chapter3_trace``                   column (:mod:`.trace`)
=========================================  ===============================================

It runs on any Beam runner; in streaming on ``spark_backend.PySparkRunner``, named by
``--runner`` (Beam resolves the dotted path: this package never imports spark_backend).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from theory import lazy_getattr

if TYPE_CHECKING:
    from beam_pipelines.chapter3.pipeline import (
        MeanPerWindow,
        SessionLengths,
        batch_sources,
        build,
        streaming_sources,
    )
    from beam_pipelines.chapter3.trace import read_chapter3_trace, write_chapter3_trace

_EXPORTS = {
    "MeanPerWindow": "beam_pipelines.chapter3.pipeline",
    "SessionLengths": "beam_pipelines.chapter3.pipeline",
    "batch_sources": "beam_pipelines.chapter3.pipeline",
    "build": "beam_pipelines.chapter3.pipeline",
    "streaming_sources": "beam_pipelines.chapter3.pipeline",
    "read_chapter3_trace": "beam_pipelines.chapter3.trace",
    "write_chapter3_trace": "beam_pipelines.chapter3.trace",
}

__all__ = [
    "MeanPerWindow",
    "SessionLengths",
    "batch_sources",
    "build",
    "read_chapter3_trace",
    "streaming_sources",
    "write_chapter3_trace",
]

__getattr__ = lazy_getattr("beam_pipelines.chapter3", _EXPORTS, globals())
