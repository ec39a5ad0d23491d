"""Reading a finished pipeline's metrics past Beam's recursion limit.

FnApiRunner keeps each stage's monitoring infos as
``consolidate(chain(this_bundle, previous))``: one more nested generator per bundle
(``fn_runner.py``, ``_run_stage``). ``result.metrics()`` then recurses once per bundle of
the stage, so a stage of more than about a thousand bundles (a splittable DoFn that
checkpoints often, e.g. a streaming read) raises ``RecursionError`` (Beam 2.77: 900 bundles
read fine, 1,200 do not). :func:`query_metrics` evaluates the same query in a thread with
a large stack and a raised recursion limit. The Pub/Sub reader also checkpoints less
(``idle_poll``), which keeps most reads below the limit in the first place.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = ["query_metrics"]

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
