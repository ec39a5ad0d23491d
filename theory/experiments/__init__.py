"""Experiments that run several strategies or designs on one workload and tabulate them."""

from theory.experiments.tradeoff import DEFAULT_STRATEGIES, Strategy, TradeoffResult, tradeoff

__all__ = ["DEFAULT_STRATEGIES", "Strategy", "TradeoffResult", "tradeoff"]
