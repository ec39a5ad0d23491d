"""Merging MonitoringInfos of the same metric from many bundles, for every metric kind.

Beam's ``monitoring_infos.consolidate`` merges counters and distributions only and
passes any other kind through once per bundle; FnApiRunner runs a stage as one bundle,
so it never needs more, but a stage on Spark is one bundle per partition (and a
streaming run one per micro-batch). Then ``FnApiMetrics`` keeps whichever copy it reads
last: a StringSet kept one partition's strings. :func:`consolidate` is Beam's with
every kind merged as Beam's metric cells combine them: counters summed, distributions
merged, gauges the latest by timestamp, string sets united (up to Beam's size limit),
bounded tries and histograms combined.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from functools import reduce
from typing import Any

from apache_beam.coders import IterableCoder, StrUtf8Coder, VarIntCoder
from apache_beam.metrics import monitoring_infos as mi
from apache_beam.metrics.cells import BoundedTrieData, HistogramData, StringSetData
from apache_beam.portability.api import metrics_pb2

__all__ = ["consolidate"]

_STRINGS = IterableCoder(StrUtf8Coder())


def _latest(a: bytes, b: bytes) -> bytes:
    # a gauge's payload is (varint time ms, varint value); the later one wins, the
    # first on a tie (Beam's GaugeData.combine)
    time_a, _ = mi._decode_gauge(VarIntCoder(), a)
    time_b, _ = mi._decode_gauge(VarIntCoder(), b)
    return b if time_b > time_a else a


def _string_sets(a: bytes, b: bytes) -> bytes:
    merged = StringSetData(set(_STRINGS.decode(a))).combine(StringSetData(set(_STRINGS.decode(b))))
    return bytes(_STRINGS.encode(sorted(merged.string_set)))


def _bounded_tries(a: bytes, b: bytes) -> bytes:
    trie_a = BoundedTrieData.from_proto(metrics_pb2.BoundedTrie.FromString(a))
    trie_b = BoundedTrieData.from_proto(metrics_pb2.BoundedTrie.FromString(b))
    return bytes(trie_a.combine(trie_b).to_proto().SerializeToString())


def _histograms(a: bytes, b: bytes) -> bytes:
    hist_a = HistogramData.from_proto(metrics_pb2.HistogramValue.FromString(a))
    hist_b = HistogramData.from_proto(metrics_pb2.HistogramValue.FromString(b))
    return bytes(hist_a.combine(hist_b).to_proto().SerializeToString())


_COMBINERS: dict[str, Callable[[bytes, bytes], bytes]] = {
    mi.SUM_INT64_TYPE: mi.sum_payload_combiner,
    mi.DISTRIBUTION_INT64_TYPE: mi.distribution_payload_combiner,
    mi.LATEST_INT64_TYPE: _latest,
    mi.STRING_SET_TYPE: _string_sets,
    mi.BOUNDED_TRIE_TYPE: _bounded_tries,
    mi.HISTOGRAM_TYPE: _histograms,
}


def consolidate(infos: Iterable[Any]) -> Iterator[Any]:
    """``infos`` with the MonitoringInfos of one metric (same URN and labels) merged
    into one, in the order each metric first appears; a kind with no known merge is
    passed through, as Beam's ``consolidate`` does."""
    grouped: dict[Any, list[Any]] = collections.defaultdict(list)
    for info in infos:
        grouped[mi.to_key(info)].append(info)
    for values in grouped.values():
        combiner = _COMBINERS.get(values[0].type)
        if len(values) == 1 or combiner is None:
            yield from values
            continue

        def merge(a: Any, b: Any, combiner: Callable[[bytes, bytes], bytes] = combiner) -> Any:
            return metrics_pb2.MonitoringInfo(
                urn=a.urn,
                type=a.type,
                labels={k: v for k, v in a.labels.items() if b.labels.get(k) == v},
                payload=combiner(a.payload, b.payload),
            )

        yield reduce(merge, values)
