"""Experiments that run several strategies or designs on one workload and tabulate them.

==========================  ===========================================================
``tradeoff``                latency against completeness of watermark strategies on one
                            trace (``tradeoff``)
``propagation``             in-band (Flink) against out-of-band (Dataflow) watermark
                            propagation on one workload
``first_panes``             each window's first pane under a source watermark, and the
                            per-strategy summary row (both engines of ``analyze``)
``systems``                 one trace through the beam, flink and spark profiles, each
                            difference attributed to a convention (``compare_systems``)
``idleness``                Flink's ``withIdleness`` over several inputs: per-input
                            periodic watermarks through the valve
``html``                    column tables as HTML: the results' ``_repr_html_``
                            (a notebook shows them as tables)
``uncertainty``             means and t intervals over seeds (``over_seeds``), bootstrap
                            intervals over windows (``bootstrap_windows``)
==========================  ===========================================================
"""

from theory.experiments.systems import Comparison, Conventions, compare_systems
from theory.experiments.tradeoff import DEFAULT_STRATEGIES, Strategy, TradeoffResult, tradeoff
from theory.experiments.uncertainty import IntervalTable, bootstrap_windows, over_seeds

__all__ = [
    "DEFAULT_STRATEGIES",
    "Comparison",
    "Conventions",
    "IntervalTable",
    "Strategy",
    "TradeoffResult",
    "bootstrap_windows",
    "compare_systems",
    "over_seeds",
    "tradeoff",
]
