"""Reading a finished pipeline's metrics past Beam's recursion limit.

FnApiRunner keeps each stage's monitoring infos as
``consolidate(chain(this_bundle, previous))``: one more nested generator per bundle
(``fn_runner.py``, ``_run_stage``). ``result.metrics()`` then recurses once per bundle of
the stage, so a stage of more than about a thousand bundles (a splittable DoFn that
checkpoints often, e.g. a streaming read) raises ``RecursionError`` (Beam 2.77: 900 bundles
read fine, 1,200 do not). :func:`query_metrics` evaluates the same query in a thread with
a large stack and a raised recursion limit. The Pub/Sub reader also checkpoints less
(``idle_poll``), which keeps most reads below the limit in the first place.

:func:`dropped_due_to_lateness` reads Beam Java's late-data counter (namespace
:data:`LATE_DATA_NAMESPACE`, name :data:`DROPPED_DUE_TO_LATENESS`) by step, on a runner
that reports it (PySparkRunner does, per GroupByKey and Combine; Beam Python's runners
count nothing).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = [
    "DROPPED_DUE_TO_LATENESS",
    "LATE_DATA_NAMESPACE",
    "dropped_due_to_lateness",
    "query_metrics",
]

#: Beam Java's counter of the elements a GroupByKey dropped as too late, and its
#: namespace (runners-core ``LateDataDroppingDoFnRunner``).
DROPPED_DUE_TO_LATENESS = "droppedDueToLateness"
LATE_DATA_NAMESPACE = "org.apache.beam.runners.core.LateDataDroppingDoFnRunner"

_STACK_BYTES = 512 * 2**20
_RECURSION_LIMIT = 1_000_000
_LOCK = threading.Lock()


def query_metrics(result: Any, metrics_filter: Any = None) -> dict[str, list[Any]]:
    """``result.metrics().query(metrics_filter)``, however many bundles the run had."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = result.metrics().query(metrics_filter)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    with _LOCK:
        old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
        sys.setrecursionlimit(max(old_limit, _RECURSION_LIMIT))
        threading.stack_size(_STACK_BYTES)
        try:
            thread = threading.Thread(target=run, name="query_metrics")
            thread.start()
        finally:
            threading.stack_size(old_stack)
        thread.join()
        sys.setrecursionlimit(old_limit)
    if "error" in box:
        raise box["error"]
    return dict(box["value"])


def dropped_due_to_lateness(result: Any) -> dict[str, int]:
    """Step label -> the elements it dropped as too late (``droppedDueToLateness``), for
    each step the runner counted; empty on a runner that does not count them."""
    from apache_beam.metrics.metric import MetricsFilter

    query = MetricsFilter().with_namespace(LATE_DATA_NAMESPACE).with_name(DROPPED_DUE_TO_LATENESS)
    counters = query_metrics(result, query)["counters"]
    return {r.key.step: int(r.committed) for r in counters}
