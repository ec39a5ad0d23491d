"""Every metric kind, committed and attempted, equal to FnApiRunner's.

Each kind (counter, distribution, gauge, string set, bounded trie) is updated from
elements spread over several partitions, in a lean stage (Map/FlatMap), in a stage on
Beam's bundle processor (a DoFn that asks for its window) and after a GroupByKey, so the
runner merges each metric from many bundles. Batch in three runner configurations, and
``--streaming`` (one bundle per micro-batch), each against FnApiRunner. A gauge is
compared by value (its timestamp is the time it was set).
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from spark_backend.runner import PySparkRunner

pytestmark = pytest.mark.slow

NS = "kinds"
WORDS = ["a", "zzz", "bb", "a", "cccc", "zzz", "dd", "e", "ffffff", "bb", "g", "hh"]


def metric_pipeline(p: beam.Pipeline) -> None:
    counter = beam.metrics.Metrics.counter(NS, "counter")
    distribution = beam.metrics.Metrics.distribution(NS, "distribution")
    gauge = beam.metrics.Metrics.gauge(NS, "gauge")
    strings = beam.metrics.Metrics.string_set(NS, "string_set")
    trie = beam.metrics.Metrics.bounded_trie(NS, "bounded_trie")

    def update(word: str) -> list[str]:
        counter.inc(len(word))
        distribution.update(len(word))
        gauge.set(7)
        strings.add(word)
        trie.add(tuple(word))
        return [word]

    class WithWindow(beam.DoFn):
        def process(self, word: str, w: Any = beam.DoFn.WindowParam) -> Any:
            yield from update(word)

    words = p | beam.Create(WORDS, reshuffle=False) | "Spread" >> beam.Reshuffle()
    _ = words | "lean" >> beam.FlatMap(update)
    _ = words | "bundle" >> beam.ParDo(WithWindow())
    _ = (
        words
        | beam.Map(lambda w: (len(w), w))
        | beam.GroupByKey()
        | "grouped" >> beam.FlatMap(lambda kv: [update(w) for w in kv[1]])
    )


def results(result: Any) -> dict[tuple[str, str, str], tuple[Any, Any]]:
    """(kind, step, name) -> (committed, attempted) of every user metric of ``result``."""
    found = result.metrics().query(MetricsFilter().with_namespace(NS))
    table = {}
    for kind, metric_results in found.items():
        for m in metric_results:
            committed, attempted = m.committed, m.attempted
            if kind == "gauges":
                committed, attempted = committed.value, attempted.value
            table[(kind, m.key.step, m.key.metric.name)] = (committed, attempted)
    return table


def run(runner: Any, streaming: bool = False) -> Any:
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = streaming
    p = beam.Pipeline(runner=runner, options=options)
    metric_pipeline(p)
    result = p.run()
    result.wait_until_finish()
    return result


@pytest.fixture(scope="module")
def reference() -> dict[tuple[str, str, str], tuple[Any, Any]]:
    table = results(run(FnApiRunner()))
    kinds = {kind for kind, _, _ in table}
    assert kinds == {"counters", "distributions", "gauges", "string_sets", "bounded_tries"}
    assert len(table) == 5 * 3  # every kind in each of the three steps
    return table


@pytest.mark.parametrize(
    "make",
    [
        PySparkRunner,
        lambda: PySparkRunner(driver_stages=False),
        lambda: PySparkRunner(fast_paths=False),
    ],
    ids=["default", "spark-stages", "no-fast-paths"],
)
def test_metric_kinds_batch(spark: Any, reference: Any, make: Any) -> None:
    assert results(run(make())) == reference


def test_metric_kinds_streaming(spark: Any, reference: Any) -> None:
    assert results(run(PySparkRunner(), streaming=True)) == reference
