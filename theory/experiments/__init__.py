"""Experiments that run several strategies or designs on one workload and tabulate them:
``tradeoff`` (latency against completeness of watermark strategies), ``propagation``
(in-band against out-of-band), ``systems`` (one trace through the beam, flink and spark
profiles, each difference attributed to a convention)."""

from theory.experiments.systems import Comparison, Conventions, compare_systems
from theory.experiments.tradeoff import DEFAULT_STRATEGIES, Strategy, TradeoffResult, tradeoff

__all__ = [
    "DEFAULT_STRATEGIES",
    "Comparison",
    "Conventions",
    "Strategy",
    "TradeoffResult",
    "compare_systems",
    "tradeoff",
]
