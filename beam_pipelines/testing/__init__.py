"""The Beam author's test kit.

- :func:`assert_panes` runs your PTransform on a TestStream and compares each pane with
  theory's engine (imports Beam on first use);
- :func:`assert_pipeline` runs your whole pipeline on a TestStream and checks every
  GroupByKey and CombinePerKey in it against the engine fed that stage's recorded input
  and input watermark (:mod:`.pipeline`; the stages and their records: :mod:`.stages`);
- :func:`expect_panes`: the panes a grouped PCollection must hold, written as read
  (times as ``"1m"``, timings by name), checked when the pipeline runs (:mod:`.expect`);
- :func:`assert_watermark_monotonic`, :func:`assert_no_late_data`, :func:`assert_fires_at`
  (theory only);
- :class:`TestStreamBuilder`, what the ``test_stream`` fixture returns;
- :mod:`beam_pipelines.testing.strategies`: Hypothesis strategies (traces, scripts,
  scripts scaled to the windowing under test, skewed keys, windowing strategies).

The fixtures (``pubsub_emulator``, ``test_stream``, and ``spark`` from spark_backend's
plugin) come from the pytest plugins the package installs. Names load lazily, so
``import beam_pipelines.testing`` does not import Beam.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from theory import lazy_getattr

if TYPE_CHECKING:
    from beam_pipelines.testing.builder import TestStreamBuilder
    from beam_pipelines.testing.expect import expect_panes
    from beam_pipelines.testing.panes import PaneRow, assert_panes
    from beam_pipelines.testing.pipeline import assert_pipeline
    from beam_pipelines.testing.watermarks import (
        assert_fires_at,
        assert_no_late_data,
        assert_watermark_monotonic,
    )

__all__ = [
    "PaneRow",
    "TestStreamBuilder",
    "assert_fires_at",
    "assert_no_late_data",
    "assert_panes",
    "assert_pipeline",
    "assert_watermark_monotonic",
    "expect_panes",
]

_EXPORTS = {
    "PaneRow": "beam_pipelines.testing.panes",
    "assert_panes": "beam_pipelines.testing.panes",
    "assert_pipeline": "beam_pipelines.testing.pipeline",
    "TestStreamBuilder": "beam_pipelines.testing.builder",
    "expect_panes": "beam_pipelines.testing.expect",
    "assert_fires_at": "beam_pipelines.testing.watermarks",
    "assert_no_late_data": "beam_pipelines.testing.watermarks",
    "assert_watermark_monotonic": "beam_pipelines.testing.watermarks",
}


__getattr__ = lazy_getattr("beam_pipelines.testing", _EXPORTS, globals())
