"""The runner's errors: what a Beam author sees when a pipeline cannot run or fails."""

from __future__ import annotations

__all__ = ["CheckpointError", "PipelineFailedError", "UnsupportedTransformError"]


class UnsupportedTransformError(ValueError):
    """A transform the runner cannot execute, found before any Spark work.

    The message names the transform's label and kind (its URN): the runner never falls
    back to another runner and never drops a transform, so it refuses the whole pipeline.
    """

    def __init__(self, label: str, kind: str, reason: str = "") -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(f"PySparkRunner cannot run transform {label!r} of kind {kind!r}{detail}")
        self.label = label
        self.kind = kind


class PipelineFailedError(RuntimeError):
    """A pipeline failed while running; the message carries the user code's error.

    ``stage`` names the fused stage (its transforms' labels, as Beam's fusion writes
    them) and ``message`` the failing DoFn's error: first one line naming the transform,
    the element (its repr cut short) and the exception, then its Python traceback with
    the user's own frames (:func:`~spark_backend.runner.batch.spark_errors.python_error_message`).
    """

    def __init__(self, stage: str, message: str) -> None:
        head, _, rest = message.partition("\n")
        if head.startswith("transform '"):  # the one line first, then where it ran
            text = f"{head}\nin Beam stage {stage} on Spark\n{rest}"
        else:
            text = f"Beam stage {stage} failed on Spark: {message}"
        super().__init__(text.rstrip("\n"))
        self.stage = stage
        self.message = message


class CheckpointError(ValueError):
    """A streaming checkpoint directory this run cannot use, or a file in it that is
    damaged, of another format or not the run's own: one line naming it and why."""
