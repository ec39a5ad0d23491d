"""What a partition's task yields last, on either path: the metrics record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["METRICS", "PartitionSummary"]

#: The buffer id of the metrics record a partition yields last.
METRICS: Final[bytes] = b"__metrics__"


@dataclass(frozen=True)
class PartitionSummary:
    """What a partition reports besides its output: metrics, output sizes, and the
    messages of the InefficientExecutionWarnings Beam's worker raised in a Spark task
    (:mod:`~spark_backend.runner.stages.worker_warnings`)."""

    metrics: bytes  # a serialised ProcessBundleResponse holding the monitoring infos
    sizes: dict[bytes, int]  # buffer id -> encoded bytes written
    warnings: tuple[str, ...] = ()
