"""Combines that Beam's optimiser may pack (``APPLY_COMBINER_PACKING``), with
``--streaming``, against FnApiRunner (one global window: the same values in batch;
BundleBasedDirectRunner refuses these shapes in streaming, "Transform node ...
_GroupByKeyOnly was not replaced as expected").

Beam's runners pack combiners in batch only (Dataflow's pre-optimisation skips
streaming; FnApiRunnerTest's ``_test_pack_combiners`` asserts that no step of a
streaming run is packed). Packed, the streaming run stopped on a GroupByKey its stage
graph did not know (``multiple-combines/Packed[...]/Pack/Group``). Shapes: globally,
per key, and a packing limit (Beam's ``translations_test`` ``test_run_packable_*``;
``Top.Largest`` globally is in ``test_flatten_create``: a flatten with a Create input).
"""

from __future__ import annotations

import re
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.portability import python_urns
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import combiners, core

pytestmark = pytest.mark.slow

VALUES = [6, 3, 1, -1, 9, 1, 5, 2, 0, 6]
PACKED_STEP = re.compile(r".*Packed.*")


class Packable(beam.PTransform):
    """The combines of Beam's packable-combine tests, each output tagged by its name."""

    def __init__(self, limit: bytes = b"") -> None:
        super().__init__()
        self._limit = limit

    def annotations(self) -> dict[str, Any]:
        return {python_urns.APPLY_COMBINER_PACKING: self._limit}

    def expand(self, pcoll: Any) -> Any:
        counter = beam.metrics.Metrics.counter("packed", "calls")

        def smallest(values: Any) -> Any:
            counter.inc()
            return min(values)

        keyed = pcoll | beam.Map(lambda v: ("a", v))
        outputs = [
            pcoll | "min-globally" >> core.CombineGlobally(smallest),
            pcoll | "count-globally" >> combiners.Count.Globally(),
            pcoll | "min-2-globally" >> core.CombineGlobally(min),
            keyed | "min-perkey" >> core.CombinePerKey(min),
            keyed | "count-perkey" >> combiners.Count.PerKey(),
            keyed | "largest-perkey" >> combiners.Top.LargestPerKey(2),
        ]
        return [
            out | f"Tag{i}" >> beam.Map(lambda x, i=i: (i, x)) for i, out in enumerate(outputs)
        ] | beam.Flatten()


def _build(limit: bytes) -> Any:
    def build(p: Any, capture: Any) -> None:
        p | beam.Create(VALUES) | "multiple-combines" >> Packable(limit) | beam.ParDo(capture)

    return build


@pytest.mark.parametrize("limit", [b"", b"2"], ids=["packed", "limit-2"])
def test_packable_combines_streaming_equal_fn_api_runner(run_pipeline: Any, limit: bytes) -> None:
    expected, _ = run_pipeline(_build(limit), runner=FnApiRunner())
    ours, result = run_pipeline(_build(limit))
    assert sorted(ours, key=repr) == sorted(expected, key=repr), (ours, expected)
    assert (0, -1) in ours and (3, ("a", -1)) in ours
    # Beam's streaming expectation (FnApiRunnerTest._test_pack_combiners): nothing packed
    counters = result.metrics().query(beam.metrics.MetricsFilter())["counters"]
    steps = {m.key.step for m in counters if m.key.step}
    assert steps and not any(PACKED_STEP.match(s) for s in steps)
