"""Task side: the pipeline's coders and windowing strategies, rebuilt once per process.

A Spark Python worker runs many tasks of one job; rebuilding Beam's ``PipelineContext``
from the serialised Components costs milliseconds, so it is cached per job id (the
last few jobs only, as a worker process may outlive a pipeline).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

from apache_beam.coders.coder_impl import CoderImpl
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context

__all__ = ["coder", "coder_impl", "pipeline_context_for", "windowing"]

_KEEP: Final[int] = 4
_LOCK = threading.Lock()
_CONTEXTS: OrderedDict[str, Any] = OrderedDict()


def pipeline_context_for(job_id: str, components: bytes) -> Any:
    """Beam's PipelineContext of the job's Components (cached per job id)."""
    with _LOCK:
        found = _CONTEXTS.get(job_id)
        if found is None:
            proto = beam_runner_api_pb2.Components.FromString(components)
            found = pipeline_context.PipelineContext(proto)
            _CONTEXTS[job_id] = found
            while len(_CONTEXTS) > _KEEP:
                _CONTEXTS.popitem(last=False)
        return found


def coder(job_id: str, components: bytes, coder_id: str) -> Any:
    """The Beam coder ``coder_id`` of the job."""
    return pipeline_context_for(job_id, components).coders[coder_id]


def coder_impl(job_id: str, components: bytes, coder_id: str) -> CoderImpl:
    """The implementation of the Beam coder ``coder_id`` of the job."""
    return coder(job_id, components, coder_id).get_impl()


def windowing(job_id: str, components: bytes, strategy_id: str) -> Any:
    """The ``core.Windowing`` of the job's windowing strategy ``strategy_id``."""
    return pipeline_context_for(job_id, components).windowing_strategies[strategy_id]
